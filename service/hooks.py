"""Claude Code hook commands: read the hook's JSON on stdin, tell ctxd, never block the agent."""

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx

from service.client import Client, Unreachable, detail
from service.harness import HOOK_MAX_CHARS

RESUME_SOURCES = ("compact", "resume", "clear")
MAX_PAYLOAD_CHARS = 1_000_000


class HookError(Exception):
    """Why a hook did nothing: printed as one line on stderr, and the hook still exits 0."""


@dataclass
class HookPayload:
    event: str
    session_id: str = ""
    cwd: str = ""
    trigger: str = ""
    source: str = ""
    prompt: str = ""


def parse_payload(text: str) -> HookPayload:
    """The fields ctxd uses from a Claude Code hook's JSON; unknown fields are ignored."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HookError(f"hook input is not JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(data, dict) or not isinstance(data.get("hook_event_name"), str):
        raise HookError("hook input has no 'hook_event_name'; is this a Claude Code hook?")

    def field(name: str) -> str:
        value = data.get(name)
        return value if isinstance(value, str) else ""

    return HookPayload(
        event=data["hook_event_name"],
        session_id=field("session_id"),
        cwd=field("cwd"),
        trigger=field("trigger"),
        source=field("source"),
        prompt=field("prompt"),
    )


def git_toplevel(cwd: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", cwd, "rev-parse", "--show-toplevel"],
            capture_output=True, text=True, timeout=2, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    top = done.stdout.strip()
    return top if done.returncode == 0 and top else None


class Service:
    """The few ctxd calls a hook makes, each with a short connect timeout."""

    def __init__(self, url: str, read_timeout: float) -> None:
        self.client = Client(url, timeout=read_timeout, connect_timeout=0.5)

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.client.call(method, path, **kwargs)
        except Unreachable as exc:
            raise HookError(
                f"ctxd is not reachable ({exc}); start it with `ctxd serve`; "
                "the agent goes on without it"
            ) from None
        if response.status_code >= 400 and response.status_code != 404:
            raise HookError(f"{method} {path}: HTTP {response.status_code}: {detail(response)}")
        return response


def find_session(service: Service, payload: HookPayload) -> tuple[str, int]:
    """The ctxd session of this agent, by the server's one policy (POST /api/sessions/resolve);
    the hook only tells what it knows: CTXD_SESSION, the cwd, its git top-level, its id."""
    ask = {"harness": "claude", "cwd": payload.cwd, "harness_session": payload.session_id}
    if sid := os.environ.get("CTXD_SESSION"):
        ask["session"] = sid
    elif payload.cwd.startswith("/"):
        ask["root"] = git_toplevel(payload.cwd) or payload.cwd
    found = service.call("POST", "/api/sessions/resolve", json=ask)
    if found.status_code != 200:
        raise HookError(f"no session for this agent: {detail(found)}")
    session = found.json()
    return str(session["id"]), int(session.get("hook_max_chars", HOOK_MAX_CHARS))


def handle(service: Service, payload: HookPayload, max_chars: int | None = None) -> str:
    """Does what the event calls for; returns what the harness should inject (or "").
    `max_chars` is the dump budget the user set; None takes the server's."""
    event = payload.event
    if event == "SessionStart" and payload.source not in RESUME_SOURCES:
        return ""  # a brand-new conversation has nothing to resume
    if event not in ("PreCompact", "SessionStart", "UserPromptSubmit", "Stop"):
        return ""
    sid, budget = find_session(service, payload)
    budget = max_chars or budget
    base = f"/api/sessions/{sid}"
    if event == "PreCompact":
        # It cannot inject anything: it saves what SessionStart(compact) reads back.
        note = f"Claude Code compaction ({payload.trigger or 'unknown'} trigger)"
        service.call("POST", f"{base}/snapshots", json={"note": note})
        return ""
    if event == "Stop":
        service.call("POST", f"{base}/heartbeat")
        return ""
    if event == "UserPromptSubmit":
        # The server tells a bare "continue" (answered with the dump) from a message (202).
        said = {"text": payload.prompt, "max_chars": budget}
        response = service.call("POST", f"{base}/prompts", json=said)
        return _lead(sid, response) if response.status_code == 200 else ""
    params = {"fresh": "true", "max_chars": budget}
    return _lead(sid, service.call("GET", f"{base}/resume", params=params))


def _lead(sid: str, response: httpx.Response) -> str:
    if response.status_code != 200:
        raise HookError(f"no dump for session '{sid}': {detail(response)[:300]}")
    lead = (
        f"[ctxd] Saved working state of session `{sid}` (more: `ctxd resume {sid}`; "
        f"record progress with `ctxd note {sid} KIND TEXT`).\n\n"
    )
    return lead + response.text


def run_claude(url: str, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """`ctxd hook claude`: always exits 0, since a failing hook would block the agent."""
    try:
        given = os.environ.get("CTXD_HOOK_MAX_CHARS")
        max_chars = max(200, int(given)) if given else None
        timeout = float(os.environ.get("CTXD_HOOK_TIMEOUT", "30"))
        payload = parse_payload(stdin.read(MAX_PAYLOAD_CHARS))
        text = handle(Service(url, timeout), payload, max_chars)
    except HookError as exc:
        print(f"ctxd hook: {exc}", file=stderr)
        return 0
    except (ValueError, httpx.HTTPError) as exc:
        print(f"ctxd hook: {type(exc).__name__}: {exc}"[:500], file=stderr)
        return 0
    if text:
        stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def hook_command(url: str, default_url: str) -> str:
    """The command line to paste: this installation's ctxd, so the harness needs no PATH."""
    script = Path(sys.executable).with_name("ctxd")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "service"]
    if url != default_url:
        argv += ["--url", url]
    return shlex.join([*argv, "hook", "claude"])


def claude_config(command: str) -> dict[str, Any]:
    """The `hooks` block for Claude Code's settings.json."""

    def entry(timeout: int, matcher: str | None = None) -> list[dict[str, Any]]:
        hook = {"type": "command", "command": command, "timeout": timeout}
        return [{**({"matcher": matcher} if matcher else {}), "hooks": [hook]}]

    return {
        "hooks": {
            "PreCompact": entry(60),
            "SessionStart": entry(60, "|".join(RESUME_SOURCES)),
            "UserPromptSubmit": entry(60),
            "Stop": entry(10),
        }
    }
