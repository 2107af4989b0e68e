"""Google's Gemini CLI as ctxd speaks to it: its hook events read, and
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
touched. The hook command reads Gemini CLI with `hookclient/harnesses.py` alone; this module
is the server's and the installer's.

Payload shapes relied on (checked against public sources, not guessed):
Gemini CLI (hook JSON on stdin, as the real CLI of the npm package @google/gemini-cli 0.61.0
sent it when driven offline here; the shell tool's text from its `shell.ts`):
  {"hook_event_name", "session_id", "transcript_path" (its own session JSONL), "cwd",
   "timestamp", "tool_name", "tool_input", "tool_response" (AfterTool)}
  run_shell_command: tool_input {"command", "description", "dir_path" (the cwd, relative to
  the payload's "cwd"), "is_background"}; tool_response {"llmContent", "returnDisplay",
  "error"?}, llmContent the text the model reads, inside `<untrusted_context>` lines:
  sections "Output: …" (stdout and stderr together, "(empty)" when none), "Error: …" (a
  spawn failure), "Exit Code: N" (only when not 0), "Signal: …", "Background PIDs: …",
  "Process Group PGID: N", one per line; a command sent to the background or cancelled has a
  sentence instead ("Command moved to background (PID: N). …", "Command was cancelled …").
  So an exit status is known: N, or 0 when the command ended with no "Exit Code" line.
  A command it blocks (command substitution: `$(…)`, backticks) or that was cancelled before
  it started has no sections, only a sentence ("… the command was blocked."): not run.
  write_file / replace: tool_input {"file_path", …}; an edit that failed has an "error".
"""

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from ctxd.discovery.payloads import as_dict, as_text, command_action, file_edit_action
from ctxd.harness.adapter import (
    EventKind,
    HarnessName,
    HookEvent,
    hook_command,
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
    programs = ("gemini",)

    def left_behind(self, command: str) -> str | None:
        return None

    def config_home(self, home: Path) -> Path:
        return user_folder(home)

    def __init__(self) -> None:
        self.compactions = CompactionGuard(AUTO_COMPACT_EVERY_S)

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
            actions=tuple(tool_actions(payload)) if kind == "tool" else (),
            said=_said(payload) if kind == "idle" else "",
        )

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


GEMINI_EDIT_TOOLS = ("write_file", "replace")
_GEMINI_SECTION = re.compile(
    r"^(Output|Error|Exit Code|Signal|Background PIDs|Process Group PGID): ", re.MULTILINE
)
# The sentences of a shell call Gemini CLI never ran: its command-substitution block, and a
# cancel before the start ("Command injection detected: … the command was blocked.").
_NOT_RUN = re.compile(r"the command was blocked|cancelled by user before it could start")
_GEMINI_WRAPPER = re.compile(r"^\s*<untrusted_context>\n?|\n?</untrusted_context>\s*$")


def _gemini_sections(text: str) -> dict[str, str]:
    """The sections of a Gemini shell result ("Output: …", "Exit Code: 1", …) by name."""
    text = _GEMINI_WRAPPER.sub("", text)
    marks = list(_GEMINI_SECTION.finditer(text))
    return {
        mark[1]: text[mark.end() : marks[n + 1].start() if n + 1 < len(marks) else None].strip()
        for n, mark in enumerate(marks)
    }


def _under(cwd: str, path: str) -> str:
    """`path` as Gemini's tools take it: relative to the payload's cwd unless absolute."""
    if not path or path.startswith("/") or not cwd:
        return path
    return f"{cwd.rstrip('/')}/{path}"


def tool_actions(data: Any) -> list[dict[str, Any]]:
    """The actions in one Gemini CLI AfterTool payload (its shell tool, its file edits); see
    the module docstring for the shape."""
    if not isinstance(data, dict) or as_text(data.get("hook_event_name")) != "AfterTool":
        return []
    tool, cwd = as_text(data.get("tool_name")), as_text(data.get("cwd"))
    tool_input, response = (
        as_dict(data.get("tool_input")),
        as_dict(data.get("tool_response")),
    )
    if tool in GEMINI_EDIT_TOOLS:
        path = _under(cwd, as_text(tool_input.get("file_path")))
        if not path or response.get("error"):
            return []  # an edit that failed changed nothing
        return [file_edit_action(path, tool, cwd=cwd, harness="gemini")]
    command = as_text(tool_input.get("command"))
    if tool != "run_shell_command" or not command:
        return []
    content = response.get("llmContent")
    text = content if isinstance(content, str) else as_text(response.get("returnDisplay"))
    sections = _gemini_sections(text)
    background = tool_input.get("is_background") is True or "moved to background" in text
    exit_status: int | None = None
    if code := re.fullmatch(r"-?\d+", sections.get("Exit Code", "")):
        exit_status = int(code[0])
    elif "Output" in sections and not {"Signal", "Error"} & sections.keys() and not background:
        exit_status = 0  # Gemini writes the exit code only when it is not 0
    output = "\n".join(sections[k] for k in ("Output", "Error") if k in sections)
    if not sections:
        output = _GEMINI_WRAPPER.sub("", text)  # a cancelled or backgrounded command's sentence
    refused = ""
    if not sections and not background and _NOT_RUN.search(output):
        refused = as_text(response.get("returnDisplay")) or output
    action = command_action(
        command,
        cwd=_under(cwd, as_text(tool_input.get("dir_path"))) or cwd,
        exit_status=exit_status,
        output="" if output == "(empty)" else output,
        background=background,
        harness="gemini",
        refused=refused,
    )
    return [action]
