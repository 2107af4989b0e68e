"""opencode as ctxd speaks to it: the events its plugin forwards read, and `ctxd
install|uninstall opencode` (ctxd's plugin file put in opencode's plugin folder and its MCP
server merged into `opencode.json`, idempotently, keeping everything else, with a backup and a
dry run; the file plumbing is `files.py`'s).

The plugin (`integrations/opencode/ctxd.js`) forwards `tool.execute.after` and the session
lookup as `{"event", "sessionID", "cwd", ...}` to `POST /api/hooks/opencode`; it injects the
dump itself (a bare "continue" through `/prompts`, compaction through opencode's own hook).

opencode loads every `{plugin,plugins}/*.{ts,js}` of its config folders (`.opencode/` in a
project, `~/.config/opencode/` for the user). Its config names MCP servers either in the 1.x
form (`mcp.NAME`) or the 2.0 form (`mcp.servers.NAME`); ctxd writes into whichever form the
file already uses and removes its entry from both. The plugin file is ctxd's whole: it is
recognised by its first line, and a `ctxd.js` that is not ours is never touched.
"""

import json
import os
import re
from pathlib import Path
from typing import Any

from ctxd import shipped
from ctxd.discovery import payloads
from ctxd.harness.adapter import EventKind, HarnessName, HookEvent, text_of
from ctxd.harness.files import MCP_NAME, Change, InstallError, json_text, read_json, read_text

PLUGIN_NAME = "ctxd.js"
PLUGIN_MARK = "// ctxd for opencode"
DEFAULT_URL_LINE = re.compile(r'^const DEFAULT_URL = "[^"\n]*"$', re.MULTILINE)


KINDS: dict[str, EventKind] = {
    "tool.execute.after": "tool",
    "chat.message": "prompt",
    "session.idle": "idle",
    "session.compacted": "compact",
}


class Opencode:
    name: HarnessName = "opencode"
    label = "opencode"
    program = "opencode"

    def event(self, payload: dict[str, Any]) -> HookEvent:
        name = text_of(payload, "event")
        kind = KINDS.get(name, "other")
        return HookEvent(
            kind=kind,
            name=name,
            conversation=text_of(payload, "sessionID"),
            cwd=text_of(payload, "cwd"),
            prompt=text_of(payload, "prompt"),
            actions=tuple(payloads.from_opencode(payload)) if kind == "tool" else (),
        )

    def plan(self, url: str, scope: str, project: Path, home: Path, remove: bool) -> list[Change]:
        return plan(url, scope, project, home, remove)

    def notes(self, scope: str) -> list[str]:
        return []


ADAPTER = Opencode()


def targets(scope: str, project: Path, home: Path) -> tuple[Path, Path]:
    """(the plugin file, the opencode config file holding the MCP servers) for a scope."""
    if scope == "project":
        folder, config_dir = project / ".opencode", project
    else:
        base = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
        folder = config_dir = Path(base) / "opencode"
    config = config_dir / "opencode.json"
    if not config.exists() and (config_dir / "opencode.jsonc").exists():
        config = config_dir / "opencode.jsonc"
    return folder / "plugins" / PLUGIN_NAME, config


def plugin_source() -> Path:
    """ctxd's opencode plugin, `integrations/opencode/ctxd.js` (shipped in the wheel)."""
    return shipped("integrations") / "opencode" / PLUGIN_NAME


def plugin_text(url: str) -> str:
    """The plugin as installed: its fallback address is the one ctxd was installed for
    (CTXD_URL in opencode's environment still wins)."""
    source = plugin_source().read_text(encoding="utf-8")
    line = f"const DEFAULT_URL = {_js_string(url.rstrip('/'))}"
    return DEFAULT_URL_LINE.sub(lambda _: line, source, count=1)


def plan(url: str, scope: str, project: Path, home: Path, remove: bool) -> list[Change]:
    """What install (or uninstall, with `remove`) would write, file by file."""
    plugin_path, config_path = targets(scope, project, home)
    before = read_text(plugin_path)
    theirs = bool(before) and not before.startswith(PLUGIN_MARK)
    if theirs and not remove:
        raise InstallError(f"{plugin_path} is not ctxd's plugin; not touched")
    config = read_json(config_path)
    # no OAuth discovery: ctxd takes a bearer token, or nothing on loopback
    entry = {"type": "remote", "url": url.rstrip("/") + "/mcp", "enabled": True, "oauth": False}
    new_config = _with_server(config, None if remove else entry)
    after = before if theirs else "" if remove else plugin_text(url)
    return [
        Change(plugin_path, before, after, backup=False),
        Change(config_path, read_text(config_path), json_text(new_config, config_path)),
    ]


def _with_server(config: dict[str, Any], entry: dict[str, Any] | None) -> dict[str, Any]:
    """The config with ctxd's MCP entry set (or, with None, gone) in the form it uses."""
    mcp = config.get("mcp", {})
    if not isinstance(mcp, dict):
        raise InstallError("its 'mcp' is not an object; fix the file by hand first")
    servers = mcp.get("servers")
    v2 = isinstance(servers, dict) and "type" not in servers  # a 1.x server may be "servers"
    new_mcp = {k: v for k, v in mcp.items() if k != MCP_NAME}
    if v2:
        assert isinstance(servers, dict)
        inner = {k: v for k, v in servers.items() if k != MCP_NAME}
        if entry is not None:
            inner[MCP_NAME] = entry
        new_mcp["servers"] = inner
    elif entry is not None:
        new_mcp[MCP_NAME] = entry
    if new_mcp:
        return {**config, "mcp": new_mcp}
    return {k: v for k, v in config.items() if k != "mcp"}


def installed(scope: str, project: Path, home: Path) -> tuple[Path, bool, str | None]:
    """(the plugin's path, whether ctxd's plugin is there, the MCP URL configured or None)."""
    plugin_path, config_path = targets(scope, project, home)
    ours = read_text(plugin_path).startswith(PLUGIN_MARK)
    try:
        mcp = read_json(config_path).get("mcp", {})
    except InstallError:
        return plugin_path, ours, None
    servers = mcp.get("servers") if isinstance(mcp, dict) else None
    for holder in (mcp, servers):
        if isinstance(holder, dict) and isinstance(holder.get(MCP_NAME), dict):
            return plugin_path, ours, holder[MCP_NAME].get("url")
    return plugin_path, ours, None


def _js_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a JS string literal: newlines escaped too
