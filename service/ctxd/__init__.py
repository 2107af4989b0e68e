"""ctxd: context snapshots and session recovery for long AI-agent work sessions."""

from pathlib import Path

__version__ = "0.1.0"
# Where the CLI and the hooks find the service unless CTXD_URL or --url says otherwise.
DEFAULT_URL = "http://127.0.0.1:8765"


def shipped(folder: str) -> Path:
    """A data folder of ctxd (`templates`, `integrations`): inside the package when installed
    from a wheel (see pyproject.toml), else the repository's top-level folder of that name."""
    here = Path(__file__).resolve().parent
    inside = here / folder
    return inside if inside.is_dir() else here.parent.parent / folder
