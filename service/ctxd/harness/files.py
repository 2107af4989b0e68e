"""The files a harness install writes: a planned `Change` per file, shown as a diff or applied
with a backup, atomically and keeping the file's mode; harness settings read as JSON."""

import json
import os
import stat
from pathlib import Path
from typing import Any, NamedTuple

MCP_NAME = "ctxd"  # ctxd's MCP server, by this name in every harness's settings
BACKUP_SUFFIX = ".ctxd-backup"


class InstallError(Exception):
    """A settings file ctxd will not touch (not JSON, not an object): said in one line."""


class Change(NamedTuple):
    """One file an install writes (a NamedTuple: a dataclass costs every hook event 8 ms)."""

    path: Path
    before: str
    after: str
    backup: bool = True  # False: a file ctxd owns whole, removed when `after` is empty

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        import difflib  # only for a dry run

        lines = difflib.unified_diff(
            self.before.splitlines(), self.after.splitlines(),
            fromfile=str(self.path), tofile=str(self.path), lineterm="",
        )  # fmt: skip
        return "\n".join(lines)


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
            import shutil  # only when installing: the hook path imports this module

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


def drop(data: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != key}


def without_hooks(hooks: Any, command_ends: str) -> dict[str, list[Any]]:
    """A harness's `hooks` block (Claude Code's shape, which Codex shares) without ctxd's own
    hooks, told by their command's end (`hook claude`): what uninstall leaves, what install
    adds to. Everything else, the user's hooks and entries of other shapes, is kept."""
    if not isinstance(hooks, dict):
        raise InstallError("its 'hooks' is not an object; fix the file by hand first")

    def ours(hook: Any) -> bool:
        command = hook.get("command", "") if isinstance(hook, dict) else ""
        return isinstance(command, str) and command.rstrip().endswith(command_ends)

    kept: dict[str, list[Any]] = {}
    for event, entries in hooks.items():
        left = []
        for entry in entries if isinstance(entries, list) else [entries]:
            if isinstance(entry, dict) and isinstance(entry.get("hooks"), list):
                others = [h for h in entry["hooks"] if not ours(h)]
                if others:
                    left.append({**entry, "hooks": others})
            else:
                left.append(entry)
        if left:
            kept[event] = left
    return kept
