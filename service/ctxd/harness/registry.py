"""The agent harnesses ctxd speaks to, by name: one adapter module each (`adapter.py`).

Imported on the hook path, so a harness's module is imported only when it is asked for:
`ctxd hook claude` pays for Claude Code's adapter alone.
"""

import importlib
from typing import cast

from ctxd.harness.adapter import Adapter, CommandHook, HarnessName

MODULES: dict[HarnessName, str] = {
    "claude": "ctxd.harness.claude",
    "opencode": "ctxd.harness.opencode",
    "codex": "ctxd.harness.codex",
    "gemini": "ctxd.harness.gemini",
}
# The harnesses that run `ctxd hook <name>` for each event (opencode runs ctxd's plugin instead).
COMMAND_HOOKS: tuple[HarnessName, ...] = ("claude", "codex", "gemini")


def adapter(name: HarnessName) -> Adapter:
    """The adapter of a harness (its module imported on first use)."""
    return cast(Adapter, importlib.import_module(MODULES[name]).ADAPTER)


def command_hook(name: str) -> CommandHook | None:
    """The command-hook adapter of a harness that runs `ctxd hook <name>`, else None."""
    if name not in COMMAND_HOOKS:
        return None
    return cast(CommandHook, importlib.import_module(MODULES[cast(HarnessName, name)]).ADAPTER)
