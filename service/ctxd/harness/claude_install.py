"""`ctxd install|uninstall claude`: ctxd's hooks and MCP server merged into Claude Code's own
settings files, idempotently, keeping everything else, with a backup and a dry run. The file
plumbing here (a planned `Change`, `apply`, reading JSON) serves `install_opencode.py` too.

Ours are recognised by their command (`… hook claude`) and by the MCP server's name `ctxd`,
so uninstall removes exactly what install added and a second install changes nothing.
"""

import difflib
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxd.harness.claude_hook import claude_config

MCP_NAME = "ctxd"
BACKUP_SUFFIX = ".ctxd-backup"


class InstallError(Exception):
    """A settings file ctxd will not touch (not JSON, not an object): said in one line."""


@dataclass
class Change:
    path: Path
    before: str
    after: str
    backup: bool = True  # False: a file ctxd owns whole, removed when `after` is empty

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        lines = difflib.unified_diff(
            self.before.splitlines(), self.after.splitlines(),
            fromfile=str(self.path), tofile=str(self.path), lineterm="",
        )  # fmt: skip
        return "\n".join(lines)


def targets(scope: str, project: Path, home: Path) -> tuple[Path, Path]:
    """(settings.json holding the hooks, the file holding the MCP servers) for a scope."""
    if scope == "project":
        return project / ".claude" / "settings.json", project / ".mcp.json"
    return home / ".claude" / "settings.json", home / ".claude.json"


def plan(
    command: str, url: str, scope: str, project: Path, home: Path, remove: bool
) -> list[Change]:
    """What install (or uninstall, with `remove`) would write, file by file."""
    settings_path, mcp_path = targets(scope, project, home)
    settings, mcp = read_json(settings_path), read_json(mcp_path)
    hooks = _without_ours(settings.get("hooks", {}))
    if not remove:
        for event, entries in claude_config(command)["hooks"].items():
            hooks.setdefault(event, []).extend(entries)
    new_settings = {**settings, "hooks": hooks} if hooks else _drop(settings, "hooks")
    servers = {k: v for k, v in mcp.get("mcpServers", {}).items() if k != MCP_NAME}
    if not remove:
        servers[MCP_NAME] = {"type": "http", "url": url.rstrip("/") + "/mcp"}
    new_mcp = {**mcp, "mcpServers": servers} if servers else _drop(mcp, "mcpServers")
    return [
        Change(settings_path, read_text(settings_path), json_text(new_settings, settings_path)),
        Change(mcp_path, read_text(mcp_path), json_text(new_mcp, mcp_path)),
    ]


def apply(changes: list[Change]) -> list[Path]:
    """Write the files that change (a backup of each first, once); a change to nothing removes
    a file ctxd owns whole (the opencode plugin). Returns the paths written or removed."""
    written = []
    for change in changes:
        if not change.changed:
            continue
        if not change.after and not change.backup:
            change.path.unlink(missing_ok=True)
            written.append(change.path)
            continue
        change.path.parent.mkdir(parents=True, exist_ok=True)
        backup = change.path.with_name(change.path.name + BACKUP_SUFFIX)
        if change.backup and change.path.exists() and not backup.exists():
            shutil.copy2(change.path, backup)
        _write_in_place(change.path, change.after)
        written.append(change.path)
    return written


def _write_in_place(path: Path, text: str) -> None:
    """Atomically, through a symlink to its target (a dotfiles link stays a link), keeping
    the file's mode (a 0600 config holding tokens stays 0600)."""
    real = Path(os.path.realpath(path))
    try:
        mode: int | None = stat.S_IMODE(real.stat().st_mode)
    except FileNotFoundError:
        mode = None  # a new file: the umask's
    tmp = real.with_name(f".{real.name}.{os.getpid()}.tmp")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if mode else 0o666)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
        if mode is not None:
            os.fchmod(handle.fileno(), mode)
    os.replace(tmp, real)


def _is_ours(hook: Any) -> bool:
    command = hook.get("command", "") if isinstance(hook, dict) else ""
    return isinstance(command, str) and command.rstrip().endswith("hook claude")


def _without_ours(hooks: Any) -> dict[str, list[Any]]:
    if not isinstance(hooks, dict):
        raise InstallError("its 'hooks' is not an object; fix the file by hand first")
    kept: dict[str, list[Any]] = {}
    for event, entries in hooks.items():
        left = []
        for entry in entries if isinstance(entries, list) else [entries]:
            if isinstance(entry, dict) and isinstance(entry.get("hooks"), list):
                others = [h for h in entry["hooks"] if not _is_ours(h)]
                if others:
                    left.append({**entry, "hooks": others})
            else:
                left.append(entry)
        if left:
            kept[event] = left
    return kept


def read_json(path: Path) -> dict[str, Any]:
    """A settings file's object ({} when absent or empty); InstallError when it is not one."""
    text = read_text(path)
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        why = f"{path} is not JSON ({exc.msg}, line {exc.lineno}); not touched"
        raise InstallError(why) from None
    if not isinstance(data, dict):
        raise InstallError(f"{path} does not hold a JSON object; not touched")
    return data


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def json_text(data: dict[str, Any], path: Path) -> str:
    if not data and not path.exists():
        return ""
    return json.dumps(data, indent=2) + "\n"


def _drop(data: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != key}
