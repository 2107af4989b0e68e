"""`ctxd doctor`: the installation checked end to end, each finding with what to do about it."""

import json
import os
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ctxd.cli.client import Client, Unreachable
from ctxd.harness import opencode
from ctxd.harness.claude import targets
from ctxd.harness.files import MCP_NAME


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
    yield from _service(url)
    for scope in ("user", "project"):
        yield from _claude(scope, url, home, project)
    yield from _opencode(url, home, project)
    for tool, why in (("node", "the opencode plugin's tests"), ("chromium", "the browser tests")):
        found = shutil.which(tool)
        yield Finding(True, f"{tool}: {found or 'not installed'} (only {why} need it)")


def _service(url: str) -> Iterator[Finding]:
    client = Client(url, timeout=5)
    try:
        health = client.call("GET", "/health")
    except Unreachable as exc:
        yield Finding(False, f"service: {exc}", "start it: `ctxd serve` (or `make run`)")
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


def _claude(scope: str, url: str, home: Path, project: Path) -> Iterator[Finding]:
    settings_path, mcp_path = targets(scope, project, home)
    commands = _hook_commands(settings_path)
    if not commands:
        if scope == "user":
            fix = "`ctxd install claude` (or `--scope project` for this checkout only)"
            yield Finding(False, f"Claude Code hooks: none in {settings_path}", fix)
        return
    for command in sorted(commands):
        argv = shlex.split(command)
        program = argv[0] if argv else ""
        runs = bool(program) and (os.access(program, os.X_OK) or shutil.which(program) is not None)
        fix = "run `ctxd install claude` again from this installation"
        yield Finding(runs, f"Claude Code hook ({scope}): {command}", fix)
        if "--url" in argv and argv[argv.index("--url") + 1 :][:1] != [url]:
            yield Finding(False, f"that hook calls another URL than {url}", fix)
    server = _load(mcp_path).get("mcpServers", {}).get(MCP_NAME)
    fix = f"`ctxd install claude --scope {scope}`"
    yield Finding(server is not None, f"Claude Code MCP server '{MCP_NAME}' in {mcp_path}", fix)


def _opencode(url: str, home: Path, project: Path) -> Iterator[Finding]:
    """Only what is installed is checked: opencode is optional."""
    found = False
    for scope in ("user", "project"):
        plugin, ours, mcp_url = opencode.installed(scope, project, home)
        if not ours and mcp_url is None:
            continue
        found = True
        fix = f"`ctxd install opencode --scope {scope}` from this installation"
        current = ours and plugin.read_text(encoding="utf-8") == opencode.plugin_text(url)
        said = "" if current or not ours else " (not this installation's version or URL)"
        yield Finding(current, f"opencode plugin ({scope}): {plugin}{said}", fix)
        want = url.rstrip("/") + "/mcp"
        yield Finding(mcp_url == want, f"opencode MCP server '{MCP_NAME}': {mcp_url}", fix)
    if not found:
        yield Finding(True, "opencode plugin: not installed (`ctxd install opencode` adds it)")


def _hook_commands(path: Path) -> set[str]:
    found = set()
    for entries in (_load(path).get("hooks") or {}).values():
        for entry in entries if isinstance(entries, list) else []:
            for hook in entry.get("hooks", []) if isinstance(entry, dict) else []:
                command = hook.get("command", "") if isinstance(hook, dict) else ""
                if isinstance(command, str) and command.rstrip().endswith("hook claude"):
                    found.add(command)
    return found


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
