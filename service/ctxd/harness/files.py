"""The files a harness install writes: a planned `Change` per file, shown as a diff or applied
with a backup, atomically and keeping the file's mode; harness settings read as JSON."""

import contextlib
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
    """One file an install writes."""

    path: Path
    before: str
    after: str
    backup: bool = True  # False: a file ctxd owns whole, removed when `after` is empty

    @property
    def changed(self) -> bool:
        """Whether it says something else (a file laid out otherwise says the same)."""
        return not _same(self.before, self.after, self.path)

    def diff(self) -> str:
        import difflib  # only for a dry run

        lines = difflib.unified_diff(
            self.before.splitlines(), self.after.splitlines(),
            fromfile=str(self.path), tofile=str(self.path), lineterm="",
        )  # fmt: skip
        return "\n".join(lines)


def apply(changes: list[Change], remove: bool = False) -> list[tuple[Path, str]]:
    """Write the files that change; returns each path with what was done to it ("created",
    "updated", "restored", "removed", "cleaned").

    An install backs a file up once, before its first change (`.ctxd-backup`, said among what
    it did); a file it creates has no backup. An uninstall leaves each file as it was before
    the install: the backup put back byte for byte (and removed) when the file, without ctxd,
    holds what the backup holds; a file ctxd created removed when nothing but ctxd was in it;
    otherwise the file without ctxd's entries, and the backup removed (the file changed since:
    it is older than the person's edits). A file ctxd owns whole (the opencode plugin) is
    removed by a change to nothing, with its folder when that is left empty."""
    done = []
    for change in changes:
        if not change.changed:
            continue
        path = change.path
        backup = path.with_name(path.name + BACKUP_SUFFIX)
        if not change.after and not change.backup:
            path.unlink(missing_ok=True)
            done.append((path, "removed"))
            with contextlib.suppress(OSError):  # the folder made for it, left empty by it
                path.parent.rmdir()
        elif remove and backup.exists() and _same(change.after, read_text(backup), path):
            _write_in_place(path, read_text(backup))
            backup.unlink()
            done.append((path, "restored"))
        elif remove and not backup.exists() and _same(change.after, "", path):
            path.unlink(missing_ok=True)
            done.append((path, "removed"))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            existed = path.exists()
            if change.backup and existed and not remove and not backup.exists():
                import shutil  # only when installing

                shutil.copy2(path, backup)
                done.append((backup, "kept the file as it was in"))
            _write_in_place(path, change.after)
            done.append((path, "cleaned" if remove else "updated" if existed else "created"))
            if remove and backup.exists():  # edited since: the file now, less ctxd, is newer
                backup.unlink()
                done.append((backup, "removed the backup, older than your edits,"))
    return done


def _same(text: str, other: str, path: Path) -> bool:
    """Whether two versions of a settings file say the same (parsed as its kind: JSON or
    TOML; an empty file is an empty object), whatever their layout."""
    if text == other:
        return True
    try:
        if path.suffix == ".toml":
            import tomllib  # only when uninstalling

            return tomllib.loads(text) == tomllib.loads(other)
        return (json.loads(text) if text.strip() else {}) == (
            json.loads(other) if other.strip() else {}
        )
    except ValueError:  # not parseable as its kind (a .jsonc with comments): text alone
        return False


def _write_in_place(path: Path, text: str) -> None:
    """Atomically, through a symlink to its target (a dotfiles link stays a link), keeping
    the file's mode (a 0600 config holding tokens stays 0600)."""
    real = Path(os.path.realpath(path))
    try:
        mode: int | None = stat.S_IMODE(real.stat().st_mode)
    except FileNotFoundError:
        mode = None  # a new file: the umask's
    # a new name no one can guess, made here and nowhere else: a link planted at a name the
    # next install would use (another account's, in a folder it may write) is never followed
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    tmp = real.with_name(f".{real.name}.{os.urandom(8).hex()}.tmp")
    descriptor = os.open(tmp, flags, 0o600 if mode else 0o666)
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
    """A settings file's text ("" when absent); InstallError when it is there but no regular
    file (a FIFO would block the install forever, a device or folder is no settings file)."""
    try:
        kind = os.stat(path).st_mode
    except FileNotFoundError:
        return ""
    if not stat.S_ISREG(kind):
        raise InstallError(f"{path} is not a regular file; not touched")
    return path.read_text(encoding="utf-8")


def json_text(data: dict[str, Any], path: Path) -> str:
    if not data and not path.exists():
        return ""
    return json.dumps(data, indent=2) + "\n"


def drop(data: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != key}


def without_hooks(hooks: Any, command_ends: str) -> dict[str, list[Any]]:
    """A harness's `hooks` block (Claude Code's shape, which Codex shares) without ctxd's own
    hooks, told by their command's end (`hook claude`, or its waiter's `hook claude --wake`)
    or, for those the harness posts itself, their URL's (`/api/hooks/claude/http`):
    what uninstall leaves, what install adds to. Everything else, the user's hooks and
    entries of other shapes, is kept."""
    if not isinstance(hooks, dict):
        raise InstallError("its 'hooks' is not an object; fix the file by hand first")

    posted = f"/api/hooks/{command_ends.split()[-1]}/http"  # what the harness posts itself

    def ours(hook: Any) -> bool:
        command = hook.get("command", "") if isinstance(hook, dict) else ""
        url = hook.get("url", "") if isinstance(hook, dict) else ""
        ends = (command_ends, f"{command_ends} --wake")
        mine = isinstance(command, str) and command.rstrip().endswith(ends)
        return mine or (isinstance(url, str) and url.rstrip("/").endswith(posted))

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


def with_hooks(
    settings: dict[str, Any], command_ends: str, ours: dict[str, list[Any]] | None
) -> dict[str, Any]:
    """A settings object whose `hooks` block (Claude Code's shape) holds `ours` after the
    user's, in place of ctxd's earlier ones; None: without ctxd's; no `hooks` key once empty."""
    hooks = without_hooks(settings.get("hooks", {}), command_ends)
    for event, entries in (ours or {}).items():
        hooks.setdefault(event, []).extend(entries)
    return {**settings, "hooks": hooks} if hooks else drop(settings, "hooks")


def with_mcp_server(settings: dict[str, Any], server: dict[str, Any] | None) -> dict[str, Any]:
    """A settings object whose `mcpServers` holds ctxd's `server` by ctxd's name (None: without
    it), the others kept; no `mcpServers` key once empty."""
    servers = settings.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise InstallError("its 'mcpServers' is not an object; fix the file by hand first")
    servers = {k: v for k, v in servers.items() if k != MCP_NAME}
    if server is not None:
        servers[MCP_NAME] = server
    return {**settings, "mcpServers": servers} if servers else drop(settings, "mcpServers")
