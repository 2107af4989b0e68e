"""`ctxd doctor`: the installation checked end to end, each finding with what to do about it."""

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from ctxd import DEFAULT_URL, __version__
from ctxd.cli.client import Client, Unreachable
from ctxd.harness.adapter import Adapter
from ctxd.harness.files import Change, InstallError
from ctxd.harness.registry import MODULES, adapter
from ctxd.hookclient import env

URL_IN_TEXT = re.compile(r"https?://[^\s\"'\\]+")
MCP_PROTOCOL = "2025-06-18"  # what the harnesses' MCP clients ask for
MCP_ACCEPT = {"accept": "application/json, text/event-stream"}


@dataclass
class Finding:
    ok: bool
    what: str
    fix: str = ""
    unknown: bool = False  # cannot be checked now: said plainly, not a failure

    def line(self) -> str:
        mark = "??  " if self.unknown else "ok  " if self.ok else "FIX "
        return f"{mark} {self.what}" + (
            f"\n       → {self.fix}" if self.fix and (self.unknown or not self.ok) else ""
        )


def examine(url: str, home: Path, project: Path) -> Iterator[Finding]:
    """The service at `url` (the default one only where a harness calls it) and at every URL
    a harness's hooks call; then each harness: wired or not, and whether its hooks and MCP
    server are this installation's, for one URL."""
    wired: list[Finding] = []
    urls = [] if url == DEFAULT_URL else [url]  # the default: only where a harness calls it
    callers: dict[str, list[str]] = {}  # a URL hooks call: the harnesses whose hooks call it
    for name in MODULES:
        for scope in ("user", "project"):
            findings, called = _harness(adapter(name), scope, url, home, project)
            wired += findings
            if called:
                callers.setdefault(called, []).append(name)
            if called and called not in urls:
                urls.append(called)
    for each in urls or [url]:
        yield from _service(each)
    for called, names in callers.items():
        if called != url:  # this CLI would read and write another service than the hooks do
            who = ", ".join(dict.fromkeys(names))
            yield Finding(False, f"this CLI talks to {url}, but the hooks of {who} call {called}",
                          f"export CTXD_URL={called}")  # fmt: skip
    yield from wired
    if "opencode" in (name for names in callers.values() for name in names):
        called = next(u for u, names in callers.items() if "opencode" in names)
        yield _opencode_heard(called, home)
    if not wired:
        known = ", ".join(MODULES)
        fix = f"`ctxd install` (wires each harness found here: {known}), or name one"
        yield Finding(False, "no agent harness is wired to ctxd", fix)


def _harness(
    harness: Adapter, scope: str, url: str, home: Path, project: Path
) -> tuple[list[Finding], str | None]:
    """One harness at one scope: (what to say, the URL its hooks call when they are this
    installation's). Told by the installer's own plan: ctxd is wired where an uninstall would
    change a file, and current for a URL where an install for it would change nothing."""
    label, install = f"{harness.label} ({scope})", f"`ctxd install {harness.name} --scope {scope}`"
    try:
        wired = [c for c in harness.plan(url, scope, project, home, True) if c.changed]
        if not wired:
            present = scope == "user" and shutil.which(harness.program)
            missing = Finding(False, f"{label}: installed, ctxd not wired into it", install)
            return ([missing] if present else []), None
        for candidate in _urls_in(wired, url):
            for wake in (True, False):  # installed with `--no-wake`, or not
                plan = harness.plan(candidate, scope, project, home, False, wake=wake)
                if not any(c.changed for c in plan):
                    files = ", ".join(str(c.path) for c in wired)
                    off = "" if wake else "; waking the idle agent off (--no-wake)"
                    said = f"{label}: ctxd's hooks and MCP server call {candidate} ({files}){off}"
                    return [Finding(True, said)], candidate
        change = next(c for c in harness.plan(url, scope, project, home, False) if c.changed)
    except InstallError as exc:
        return [Finding(False, f"{label}: {exc}", "fix the file by hand, then " + install)], None
    said = f"{label}: not this installation's ctxd for {url}; reinstalling changes {change.path}"
    return [Finding(False, said + _first_difference(change), install)], None


def _opencode_heard(url: str, home: Path) -> Finding:
    """Whether ctxd's opencode plugin reaches the service where opencode runs: an opencode of
    this home running, and an event from its plugin since it started. opencode's plugin API
    changes between releases (2.x's beta is reported not to deliver plugin events,
    anomalyco/opencode#44788): a plugin that loads and hears nothing is silent otherwise."""
    running = _opencode_processes(home)
    try:
        health = Client(url, timeout=5).call("GET", "/health")
        heard = str(health.json().get("last_hook_opencode") or "") if health.is_success else ""
    except (Unreachable, ValueError):
        return Finding(True, "opencode's plugin: not checked, the service does not answer",
                       unknown=True)  # fmt: skip
    if not running:
        when = f"last heard from it at {heard}" if heard else "ctxd has not heard from it"
        return Finding(True, f"opencode's plugin: cannot be checked now, opencode is not running"
                       f" ({when})", unknown=True)  # fmt: skip
    pid, started = running[-1]
    since = datetime.fromtimestamp(started, UTC)
    if heard and datetime.fromisoformat(heard) >= since - timedelta(seconds=1):
        return Finding(True, f"opencode (pid {pid}): its plugin reaches ctxd (last event {heard})")
    return Finding(
        True,
        f"opencode (pid {pid}, running since {since:%H:%M:%S} UTC): its plugin has sent ctxd "
        "nothing since; right if you have not used it since",
        "if you have, the plugin hears no events: restart opencode; opencode 2's beta is "
        "reported not to deliver plugin events (anomalyco/opencode#44788)",
        unknown=True,
    )


def _opencode_processes(home: Path) -> list[tuple[int, float]]:
    """(pid, start time) of each opencode of this user running with this home (its settings,
    so ctxd's plugin there), oldest first: its program, or a JS runtime running its script."""
    import psutil

    found = []
    for proc in psutil.process_iter(["name", "cmdline", "create_time", "uids"]):
        info = proc.info
        argv = info["cmdline"] or []
        names = {info["name"] or "", Path(argv[0]).name if argv else ""}
        launched = names & {"node", "bun"} and "opencode" in " ".join(argv[1:3])
        if not (names & {"opencode", ".opencode"} or launched):
            continue
        try:
            if info["uids"] and info["uids"].real != os.getuid():
                continue
            if proc.environ().get("HOME", str(home)) != str(home):
                continue
        except psutil.Error:
            continue
        found.append((proc.pid, info["create_time"]))
    return sorted(found, key=lambda each: each[1])


def _urls_in(changes: list[Change], url: str) -> list[str]:
    """The URLs a harness's files name (its hooks' `--url`, its MCP server's), `url` first."""
    found = [url, DEFAULT_URL]
    for change in changes:
        for hit in URL_IN_TEXT.findall(change.before):
            base = hit.rstrip("/").removesuffix("/mcp")
            if base not in found:
                found.append(base)
    return found


def _first_difference(change: Change) -> str:
    old = [line.strip() for line in change.before.splitlines()]
    new = [line.strip() for line in change.after.splitlines()]
    gone = next((line for line in old if line not in new), "")
    came = next((line for line in new if line not in old), "")
    return f": {gone} → {came}" if gone and came else ""


def _service(url: str) -> Iterator[Finding]:
    client = Client(url, timeout=5)
    try:
        health = client.call("GET", "/health")
    except Unreachable as exc:
        yield Finding(False, f"service: {exc}", f"start it: `{env.start_command(url)}`")
        return
    if health.status_code == 401:
        yield Finding(False, f"service at {url} wants a token", "set CTXD_TOKEN (or CTXD_URL)")
        return
    info = health.json() if health.status_code == 200 else {}
    yield Finding(health.status_code == 200, f"service at {url}: version {info.get('version')}")
    storage = info.get("storage", "writable")
    yield Finding(
        storage == "writable",
        f"data directory: {storage}, {info.get('data_dir_bytes', 0)} bytes",
        "make the data directory writable (disk full or mounted read-only?) and restart ctxd",
    )
    yield _mcp(client, url)


def _mcp(client: Client, url: str) -> Finding:
    """Whether {url}/mcp speaks MCP: an `initialize` as a harness sends it first, answered
    with the server's name and protocol (the session it opened closed again)."""
    asked = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": MCP_PROTOCOL, "capabilities": {},
        "clientInfo": {"name": "ctxd-doctor", "version": __version__}}}  # fmt: skip
    answer = client.call("POST", "/mcp", json=asked, headers=MCP_ACCEPT)
    result = _jsonrpc_result(answer)
    if session := answer.headers.get("mcp-session-id"):
        client.call("DELETE", "/mcp", headers={**MCP_ACCEPT, "mcp-session-id": session})
    server = result.get("serverInfo") if isinstance(result, dict) else None
    if isinstance(server, dict) and server.get("name"):
        said = f"{server['name']} {server.get('version', '')}".strip()
        protocol = result.get("protocolVersion", "?") if isinstance(result, dict) else "?"
        return Finding(True, f"MCP at {url}/mcp: {said} answers (protocol {protocol})")
    return Finding(
        False,
        f"MCP at {url}/mcp does not answer an MCP initialize (HTTP {answer.status_code})",
        f"is another program on this port? `{env.start_command(url)}` starts ctxd there",
    )


def _jsonrpc_result(answer: httpx.Response) -> object:
    """The `result` of a JSON-RPC answer, sent as JSON or as server-sent events."""
    text = answer.text
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        text = next((line[5:] for line in text.splitlines() if line.startswith("data:")), "")
    try:
        said = json.loads(text)
    except ValueError:
        return None
    return said.get("result") if isinstance(said, dict) else None
