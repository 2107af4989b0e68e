"""The agent harnesses ctxd speaks to, by name: one adapter module each (`adapter.py`)."""

from ctxd.harness import claude, codex, opencode
from ctxd.harness.adapter import Adapter, CommandHook, HarnessName

ADAPTERS: dict[HarnessName, Adapter] = {
    a.name: a for a in (claude.ADAPTER, opencode.ADAPTER, codex.ADAPTER)
}
# The harnesses that run `ctxd hook <name>` for each event (opencode runs ctxd's plugin instead).
COMMAND_HOOKS: dict[str, CommandHook] = {"claude": claude.ADAPTER, "codex": codex.ADAPTER}
