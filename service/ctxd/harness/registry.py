"""The agent harnesses ctxd speaks to, by name: one adapter module each (`adapter.py`), its
module imported when it is first asked for. Which of them run a hook command per event, and
how that command reads and answers them, is the hook client's (`hookclient/harnesses.py`)."""

import importlib
from typing import cast

from ctxd.harness.adapter import Adapter, HarnessName

MODULES: dict[HarnessName, str] = {
    "claude": "ctxd.harness.claude",
    "opencode": "ctxd.harness.opencode",
    "codex": "ctxd.harness.codex",
    "gemini": "ctxd.harness.gemini",
}


def adapter(name: HarnessName) -> Adapter:
    """The adapter of a harness (its module imported on first use)."""
    return cast(Adapter, importlib.import_module(MODULES[name]).ADAPTER)


def programs() -> set[str]:
    """The names every harness's programs run under (its command, its npm launcher's)."""
    return {name for harness in MODULES for name in adapter(harness).programs}
