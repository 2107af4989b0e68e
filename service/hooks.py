"""Claude Code hook commands: read the hook's JSON on stdin, tell ctxd, never block the agent."""

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx

# The budget the harness injects; the same default as recovery.HOOK_MAX_CHARS, kept here
# so that a hook does not import the renderer (it runs on every prompt).
DEFAULT_MAX_CHARS = 8000
RESUME_SOURCES = ("compact", "resume", "clear")
CONTINUE_WORDS = {"", "continue", "go on", "carry on", "keep going"}
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


def is_continue(prompt: str) -> bool:
    """An empty prompt or a bare "continue" (any case, trailing punctuation) means carry on."""
    return prompt.strip().lower().rstrip(".!…").strip() in CONTINUE_WORDS


def slug(name: str) -> str:
    """A session id (`[a-z0-9][a-z0-9._-]*`, at most 64) made from a folder name."""
    text = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._")
    return text[:48].rstrip("-._")


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
        token = os.environ.get("CTXD_TOKEN")
        self.url = url
        self.http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"} if token else {},
            timeout=httpx.Timeout(read_timeout, connect=0.5),
        )

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise HookError(
                f"ctxd is not reachable at {self.url} ({type(exc).__name__}); "
                "start it with `ctxd serve`; the agent goes on without it"
            ) from None
        if response.status_code >= 400 and response.status_code != 404:
            detail = response.text[:300]
            raise HookError(f"{method} {path}: HTTP {response.status_code}: {detail}")
        return response


def find_session(service: Service, payload: HookPayload) -> str:
    """The ctxd session of this agent: CTXD_SESSION if set; else the session scoped to the
    cwd (deepest first); else one created for the cwd's git top-level, named after its
    folder; without a cwd, one named after the harness's session id."""
    if sid := os.environ.get("CTXD_SESSION"):
        service.call("PUT", f"/api/sessions/{sid}", json={})
        return sid
    if not payload.cwd.startswith("/"):
        if not payload.session_id:
            raise HookError("hook input has neither an absolute 'cwd' nor a 'session_id'")
        sid = "claude-" + (slug(payload.session_id)[:40] or "session")
        service.call("PUT", f"/api/sessions/{sid}", json={"title": "Claude Code session"})
        return sid
    scoped = service.call("GET", "/api/sessions", params={"cwd": payload.cwd}).json()
    if scoped:
        return str(scoped[0]["id"])
    top = git_toplevel(payload.cwd) or payload.cwd
    name = Path(top).name or "root"
    sid = slug(name) or "session"
    existing = service.call("GET", f"/api/sessions/{sid}")
    # A session of that name made by hand without a scope is adopted; one scoped elsewhere
    # (another checkout with the same folder name) is left alone.
    if existing.status_code == 200 and existing.json().get("cwd") not in (None, top):
        sid = f"{sid}-{hashlib.sha1(top.encode()).hexdigest()[:6]}"
    body: dict[str, Any] = {"cwd": top}
    if existing.status_code == 404:
        body["title"] = name
    made = service.call("PUT", f"/api/sessions/{sid}", json=body)
    if made.status_code >= 400:
        raise HookError(f"cannot create session '{sid}': {made.text[:300]}")
    return sid


def handle(service: Service, payload: HookPayload, max_chars: int) -> str:
    """Does what the event calls for; returns what the harness should inject (or "")."""
    event = payload.event
    if event == "SessionStart" and payload.source not in RESUME_SOURCES:
        return ""  # a brand-new conversation has nothing to resume
    if event not in ("PreCompact", "SessionStart", "UserPromptSubmit", "Stop"):
        return ""
    sid = find_session(service, payload)
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
        if not is_continue(payload.prompt):
            service.call("POST", f"{base}/messages", json={"text": payload.prompt})
            return ""
        service.call("POST", f"{base}/messages", json={"text": ""})
        return _dump(service, sid, fresh=False, max_chars=max_chars)
    return _dump(service, sid, fresh=True, max_chars=max_chars)


def _dump(service: Service, sid: str, *, fresh: bool, max_chars: int) -> str:
    params = {"fresh": str(fresh).lower(), "max_chars": max_chars}
    response = service.call("GET", f"/api/sessions/{sid}/resume", params=params)
    if response.status_code != 200:
        raise HookError(f"no dump for session '{sid}': {response.text[:300]}")
    lead = (
        f"[ctxd] Saved working state of session `{sid}` (more: `ctxd resume {sid}`; "
        f"record progress with `ctxd note {sid} KIND TEXT`).\n\n"
    )
    return lead + response.text


def run_claude(url: str, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """`ctxd hook claude`: always exits 0, since a failing hook would block the agent."""
    try:
        max_chars = int(os.environ.get("CTXD_HOOK_MAX_CHARS", DEFAULT_MAX_CHARS))
        timeout = float(os.environ.get("CTXD_HOOK_TIMEOUT", "30"))
        payload = parse_payload(stdin.read(MAX_PAYLOAD_CHARS))
        text = handle(Service(url, timeout), payload, max(200, max_chars))
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
