"""Harness hook payloads mapped to harness-neutral action dicts (each harness's shapes below).

Standard library only, so that a hook, which runs on every tool call, can import it cheaply;
`actions.py` validates the same dicts into models on the service side. Nothing here redacts:
the service redacts every action before it is stored.

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
  A "duration_ms" (payload) or "durationMs" (tool_response) is used when present; no source
  seen here guarantees either, so a Claude Code command usually has no duration.
  Edit / Write: tool_input {"file_path", ...}; NotebookEdit: {"notebook_path", ...}; MultiEdit
  ({"file_path", "edits"}) is gone from 2.1's tool list but older releases still send it.

opencode (plugin hook `tool.execute.after(input, output)`: dist/index.d.ts of the npm package
@opencode-ai/plugin 1.18.33, and packages/opencode/src/tool/bash.ts in the opencode repository):
  input {"tool", "sessionID", "callID", "args"} ("args" is in 1.18's types, not in older ones;
  a bash "workdir" arg, where a release has one, is taken as the cwd);
  output {"title", "output", "metadata"}; for bash, title is the command and metadata is
  {"output", "exit", "description"}; edit/write take args {"filePath", ...}. The ctxd plugin
  forwards {"input": input, "output": output, "args": args-from-tool.execute.before,
  "cwd": directory}.

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
  write_file / replace: tool_input {"file_path", …}; an edit that failed has an "error".
"""

import re
from typing import Any

COMMAND_MAX_CHARS = 8_192  # the start of a command says what it is; the rest is cut
OUTPUT_TAIL_MAX_CHARS = 4_096  # the end of an output holds the error and the exit
PROMPT_MAX_CHARS = 8_192  # a prompt's start states the request
PATH_MAX_CHARS = 4_096
CUT = "…[cut]"
_EXIT_CODE = re.compile(r"^\s*Exit code (-?\d+)")
EDIT_TOOLS = {"Edit": "file_path", "MultiEdit": "file_path", "Write": "file_path"}
EDIT_TOOLS_NOTEBOOK = {"NotebookEdit": "notebook_path"}
OPENCODE_EDIT_TOOLS = {"edit", "write", "multiedit", "patch", "apply_patch"}


def head(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(CUT)] + CUT


def tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else CUT + text[len(text) - limit + len(CUT) :]


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _duration_ms(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value < 1e12 else None  # also drops NaN and infinities


def command_action(
    command: str,
    *,
    cwd: str = "",
    exit_status: int | None = None,
    duration_s: float | None = None,
    output: str = "",
    background: bool = False,
    tool_id: str = "",
    harness: str = "",
) -> dict[str, Any]:
    return {
        "kind": "command",
        "command": head(command, COMMAND_MAX_CHARS),
        "cwd": head(cwd, PATH_MAX_CHARS) or None,
        "exit_status": exit_status,
        "duration_s": duration_s,
        "output_tail": tail(output, OUTPUT_TAIL_MAX_CHARS),
        "background": background,
        "tool_id": head(tool_id, 200) or None,
        "harness": harness or None,
    }


def file_edit_action(path: str, tool: str, *, cwd: str = "", harness: str = "") -> dict[str, Any]:
    return {
        "kind": "file_edit",
        "path": head(path, PATH_MAX_CHARS),
        "tool": head(tool, 100),
        "cwd": head(cwd, PATH_MAX_CHARS) or None,
        "harness": harness or None,
    }


def prompt_action(text: str, *, harness: str = "") -> dict[str, Any]:
    return {"kind": "prompt", "text": head(text, PROMPT_MAX_CHARS), "harness": harness or None}


def _claude_bash(data: dict[str, Any], failed: bool) -> dict[str, Any] | None:
    tool_input = _dict(data.get("tool_input"))
    command = _str(tool_input.get("command"))
    if not command:
        return None
    response = data.get("tool_response")
    fields = _dict(response)
    output = "\n".join(
        part for part in (_str(fields.get("stdout")), _str(fields.get("stderr"))) if part
    )
    if isinstance(response, str):
        output = response
    background = (
        tool_input.get("run_in_background") is True
        or bool(_str(fields.get("backgroundTaskId")))
        or fields.get("backgroundedByUser") is True
        or bool(fields.get("timedOutAfterMs"))
    )
    exit_status: int | None = None
    if failed:
        error = _str(data.get("error"))
        output = output or error
        if match := _EXIT_CODE.match(error):
            exit_status = int(match[1])
    elif (
        not background
        and not fields.get("interrupted")
        and not fields.get("returnCodeInterpretation")
    ):
        exit_status = 0  # see the module docstring: success without interpretation means 0
    duration_ms = _duration_ms(data.get("duration_ms"))
    if duration_ms is None:
        duration_ms = _duration_ms(fields.get("durationMs"))
    return command_action(
        command,
        cwd=_str(data.get("cwd")),
        exit_status=exit_status,
        duration_s=duration_ms / 1000 if duration_ms is not None else None,
        output=output,
        background=background,
        tool_id=_str(data.get("tool_use_id")),
        harness="claude",
    )


def from_claude(data: Any) -> list[dict[str, Any]]:
    """The actions in one Claude Code hook payload (PostToolUse[Failure], UserPromptSubmit)."""
    if not isinstance(data, dict):
        return []
    event = _str(data.get("hook_event_name"))
    if event == "UserPromptSubmit":
        text = _str(data.get("prompt"))
        return [prompt_action(text, harness="claude")] if text.strip() else []
    if event not in ("PostToolUse", "PostToolUseFailure"):
        return []
    tool = _str(data.get("tool_name"))
    if tool == "Bash":
        action = _claude_bash(data, failed=event == "PostToolUseFailure")
        return [action] if action else []
    if event == "PostToolUseFailure":
        return []  # an edit that failed changed nothing
    key = EDIT_TOOLS.get(tool) or EDIT_TOOLS_NOTEBOOK.get(tool)
    path = _str(_dict(data.get("tool_input")).get(key)) if key else ""
    if not path:
        return []
    return [file_edit_action(path, tool, cwd=_str(data.get("cwd")), harness="claude")]


def from_opencode(data: Any) -> list[dict[str, Any]]:
    """The actions in one forwarded opencode `tool.execute.after`: {input, output, args, cwd}."""
    if not isinstance(data, dict):
        return []
    hook_input = _dict(data.get("input"))
    output = _dict(data.get("output"))
    metadata = _dict(output.get("metadata"))
    args = _dict(data.get("args")) or _dict(hook_input.get("args"))
    tool = _str(hook_input.get("tool"))
    cwd = _str(args.get("workdir")) or _str(data.get("cwd"))
    call_id = _str(hook_input.get("callID"))
    if tool == "bash":
        command = _str(args.get("command")) or _str(output.get("title"))
        if not command:
            return []
        exit_value = metadata.get("exit")
        exit_status = (
            exit_value if isinstance(exit_value, int) and not isinstance(exit_value, bool) else None
        )
        text = _str(output.get("output")) or _str(metadata.get("output"))
        action = command_action(
            command,
            cwd=cwd,
            exit_status=exit_status,
            output=text,
            tool_id=call_id,
            harness="opencode",
        )
        return [action]
    if tool in OPENCODE_EDIT_TOOLS:
        path = _str(args.get("filePath")) or _str(metadata.get("filepath"))
        if path:
            return [file_edit_action(path, tool, cwd=cwd, harness="opencode")]
    return []


def from_codex(data: Any) -> list[dict[str, Any]]:
    """The actions in one Codex CLI hook payload (PostToolUse of its shell tool,
    UserPromptSubmit); see the module docstring for the shape."""
    if not isinstance(data, dict):
        return []
    event = _str(data.get("hook_event_name"))
    if event == "UserPromptSubmit":
        text = _str(data.get("prompt"))
        return [prompt_action(text, harness="codex")] if text.strip() else []
    if event != "PostToolUse" or _str(data.get("tool_name")) != "Bash":
        return []
    tool_input = _dict(data.get("tool_input"))
    command = _str(tool_input.get("command"))
    if not command:
        return []
    response = data.get("tool_response")
    fields = _dict(response)
    output = (
        response
        if isinstance(response, str)
        else "\n".join(p for p in (_str(fields.get("stdout")), _str(fields.get("stderr"))) if p)
    )
    cwd, workdir = _str(data.get("cwd")), _str(tool_input.get("workdir"))
    if workdir:
        cwd = workdir if workdir.startswith("/") or not cwd else f"{cwd.rstrip('/')}/{workdir}"
    action = command_action(
        command,
        cwd=cwd,
        output=output,
        tool_id=_str(data.get("tool_use_id")),
        harness="codex",
    )
    return [action]


GEMINI_EDIT_TOOLS = ("write_file", "replace")
_GEMINI_SECTION = re.compile(
    r"^(Output|Error|Exit Code|Signal|Background PIDs|Process Group PGID): ", re.MULTILINE
)
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


def from_gemini(data: Any) -> list[dict[str, Any]]:
    """The actions in one Gemini CLI AfterTool payload (its shell tool, its file edits); see
    the module docstring for the shape."""
    if not isinstance(data, dict) or _str(data.get("hook_event_name")) != "AfterTool":
        return []
    tool, cwd = _str(data.get("tool_name")), _str(data.get("cwd"))
    tool_input, response = _dict(data.get("tool_input")), _dict(data.get("tool_response"))
    if tool in GEMINI_EDIT_TOOLS:
        path = _under(cwd, _str(tool_input.get("file_path")))
        if not path or response.get("error"):
            return []  # an edit that failed changed nothing
        return [file_edit_action(path, tool, cwd=cwd, harness="gemini")]
    command = _str(tool_input.get("command"))
    if tool != "run_shell_command" or not command:
        return []
    content = response.get("llmContent")
    text = content if isinstance(content, str) else _str(response.get("returnDisplay"))
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
    action = command_action(
        command,
        cwd=_under(cwd, _str(tool_input.get("dir_path"))) or cwd,
        exit_status=exit_status,
        output="" if output == "(empty)" else output,
        background=background,
        harness="gemini",
    )
    return [action]
