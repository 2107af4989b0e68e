"""The harness adapter contract: what one agent harness's hooks say, in ctxd's own words.

Each harness (Claude Code, opencode, …) is one module of this package with one `ADAPTER`
object: it turns the harness's hook payload into a harness-neutral `HookEvent`, plans what
`ctxd install|uninstall <harness>` writes (for a harness that runs a command per event, the
command `hook_command` makes). `registry.py` lists them; the HTTP route, the use cases and the
installer dispatch through it. The hook command itself reads the harness with
`ctxd.hookclient` alone (its `harnesses.py`), and the server answers an event a harness posts
itself in the shape written there.
"""

from __future__ import annotations

import os
import shlex
import sys
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from ctxd import DEFAULT_URL
from ctxd.hookclient import env

if TYPE_CHECKING:
    from pathlib import Path

    from ctxd.harness.files import Change

# The harnesses ctxd speaks to: the one type of their names (the route, the CLI, sessions).
HarnessName = Literal["claude", "opencode", "codex", "gemini"]

# What a hook event means to ctxd, whatever the harness called it.
EventKind = Literal[
    "start",  # a conversation starts or comes back (`source` says how)
    "prompt",  # the user sent a prompt
    "tool",  # a tool call ended: its actions are recorded
    "compact",  # the harness is about to compact its context
    "compacted",  # it compacted it: its own summary (`summary`) goes with the version before
    "failed",  # the turn ended on an error (`error`): a snapshot of where it stood
    "interrupted",  # the person stopped the turn (Esc): a snapshot of where it stood
    "subagent",  # a subagent starts, with none of the conversation: it is handed the dump
    "idle",  # the turn ended; the agent waits
    "end",  # the conversation ended
    "other",  # nothing ctxd acts on (still binds the conversation)
]
# A start from one of these sources comes after the context was lost: it gets a dump.
RESUME_SOURCES = ("compact", "resume", "clear", "fork")


class HookEvent(NamedTuple):
    """One hook event, harness-neutral."""

    kind: EventKind
    name: str  # the harness's own name for it (for notes and logs)
    conversation: str = ""  # the harness's id of the conversation
    cwd: str = ""
    source: str = ""  # of a start: startup, resume, compact, clear, fork
    prompt: str = ""
    transcript_path: str = ""
    compaction: str = ""  # of a compact: manual or auto
    actions: tuple[dict[str, Any], ...] = ()  # of a tool call (`discovery/payloads.py` shapes)
    output_file: str = ""  # of a tool call: where the harness kept an output too long to inline
    summary: str = ""  # of a compacted: the harness's own summary of the conversation
    error: str = ""  # of a failed turn: what failed, in the harness's words
    said: str = ""  # of an idle: what the agent said as its turn ended (its last reply)
    # This very event, where the harness names it (a prompt's or a tool call's id): the same
    # event delivered twice (ctxd's hooks wired by its plugin and by `ctxd install`) counts once.
    event_id: str = ""
    # Of a turn's end, where the harness lists them (Claude Code's `background_tasks`): the
    # command lines of its background shells still in flight; None where it said nothing.
    in_flight: tuple[str, ...] | None = None


class Adapter(Protocol):
    """One agent harness, as ctxd speaks to it."""

    name: HarnessName
    label: str  # its name for people: "Claude Code"
    program: str  # its command, found on PATH where it is installed: "claude"
    # The names its processes run under (its command's; a word of its npm launcher's path):
    # never the agent's work, whatever folder they run in (`discovery/procscan.py`).
    programs: tuple[str, ...]

    def event(self, payload: dict[str, Any]) -> HookEvent:
        """The harness's hook payload (as its hook forwarded it) in ctxd's words."""
        ...

    def plan(
        self, url: str, scope: str, project: Path, home: Path, remove: bool, wake: bool = True
    ) -> list[Change]:
        """What `ctxd install` (or, with `remove`, uninstall) writes, file by file."""
        ...

    def notes(self, scope: str) -> list[str]:
        """What the person must still do after an install (Codex: trust the new hooks)."""
        ...

    def left_behind(self, command: str) -> str | None:
        """Why a process `command` sent off ended as the command returned, where the harness
        ends such processes itself (said of an attempt that ended at once, its log holding no
        error); None where it leaves them be."""
        ...

    def config_home(self, home: Path) -> Path:
        """The folder of its user settings: where it is, the harness is installed (a person
        may run it by a path or an alias, its program not on PATH)."""
        ...


def hook_command(harness: str, url: str) -> str:
    """The hook command a harness's settings hold: this installation's interpreter running the
    hook client by its path, with no site and no environment (`python3 -S -I
    …/ctxd/hookclient/__main__.py HARNESS`: no `ctxd` command, no import of the server, so the
    harness needs no PATH and an event costs little more than a bare interpreter's start),
    with `--url` unless it is the default, and the token file in use (CTXD_TOKEN_FILE) when
    there is one: the harness's environment need not carry either."""
    import ctxd.hookclient

    entry = os.path.join(os.path.dirname(os.path.abspath(ctxd.hookclient.__file__)), "__main__.py")
    argv = [sys.executable, "-S", "-I", entry]
    if url != DEFAULT_URL:
        argv += ["--url", url]
    if token_file := env.token_file():
        argv += ["--token-file", os.path.abspath(token_file)]
    return shlex.join([*argv, "hook", harness])  # told as ctxd's by its end: `hook HARNESS`


def text_of(payload: dict[str, Any], name: str) -> str:
    """A payload's text field, or "" when it is absent or not text (a hook's input is the
    harness's, and may be anything)."""
    value = payload.get(name)
    return value if isinstance(value, str) else ""
