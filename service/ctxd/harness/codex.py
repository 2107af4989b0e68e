"""OpenAI's Codex CLI as ctxd speaks to it: its hook events read, and
`ctxd install|uninstall codex` (ctxd's hooks merged into its `hooks.json`, ctxd's MCP server
into its `config.toml`).

Codex (0.171) runs command hooks with Claude Code's nesting and field names
(`{"hooks": {"Event": [{"matcher"?, "hooks": [{"type": "command", "command", "timeout"}]}]}}`,
JSON on stdin, `hookSpecificOutput.additionalContext` back, which reaches the model as a
developer message). Its differences, seen with the real CLI: no `async` hooks (a hook marked
so never runs), a `SessionEnd` hook's timeout clamped to 3 s, and a new or changed hook does
not run until a person trusts it (`/hooks` in the TUI; nothing says an untrusted hook was
skipped), so the installer says so. A project's `.codex/hooks.json` loads only in a project
Codex trusts.

Ours are recognised by their command (`… hook codex`) and by the MCP table's marker line, so
uninstall removes exactly what install added and a second install changes nothing. The MCP
server is written into `config.toml` as a marked `[mcp_servers.ctxd]` table appended to the
file's text (the standard library reads TOML but does not write it, and a rewrite would lose
the user's comments); the result is parsed before it is planned, and a `ctxd` server the user
wrote is left alone. The hook command reads Codex with `hookclient/harnesses.py` alone; this
module is the server's and the installer's.

Payload shapes relied on (checked against public sources, not guessed):
Codex CLI (hook JSON on stdin, as the real CLI of the npm package @openai/codex 0.171.0 sent
it when driven offline here; its hooks take Claude Code's field names):
  {"hook_event_name", "session_id", "turn_id" (events of a turn), "transcript_path" (its
   rollout JSONL), "cwd", "model", "permission_mode", "source" (SessionStart: "startup" and
   "resume" seen; "clear" and "compact" not driven here), "prompt" (UserPromptSubmit),
   "tool_name", "tool_input", "tool_response", "tool_use_id" (PreToolUse, PostToolUse),
   "stop_hook_active", "last_assistant_message" (Stop), "reason" (SessionEnd)}
  The model's shell tool is `exec_command` (arguments {"cmd", ...}); its hooks call it "Bash":
  tool_input {"command"} (a "workdir" there, where a release sends one, is the cwd, relative
  to the payload's "cwd"), tool_response the output text (a string). No exit status reaches
  the hook: a command that exits 1 comes as a PostToolUse like any other, so a Codex
  command's exit is unknown.
"""

import os
import re
from pathlib import Path
from typing import Any

from ctxd.discovery.payloads import as_dict, as_text, command_action, prompt_action
from ctxd.harness.adapter import (
    EventKind,
    HarnessName,
    HookEvent,
    hook_command,
    text_of,
)
from ctxd.harness.files import (
    MCP_NAME,
    Change,
    InstallError,
    json_text,
    read_json,
    read_text,
    with_hooks,
)

TOOLS = "Bash"  # the name Codex's hooks give its shell tool (`exec_command`)
KINDS: dict[str, EventKind] = {
    "SessionStart": "start",  # source: startup, resume, clear, compact
    "UserPromptSubmit": "prompt",
    "PostToolUse": "tool",
    "PreCompact": "compact",
    "PostCompact": "other",  # the dump comes with the SessionStart (source compact) after it
    "Stop": "idle",
    "Interrupt": "interrupted",  # the person pressed Esc: where the turn stood is kept
    "SessionEnd": "end",
}
MCP_MARK = "# ctxd's MCP server: `ctxd uninstall codex` removes this table"
# the table as install writes it, with the blank line put before it
_MCP_BLOCK = re.compile(
    r"\n?^" + re.escape(MCP_MARK) + r'\n\[mcp_servers\.ctxd\]\nurl = "(?:[^"\\\n]|\\.)*"\n?',
    re.MULTILINE,
)
TRUST_NOTE = (
    "Codex runs a new or changed hook only once you trust it, and says nothing of one it "
    "skipped: open `codex`, type `/hooks`, and trust ctxd's hooks (`… hook codex`)."
)
PROJECT_NOTE = (
    "A project's .codex/hooks.json loads only in a project Codex trusts "
    '(`[projects."DIR"] trust_level = "trusted"` in your ~/.codex/config.toml).'
)


class Codex:
    name: HarnessName = "codex"
    label = "Codex"
    program = "codex"
    programs = ("codex",)

    def left_behind(self, command: str) -> str | None:
        """Codex ends a command's process group as the command returns: a `nohup … &` goes
        with it, silently; `setsid` starts a group of its own, which stays."""
        if "setsid" in command:
            return None
        return (
            "ended as its command returned: Codex ends a command's process group (launch"
            " it with `setsid nohup … &`)"
        )

    def config_home(self, home: Path) -> Path:
        return user_folder(home)

    def event(self, payload: dict[str, Any]) -> HookEvent:
        name = text_of(payload, "hook_event_name")
        kind = KINDS.get(name, "other")
        return HookEvent(
            kind=kind,
            name=name,
            conversation=text_of(payload, "session_id"),
            cwd=text_of(payload, "cwd"),
            source=text_of(payload, "source"),
            prompt=text_of(payload, "prompt"),
            # a Codex rollout, not a Claude Code transcript: ctxd reads the objective from
            # the first prompt's UserPromptSubmit instead
            transcript_path="",
            compaction=text_of(payload, "trigger"),
            actions=tuple(tool_actions(payload)) if kind == "tool" else (),
            said=text_of(payload, "last_assistant_message") if kind == "idle" else "",
        )

    def notes(self, scope: str) -> list[str]:
        return [TRUST_NOTE] + ([PROJECT_NOTE] if scope == "project" else [])

    def plan(
        self, url: str, scope: str, project: Path, home: Path, remove: bool, wake: bool = True
    ) -> list[Change]:
        hooks_path, config_path = targets(scope, project, home)
        ours = None if remove else config(hook_command(self.name, url))["hooks"]
        new_settings = with_hooks(read_json(hooks_path), "hook codex", ours)
        before_toml = read_text(config_path)
        after_toml = mcp_toml(before_toml, None if remove else url, config_path)
        return [
            Change(hooks_path, read_text(hooks_path), json_text(new_settings, hooks_path)),
            Change(config_path, before_toml, after_toml),
        ]


ADAPTER = Codex()


def config(command: str) -> dict[str, Any]:
    """The `hooks` block of Codex's hooks.json. Codex has no asynchronous hooks, so a tool
    call waits on ctxd at most the hook's quick budget (`hook.py`)."""

    def entry(timeout: int, matcher: str | None = None) -> list[dict[str, Any]]:
        hook = {"type": "command", "command": command, "timeout": timeout}
        return [{**({"matcher": matcher} if matcher else {}), "hooks": [hook]}]

    return {
        "hooks": {
            "SessionStart": entry(60),  # every source: startup binds, the others get a dump
            "UserPromptSubmit": entry(60),
            "PostToolUse": entry(30, TOOLS),
            "PreCompact": entry(60),
            "PostCompact": entry(10),
            "Stop": entry(10),
            "Interrupt": entry(10),
            "SessionEnd": entry(3),  # Codex clamps it to 3 s
        }
    }


def user_folder(home: Path) -> Path:
    """Codex's home: `$CODEX_HOME`, else `~/.codex`."""
    return Path(os.environ.get("CODEX_HOME") or home / ".codex")


def targets(scope: str, project: Path, home: Path) -> tuple[Path, Path]:
    """(hooks.json, config.toml) for a scope: the project's `.codex/`, else Codex's home
    (`$CODEX_HOME`, else `~/.codex`)."""
    folder = project / ".codex" if scope == "project" else user_folder(home)
    return folder / "hooks.json", folder / "config.toml"


def mcp_toml(text: str, url: str | None, path: Path) -> str:
    """config.toml's text with ctxd's marked MCP table replaced (None: removed). A `ctxd`
    server ctxd did not write is kept as it is; a file that is not TOML is not touched."""
    import tomllib  # only when installing

    kept = _MCP_BLOCK.sub("", text)
    if url is None:
        return kept
    try:
        data = tomllib.loads(kept)
    except tomllib.TOMLDecodeError as exc:
        raise InstallError(f"{path} is not TOML ({exc}); not touched") from None
    servers = data.get("mcp_servers")
    if isinstance(servers, dict) and MCP_NAME in servers:
        return text  # the user's own `ctxd` server: not ours to change
    endpoint = _toml_string(url.rstrip("/") + "/mcp")
    block = f'{MCP_MARK}\n[mcp_servers.{MCP_NAME}]\nurl = "{endpoint}"\n'
    lead = "" if not kept else kept + ("\n" if kept.endswith("\n") else "\n\n")
    after = lead + block
    try:
        tomllib.loads(after)  # e.g. `mcp_servers = {…}` inline cannot take a new table
    except tomllib.TOMLDecodeError as exc:
        raise InstallError(f"{path}: ctxd's MCP table would not fit in it ({exc})") from None
    return after


def _toml_string(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def tool_actions(data: Any) -> list[dict[str, Any]]:
    """The actions in one Codex CLI hook payload (PostToolUse of its shell tool,
    UserPromptSubmit); see the module docstring for the shape."""
    if not isinstance(data, dict):
        return []
    event = as_text(data.get("hook_event_name"))
    if event == "UserPromptSubmit":
        text = as_text(data.get("prompt"))
        return [prompt_action(text, harness="codex")] if text.strip() else []
    if event != "PostToolUse" or as_text(data.get("tool_name")) != "Bash":
        return []
    tool_input = as_dict(data.get("tool_input"))
    command = as_text(tool_input.get("command"))
    if not command:
        return []
    response = data.get("tool_response")
    fields = as_dict(response)
    output = (
        response
        if isinstance(response, str)
        else "\n".join(
            p
            for p in (
                as_text(fields.get("stdout")),
                as_text(fields.get("stderr")),
            )
            if p
        )
    )
    cwd, workdir = as_text(data.get("cwd")), as_text(tool_input.get("workdir"))
    if workdir:
        cwd = workdir if workdir.startswith("/") or not cwd else f"{cwd.rstrip('/')}/{workdir}"
    action = command_action(
        command,
        cwd=cwd,
        output=output,
        tool_id=as_text(data.get("tool_use_id")),
        harness="codex",
    )
    return [action]
