"""Claude Code as ctxd speaks to it: its hook events read, and
`ctxd install|uninstall claude` (ctxd's hooks and MCP server merged into its settings).

Ours are recognised by their command (`… hook claude`) and by the MCP server's name `ctxd`,
so uninstall removes exactly what install added and a second install changes nothing. Hook
commands written by earlier versions (`python -m service … hook claude`) end the same way,
so `ctxd install claude` replaces them. The hook command reads Claude Code with
`hookclient/harnesses.py` alone; this module is the server's and the installer's.

Payload shapes relied on (checked against public sources, not guessed):
Claude Code (hook JSON on stdin; code.claude.com/docs/en/hooks, PostToolUse section; the tool
shapes from `sdk-tools.d.ts` in the npm package @anthropic-ai/claude-code 2.1.332, interfaces
BashInput, BashOutput, FileEditInput, FileWriteInput, NotebookEditInput):
  {"hook_event_name": "PostToolUse" | "PostToolUseFailure" | "UserPromptSubmit", "session_id",
   "transcript_path", "cwd", "tool_name", "tool_input", "tool_response", "tool_use_id",
   "prompt" (UserPromptSubmit), "error" (PostToolUseFailure)}
  Bash:  tool_input {"command", "description", "timeout", "run_in_background"};
         tool_response {"stdout", "stderr", "interrupted", "isImage", "noOutputExpected",
         "backgroundTaskId" (when sent to the background), "backgroundedByUser" (Ctrl+B),
         "timedOutAfterMs" (auto-backgrounded at its timeout), "returnCodeInterpretation"}.
         BashOutput has no exit code. Inferred, not verified against a live CLI: Claude Code
         turns a non-zero exit into a failed tool call unless it interprets the code (grep's
         1 = "No matches found"), so a PostToolUse without interpretation is read as exit 0,
         and a PostToolUseFailure "error" that starts "Exit code N" (the text of the failed
         tool result) gives N; any other error leaves the exit status unknown.
  Stop, SubagentStop: "last_assistant_message", "background_tasks" (the background work in
  flight, from the 2.1.197 binary's schema and its builder: [{"id", "type" ("shell",
  "subagent", "monitor", …), "status" ("running" or "pending": it lists no other), "description",
  "command" (a shell's, cut to 1000 characters with a "… [+N chars]" marker)}]).
  A "duration_ms" (payload) or "durationMs" (tool_response) is used when present; no source
  seen here guarantees either, so a Claude Code command usually has no duration.
  Edit / Write: tool_input {"file_path", ...}; NotebookEdit: {"notebook_path", ...}; MultiEdit
  ({"file_path", "edits"}) is gone from 2.1's tool list but older releases still send it.
"""

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ctxd.discovery.payloads import (
    as_dict,
    as_text,
    command_action,
    duration_ms,
    file_edit_action,
    prompt_action,
)
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
from ctxd.hookclient import env
from ctxd.hookclient.request import LOOPBACK

# `startup` too: a fresh start is where a conversation is bound to its session (and told of
# the checkout's latest); the server hands a dump only to the other sources.
SESSION_SOURCES = "startup|compact|resume|clear|fork"
TOOLS = "Bash|Edit|Write|MultiEdit|NotebookEdit"
KINDS: dict[str, EventKind] = {
    "SessionStart": "start",
    "UserPromptSubmit": "prompt",
    "PostToolUse": "tool",
    "PostToolUseFailure": "tool",
    "PreCompact": "compact",
    "PostCompact": "compacted",
    "SubagentStart": "subagent",
    "Stop": "idle",
    "StopFailure": "failed",
    "SessionEnd": "end",
}
# An event's own id (`event_id`), from the fields Claude Code gives every event: its prompt's
# (`prompt_id`, absent before the first prompt of a process: a start is told apart by its
# source and, on the service's side, the process), a tool call's.
IDENTIFIED: dict[EventKind, tuple[str, ...]] = {
    "start": ("source", "prompt_id"),
    "prompt": ("prompt_id",),
    "tool": ("tool_use_id",),
    "subagent": ("agent_id",),
}


class ClaudeCode:
    name: HarnessName = "claude"
    label = "Claude Code"
    program = "claude"
    programs = ("claude", "claude-code")

    def left_behind(self, command: str) -> str | None:
        return None

    def config_home(self, home: Path) -> Path:
        return home / ".claude"

    def event(self, payload: dict[str, Any]) -> HookEvent:
        name = text_of(payload, "hook_event_name")
        kind = KINDS.get(name, "other")
        response = payload.get("tool_response") if kind == "tool" else None
        response = response if isinstance(response, dict) else {}
        identity = [text_of(payload, field) for field in IDENTIFIED.get(kind, ())]
        return HookEvent(
            kind=kind,
            name=name,
            conversation=text_of(payload, "session_id"),
            cwd=text_of(payload, "cwd"),
            source=text_of(payload, "source"),
            prompt=text_of(payload, "prompt"),
            transcript_path=text_of(payload, "transcript_path"),
            compaction=text_of(payload, "trigger"),
            actions=tuple(tool_actions(payload)) if kind == "tool" else (),
            # a Bash output past its inline limit: the start inline, the whole in this file
            output_file=text_of(response, "persistedOutputPath"),
            summary=text_of(payload, "compact_summary"),
            error=" ".join(filter(None, (text_of(payload, "error"), _details(payload)))),
            said=text_of(payload, "last_assistant_message") if kind == "idle" else "",
            event_id=":".join((name, *identity)) if any(identity) or kind == "start" else "",
            in_flight=_in_flight(payload.get("background_tasks")),
        )

    def notes(self, scope: str) -> list[str]:
        return []

    def plan(
        self, url: str, scope: str, project: Path, home: Path, remove: bool, wake: bool = True
    ) -> list[Change]:
        settings_path, mcp_path = targets(scope, project, home)
        posts_to = f"{url.rstrip('/')}/api/hooks/claude/http" if _posts_itself(url) else None
        hooks = None if remove else config(hook_command(self.name, url), wake, posts_to)["hooks"]
        changes = [_with_hooks(settings_path, hooks)]
        if scope == "project":  # an earlier ctxd put them in the shared settings.json
            changes.append(_with_hooks(project / ".claude" / "settings.json", None))
        server = None if remove else {"type": "http", "url": url.rstrip("/") + "/mcp"}
        new_mcp = with_mcp_server(read_json(mcp_path), server)
        return [*changes, Change(mcp_path, read_text(mcp_path), json_text(new_mcp, mcp_path))]


ADAPTER = ClaudeCode()
HTTP_TIMEOUT_S = 30  # an HTTP hook is waited for: a ctxd that hangs costs at most this


def _posts_itself(url: str) -> bool:
    """Whether Claude Code can post its events to ctxd itself: plain HTTP on this machine
    (the caller's account is the proof, see SECURITY.md) and no token in use (a header would
    need the token in the agent's environment, or in a settings file others may read)."""
    parts = urlsplit(url)
    return parts.scheme == "http" and parts.hostname in LOOPBACK and not env.token_file()


WAKE_TIMEOUT_S = 7260  # the waiter's own ceiling (2 h) and a minute: it ends first


def _in_flight(tasks: Any) -> tuple[str, ...] | None:
    """The command lines of a Stop's or SubagentStop's `background_tasks` that are shells
    (`type` "shell", status "running" or "pending": the only ones Claude Code lists); None
    where the payload has no list (an older release, another event)."""
    if not isinstance(tasks, list):
        return None
    return tuple(
        task["command"]
        for task in tasks
        if isinstance(task, dict)
        and task.get("type") == "shell"
        and task.get("status") in ("running", "pending")
        and isinstance(task.get("command"), str)
    )


def _details(payload: dict[str, Any]) -> str:
    """A StopFailure's `error_details` (the API's answer), in brackets, cut to a line."""
    details = text_of(payload, "error_details")
    return f"({details[:300]})" if details else ""


def _with_hooks(path: Path, hooks: dict[str, list[Any]] | None) -> Change:
    """A Claude Code settings file with ctxd's `hooks` (None: without them)."""
    new_settings = with_hooks(read_json(path), "hook claude", hooks)
    return Change(path, read_text(path), json_text(new_settings, path))


def config(command: str, wake: bool = True, posts_to: str | None = None) -> dict[str, Any]:
    """The `hooks` block for Claude Code's settings.json.

    With `posts_to` (ctxd's URL for events Claude Code posts itself), every event but
    SessionStart is an HTTP hook: Claude Code sends it, no process starts per event, and a
    ctxd that is down costs a refused connection. SessionStart stays a command (Claude Code
    runs no HTTP hook there, and it is the one that starts ctxd when it is down). Without it
    (a token in use, ctxd not on this machine, the plugin's fixed file) each event runs
    `ctxd hook claude`, tool calls asynchronously. With `wake`, a background launch and the
    turn's end also start a waiter (`--wake`, an async rewake hook: it exits 2 with an
    attempt's news, which wakes the idle agent; killed at its timeout, its own ceiling)."""

    def entry(timeout: int, matcher: str | None = None, **extra: Any) -> list[dict[str, Any]]:
        hook: dict[str, Any] = {"type": "command", "command": command, "timeout": timeout, **extra}
        if posts_to is not None and extra.get("posted", True):
            hook = {"type": "http", "url": posts_to, "timeout": min(timeout, HTTP_TIMEOUT_S)}
        hook.pop("posted", None)
        return [{**({"matcher": matcher} if matcher else {}), "hooks": [hook]}]

    waiter = {"type": "command", "command": f"{command} --wake", "async": True,
              "asyncRewake": True, "timeout": WAKE_TIMEOUT_S}  # fmt: skip
    hooks = {
        "PreCompact": entry(60),
        "SessionStart": entry(60, SESSION_SOURCES, posted=False),
        "UserPromptSubmit": entry(60),
        "PostToolUse": entry(30, TOOLS, **({} if posts_to else {"async": True})),
        "PostToolUseFailure": entry(30, "Bash", **({} if posts_to else {"async": True})),
        "PostCompact": entry(10),
        "SubagentStart": entry(30),
        "Stop": entry(10),
        "SubagentStop": entry(10),  # its background tasks: attempts reconciled
        "StopFailure": entry(30),
        "SessionEnd": entry(10),
    }
    if wake:
        hooks["PostToolUse"] = [*hooks["PostToolUse"], {"matcher": "Bash", "hooks": [waiter]}]
        hooks["Stop"] = [{"hooks": [*hooks["Stop"][0]["hooks"], waiter]}]
    return {"hooks": hooks}


def targets(scope: str, project: Path, home: Path) -> tuple[Path, Path]:
    """(the settings file holding the hooks, the file holding the MCP servers) for a scope.
    A project's hooks go in its personal `settings.local.json`: they name this machine's ctxd,
    which a teammate's checkout of the shared `settings.json` would not have."""
    if scope == "project":
        return project / ".claude" / "settings.local.json", project / ".mcp.json"
    return home / ".claude" / "settings.json", home / ".claude.json"


_EXIT_CODE = re.compile(r"^\s*Exit code (-?\d+)")
EDIT_TOOLS = {"Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path"}
EDIT_TOOLS_NOTEBOOK = {"NotebookEdit": "notebook_path"}


def _bash_action(data: dict[str, Any], failed: bool) -> dict[str, Any] | None:
    tool_input = as_dict(data.get("tool_input"))
    command = as_text(tool_input.get("command"))
    if not command:
        return None
    response = data.get("tool_response")
    fields = as_dict(response)
    output = "\n".join(
        part for part in (as_text(fields.get("stdout")), as_text(fields.get("stderr"))) if part
    )
    if isinstance(response, str):
        output = response
    background = (
        tool_input.get("run_in_background") is True
        or bool(as_text(fields.get("backgroundTaskId")))
        or fields.get("backgroundedByUser") is True
        or bool(fields.get("timedOutAfterMs"))
    )
    exit_status: int | None = None
    if failed:
        error = as_text(data.get("error"))
        output = output or error
        if match := _EXIT_CODE.match(error):
            exit_status = int(match[1])
    elif (
        not background
        and not fields.get("interrupted")
        and not fields.get("returnCodeInterpretation")
    ):
        exit_status = 0  # see the module docstring: success without interpretation means 0
    took_ms = duration_ms(data.get("duration_ms"))
    if took_ms is None:
        took_ms = duration_ms(fields.get("durationMs"))
    return command_action(
        command,
        cwd=as_text(data.get("cwd")),
        exit_status=exit_status,
        duration_s=took_ms / 1000 if took_ms is not None else None,
        output=output,
        background=background,
        tool_id=as_text(data.get("tool_use_id")),
        harness="claude",
    )


def tool_actions(data: Any) -> list[dict[str, Any]]:
    """The actions in one Claude Code hook payload (PostToolUse[Failure], UserPromptSubmit)."""
    if not isinstance(data, dict):
        return []
    event = as_text(data.get("hook_event_name"))
    if event == "UserPromptSubmit":
        text = as_text(data.get("prompt"))
        return [prompt_action(text, harness="claude")] if text.strip() else []
    if event not in ("PostToolUse", "PostToolUseFailure"):
        return []
    tool = as_text(data.get("tool_name"))
    if tool == "Bash":
        action = _bash_action(data, failed=event == "PostToolUseFailure")
        return [action] if action else []
    if event == "PostToolUseFailure":
        return []  # an edit that failed changed nothing
    key = EDIT_TOOLS.get(tool) or EDIT_TOOLS_NOTEBOOK.get(tool)
    path = as_text(as_dict(data.get("tool_input")).get(key)) if key else ""
    if not path:
        return []
    return [file_edit_action(path, tool, cwd=as_text(data.get("cwd")), harness="claude")]
