"""ctxd: context snapshots and session recovery for long AI-agent work sessions.

Imported by every hook command before anything else (`hookclient`): nothing here may cost
an import beyond `os` (pathlib is imported where a path is made)."""

import os

TYPE_CHECKING = False  # typing's own flag costs the hook its import
if TYPE_CHECKING:
    from pathlib import Path

__version__ = "0.1.0"
# Where the CLI and the hooks find the service unless CTXD_URL or --url says otherwise.
DEFAULT_URL = "http://127.0.0.1:8765"


def user_data_dir() -> "Path":
    """Where a service keeps its store unless CTXD_DATA_DIR or --data-dir says otherwise: one
    per user, whichever way it was started (`ctxd serve`, a hook's autostart, the unit)."""
    from pathlib import Path

    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "ctxd"


def shipped(folder: str) -> "Path":
    """A data folder of ctxd (`templates`, `integrations`): inside the package when installed
    from a wheel (see pyproject.toml), else the repository's top-level folder of that name."""
    from pathlib import Path

    here = Path(__file__).resolve().parent
    inside = here / folder
    return inside if inside.is_dir() else here.parent.parent / folder
