"""Google's Gemini CLI as ctxd speaks to it: its hook events read, its hook output written, and
`ctxd install|uninstall gemini` (ctxd's hooks and MCP server merged into its settings.json).

Gemini CLI (0.61) runs command hooks with Claude Code's nesting
(`{"hooks": {"Event": [{"matcher"?, "hooks": [{"type": "command", "command", "name",
"timeout"}]}]}}`, timeouts in milliseconds, JSON on stdin and out) under its own event names:
`SessionStart` (source startup, resume, clear), `BeforeAgent` (the prompt, once per turn),
`AfterTool`, `AfterAgent` (the turn's end), `PreCompress` (trigger auto or manual),
`SessionEnd`. `hookSpecificOutput.additionalContext` of a SessionStart or BeforeAgent reaches
the model inside the turn's prompt as `<hook_context>…</hook_context>`, with `<` and `>`
written as `&lt;` and `&gt;`; the BeforeAgent payload's `prompt` then starts with the
SessionStart's context, which is read off here. Every hook is awaited (there are no
asynchronous ones), and none runs in a folder Gemini does not trust, which the installer says.

PreCompress with trigger "auto" fires before *every* model request, before Gemini checks
whether the history has grown past its threshold (`ChatCompressionService.compress`: the hook
first, then `if tokens < threshold * limit: NOOP`), so a payload cannot tell a compaction from
a model call. A snapshot per model call would make each one wait on a full snapshot, so an
automatic one is a compaction to ctxd at most once per conversation every
`AUTO_COMPACT_EVERY_S` (the other hook events' snapshots keep the state between); a manual
one (`/compress`, which always compresses) is a compaction each time.

Ours are recognised by their command (`… hook gemini`) and the MCP server by its name `ctxd`,
so uninstall removes exactly what install added and a second install changes nothing. Gemini
reads settings.json with comments allowed; one that has them is not JSON here and is not
touched. Standard library only: the hook path imports it.
"""

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from ctxd.discovery import payloads
from ctxd.harness.adapter import (
    EventKind,
    HarnessName,
    HookEvent,
    hook_command,
    hook_output,
    text_of,
)
from ctxd.harness.files import (
    Change,
    json_text,
    read_json,
    read_text,
    with_hooks,
    with_mcp_server,
)

INJECT_EVENTS = ("SessionStart", "BeforeAgent")
TOOLS = "run_shell_command|write_file|replace"  # a regular expression, as Gemini reads it
KINDS: dict[str, EventKind] = {
    "SessionStart": "start",  # source: startup, resume, clear
    "BeforeAgent": "prompt",
    "AfterTool": "tool",
    "PreCompress": "compact",  # an automatic one only when due: see CompactionGuard
    "AfterAgent": "idle",
    "SessionEnd": "end",
}
# Gemini's words for a start, where they differ from ctxd's (`compress`: in its docs, not sent
# by 0.61, which compresses within a session without a SessionStart).
SOURCES = {"compress": "compact"}
AUTO_COMPACT_EVERY_S = 600.0
# What Gemini sends as an AfterAgent's `prompt_response` when the turn had no text.
NO_RESPONSE = "[no response text]"
# A SessionStart's context, which Gemini puts before the prompt a BeforeAgent payload carries.
_HOOK_CONTEXT = re.compile(r"\A(?:\s*<hook_context>.*?</hook_context>)+\s*", re.DOTALL)
TRUST_NOTE = (
    "Gemini CLI runs hooks only in a folder it trusts: trust the folder when `gemini` asks, "
    "or pass `--skip-trust` (GEMINI_CLI_TRUST_WORKSPACE=true) to a headless run."
)


class CompactionGuard:
    """Which automatic PreCompress of a conversation stands for a compaction: the first, then
    one at most every `every_s` (the adapter is the server's, so this lives as long as it)."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def due(self, conversation: str) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(conversation, -self.every_s) < self.every_s:
                return False
            self._last = {c: t for c, t in self._last.items() if now - t < self.every_s}
            self._last[conversation] = now
            return True


class Gemini:
    name: HarnessName = "gemini"
    label = "Gemini CLI"
    program = "gemini"
    # Events a person waits on get the time a fresh snapshot may take; the others are quick.
    slow_events = {"SessionStart": 30.0, "BeforeAgent": 30.0, "PreCompress": 60.0}
    # Events whose trouble the person should see: not PreCompress, which fires on every model
    # request, nor a tool call's.
    tell_events: tuple[str, ...] = ("SessionStart", "BeforeAgent")

    def left_behind(self, command: str) -> str | None:
        return None

    def config_home(self, home: Path) -> Path:
        return user_folder(home)

    def __init__(self) -> None:
        self.compactions = CompactionGuard(AUTO_COMPACT_EVERY_S)

    def event_name(self, payload: dict[str, Any]) -> str | None:
        return text_of(payload, "hook_event_name") or None

    def event(self, payload: dict[str, Any]) -> HookEvent:
        name = text_of(payload, "hook_event_name")
        conversation = text_of(payload, "session_id")
        kind = KINDS.get(name, "other")
        trigger = text_of(payload, "trigger")
        if kind == "compact" and trigger != "manual" and not self.compactions.due(conversation):
            kind = "other"  # a model request like any other, as far as anyone can tell
        source = text_of(payload, "source")
        return HookEvent(
            kind=kind,
            name=name,
            conversation=conversation,
            cwd=text_of(payload, "cwd"),
            source=SOURCES.get(source, source),
            prompt=_HOOK_CONTEXT.sub("", text_of(payload, "prompt")),
            # Gemini's own session JSONL, not a Claude Code transcript: ctxd reads the
            # objective from the first prompt's BeforeAgent instead
            transcript_path="",
            compaction=trigger,
            actions=tuple(payloads.from_gemini(payload)) if kind == "tool" else (),
            said=_said(payload) if kind == "idle" else "",
        )

    def output(self, event: str, answer: dict[str, Any]) -> dict[str, Any] | None:
        return hook_output(event, answer, INJECT_EVENTS)

    def trouble(self, event: str, message: str) -> dict[str, Any] | None:
        return hook_output(event, {"message": message}, ()) if event in self.tell_events else None

    def wakes(self, event: str, payload: dict[str, Any]) -> bool | None:
        return None  # no hook of its starts a turn (README: which harness can be woken)

    def remember(self, event: str, sid: str) -> None:
        """Gemini CLI has no file of exports for its shells: nothing to keep."""

    def notes(self, scope: str) -> list[str]:
        return [TRUST_NOTE]

    def plan(
        self, url: str, scope: str, project: Path, home: Path, remove: bool, wake: bool = True
    ) -> list[Change]:
        path = settings_path(scope, project, home)
        settings = read_json(path)
        ours = None if remove else config(hook_command(self.name, url))
        server = None if remove else {"type": "http", "url": url.rstrip("/") + "/mcp"}
        after = with_mcp_server(with_hooks(settings, "hook gemini", ours), server)
        return [Change(path, read_text(path), json_text(after, path))]


ADAPTER = Gemini()


def _said(payload: dict[str, Any]) -> str:
    """An AfterAgent's `prompt_response`: the text of the whole turn, which Gemini (0.61)
    replaces with NO_RESPONSE when the model said nothing."""
    text = text_of(payload, "prompt_response")
    return "" if text == NO_RESPONSE else text


def config(command: str) -> dict[str, list[Any]]:
    """ctxd's entries of Gemini's `hooks` block, timeouts in milliseconds. Gemini awaits every
    hook, so a tool call waits on ctxd at most the hook's quick budget (`hook.py`); the name
    lets a person switch them off together (`/hooks disable ctxd`), and Gemini runs a hook
    that user and project settings both hold once."""

    def entry(timeout_ms: int, matcher: str | None = None) -> list[dict[str, Any]]:
        hook = {"type": "command", "name": "ctxd", "command": command, "timeout": timeout_ms}
        return [{**({"matcher": matcher} if matcher else {}), "hooks": [hook]}]

    return {
        "SessionStart": entry(60_000),  # every source: startup binds, the others get a dump
        "BeforeAgent": entry(60_000),
        "AfterTool": entry(30_000, TOOLS),
        "PreCompress": entry(60_000),
        "AfterAgent": entry(10_000),
        "SessionEnd": entry(10_000),
    }


def user_folder(home: Path) -> Path:
    """Gemini's own folder: `.gemini` in `$GEMINI_CLI_HOME`, else in the user's home."""
    return Path(os.environ.get("GEMINI_CLI_HOME") or home) / ".gemini"


def settings_path(scope: str, project: Path, home: Path) -> Path:
    """The settings.json holding the hooks and MCP servers: the project's `.gemini/`, else
    the one in Gemini's home (`$GEMINI_CLI_HOME`, else the user's home)."""
    if scope == "project":
        return project / ".gemini" / "settings.json"
    return user_folder(home) / "settings.json"
