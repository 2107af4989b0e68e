"""Claude Code hook commands: forward the hook's JSON to ctxd, print what comes back as the
harness's JSON hook output, and never get in the agent's way: exit 0 whatever happens.

Standard library only, and nothing of ctxd imported on the hook path: it runs on every prompt
and every tool call. The policy (which session, what to record, what to inject, one dump per
turn) is the server's (`service/ctxd/harness/events.py`), so this file only carries messages.
"""

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from ctxd.harness import autostart, hook_http

MAX_PAYLOAD_CHARS = 1_000_000
OUTPUT_KEPT_CHARS = 8_000  # of each text in a tool's response
# Events a person waits on get the time a fresh snapshot may take; the others are quick.
SLOW_EVENTS = {"SessionStart": 30.0, "UserPromptSubmit": 30.0, "PreCompact": 60.0}
QUICK_TIMEOUT_S = 5.0
# Events whose trouble the person should see (a note per tool call would be noise).
TELL_EVENTS = ("SessionStart", "UserPromptSubmit", "PreCompact")
INJECT_EVENTS = ("SessionStart", "UserPromptSubmit")
# `startup` too: a fresh start is where a conversation is bound to its session (and told of
# the checkout's latest); the server hands a dump only to the other sources.
SESSION_SOURCES = "startup|compact|resume|clear|fork"
TOOLS = "Bash|Edit|Write|MultiEdit|NotebookEdit"
SHELLS = {"sh", "bash", "dash", "zsh", "fish", "ksh", "busybox"}


class HookError(Exception):
    """Why a hook did nothing: one line for the person, and the hook still exits 0."""


class Down(HookError):
    """Nothing answers at the service's address."""


def hook_main(argv: list[str], stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int | None:
    """`ctxd [--url U] hook claude`: handled here without argparse (a usage error would exit
    2, which Claude Code reads as "block"); None when argv is some other command."""
    args = list(argv)
    url = os.environ.get("CTXD_URL", "http://127.0.0.1:8765")
    if args[:1] == ["--url"] and len(args) > 1:
        url, args = args[1], args[2:]
    elif args[:1] and args[0].startswith("--url="):
        url, args = args[0].split("=", 1)[1], args[1:]
    if args[:1] != ["hook"] or "--print-config" in args or "-h" in args or "--help" in args:
        return None
    if args[1:2] != ["claude"] or len(args) > 2:
        print(f"ctxd hook: ignored arguments {shlex.join(args[1:])!r}", file=stderr)
    return run_claude(url, stdin, stdout, stderr)


def run_claude(url: str, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    event = ""
    try:
        payload = parse_payload(stdin.read(MAX_PAYLOAD_CHARS))
        event = str(payload["hook_event_name"])
        timeout = SLOW_EVENTS.get(event, QUICK_TIMEOUT_S)
        if (given := os.environ.get("CTXD_HOOK_TIMEOUT", "")).replace(".", "", 1).isdigit():
            timeout = min(timeout, max(0.1, float(given)))  # the user's ceiling
        try:
            answer = forward(url, payload, timeout)
        except Down:
            started = autostart.ensure(url, wait=event in TELL_EVENTS)
            if started is None:
                raise
            answer = forward(url, payload, timeout)
            answer["message"] = answer.get("message") or started
        output = hook_output(event, answer)
    except HookError as exc:
        print(f"ctxd hook: {exc}", file=stderr)
        output = {"systemMessage": f"ctxd: {exc}"} if event in TELL_EVENTS else None
    except Exception as exc:  # never a traceback, never a non-zero exit
        print(f"ctxd hook: {type(exc).__name__}: {exc}"[:500], file=stderr)
        output = None
    if output:
        stdout.write(json.dumps(output) + "\n")
    return 0


def parse_payload(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HookError(f"hook input is not JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(data, dict) or not isinstance(data.get("hook_event_name"), str):
        raise HookError("hook input has no 'hook_event_name'; is this a Claude Code hook?")
    return data


def forward(url: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
    """POST the event to ctxd; its answer: {"session", "context", "message"}."""
    cwd = payload.get("cwd")
    body: dict[str, Any] = {
        # a tool's output cut to its end: what ctxd keeps, in a request it accepts
        "payload": {**payload, "tool_response": _tail(payload.get("tool_response"))},
        "root": git_root(cwd) if isinstance(cwd, str) else "",
    }
    if session := os.environ.get("CTXD_SESSION"):
        body["session"] = session
    if (given := os.environ.get("CTXD_HOOK_MAX_CHARS", "")).strip().isdigit():
        body["max_chars"] = max(200, int(given))
    if urlsplit(url).hostname in autostart.LOOPBACK and (pid := harness_pid()):
        body["harness_pid"] = pid  # only a service on this machine can look it up
    status, said = post(url, "/api/hooks/claude", json.dumps(body).encode(), timeout)
    if status != 200:
        raise HookError(f"ctxd answered HTTP {status}: {_detail(said.decode(errors='replace'))}")
    answer = json.loads(said or b"{}")
    return answer if isinstance(answer, dict) else {}


def post(url: str, path: str, body: bytes, timeout: float) -> tuple[int, bytes]:
    headers = {"content-type": "application/json", **_auth()}
    try:
        return hook_http.request(url, "POST", path, body, headers, timeout)
    except OSError as exc:
        kind_of = Down if isinstance(exc, ConnectionRefusedError) else HookError
        raise kind_of(
            f"ctxd is not reachable at {url} ({exc or type(exc).__name__}); start it with "
            "`ctxd serve`; the agent goes on without it"
        ) from None


def hook_output(event: str, answer: dict[str, Any]) -> dict[str, Any] | None:
    """Claude Code's JSON hook output: context for the model, a message for the person."""
    output: dict[str, Any] = {}
    context, message = answer.get("context"), answer.get("message")
    if context and event in INJECT_EVENTS:
        sid = answer.get("session", "")
        lead = (
            f"[ctxd] Saved working state of session `{sid}` (more: `ctxd resume {sid}`; "
            f"record progress with `ctxd note {sid} KIND TEXT`).\n\n"
        )
        output["hookSpecificOutput"] = {"hookEventName": event, "additionalContext": lead + context}
    if message:
        output["systemMessage"] = f"ctxd: {message}"
    return output or None


def git_root(cwd: str) -> str:
    """The checkout holding `cwd` (a `.git` folder or file), found without running git."""
    if not cwd.startswith("/"):
        return ""
    path = Path(cwd)
    for folder in (path, *path.parents):
        if (folder / ".git").exists():
            return str(folder)
    return ""


def harness_pid() -> int | None:
    """The harness process this hook runs under: the first ancestor that is not a shell
    (Claude Code runs a hook's command through one), read from /proc; None elsewhere."""
    pid = os.getppid()
    for _ in range(4):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name not in SHELLS:
            return pid
        pid = int(rest.split()[1])
    return None


def _tail(value: Any) -> Any:
    """A tool's output cut to its end: what ctxd keeps, and a request the server accepts."""
    if isinstance(value, str):
        return value[-OUTPUT_KEPT_CHARS:]
    if isinstance(value, dict):
        return {k: _tail(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_tail(v) for v in value[-20:]]
    return value


def _auth() -> dict[str, str]:
    token = os.environ.get("CTXD_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _detail(said: str) -> str:
    try:
        return str(json.loads(said).get("detail", said))[:300]
    except (ValueError, AttributeError):
        return said[:300]


def hook_command(url: str, default_url: str) -> str:
    """The command line to paste: this installation's ctxd, so the harness needs no PATH."""
    script = Path(sys.executable).with_name("ctxd")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "ctxd"]
    if url != default_url:
        argv += ["--url", url]
    return shlex.join([*argv, "hook", "claude"])


def claude_config(command: str) -> dict[str, Any]:
    """The `hooks` block for Claude Code's settings.json. Tool calls are reported
    asynchronously: no tool call ever waits on ctxd."""

    def entry(timeout: int, matcher: str | None = None, **extra: Any) -> list[dict[str, Any]]:
        hook = {"type": "command", "command": command, "timeout": timeout, **extra}
        return [{**({"matcher": matcher} if matcher else {}), "hooks": [hook]}]

    return {
        "hooks": {
            "PreCompact": entry(60),
            "SessionStart": entry(60, SESSION_SOURCES),
            "UserPromptSubmit": entry(60),
            "PostToolUse": entry(30, TOOLS, **{"async": True}),
            "PostToolUseFailure": entry(30, "Bash", **{"async": True}),
            "Stop": entry(10),
            "SessionEnd": entry(10),
        }
    }
