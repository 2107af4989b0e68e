"""`ctxd doctor`: the installation checked end to end, each finding with what to do about it."""

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ctxd import DEFAULT_URL
from ctxd.cli import env
from ctxd.cli.client import Client, Unreachable
from ctxd.harness.adapter import Adapter
from ctxd.harness.files import Change, InstallError
from ctxd.harness.registry import MODULES, adapter

URL_IN_TEXT = re.compile(r"https?://[^\s\"'\\]+")


@dataclass
class Finding:
    ok: bool
    what: str
    fix: str = ""

    def line(self) -> str:
        mark = "ok  " if self.ok else "FIX "
        return f"{mark} {self.what}" + (
            f"\n       → {self.fix}" if self.fix and not self.ok else ""
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
    mcp = client.call("GET", "/mcp", headers={"accept": "text/event-stream"})
    yield Finding(mcp.status_code < 500, f"MCP endpoint {url}/mcp answers ({mcp.status_code})")
