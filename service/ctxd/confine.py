"""Where watches may look: log, artifact and command-cwd paths confined to configured roots.

A watch makes ctxd read a file and serve what it read, so whoever can add a watch could read
any file ctxd can. Paths must lie under a root (by default the user's home, /tmp and the
working directory) after `..` and symlinks are resolved; the kernel's pseudo filesystems
(/proc, /sys, /dev) are refused even under a root, as they expose other processes' secrets.
The working directory is a default root only where it cannot widen them to the system: not
`/`, nor a folder of the system (/etc, /usr, /var...) or one holding other users' (/home).
"""

import glob
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ctxd.errors import Invalid, Refused
from ctxd.models import ArtifactWatch, CommandWatch, LogWatch
from ctxd.settings import Settings

if TYPE_CHECKING:  # the collectors import this module
    from ctxd.collectors import CollectContext

REFUSED = ("/proc", "/sys", "/dev")
# The system's own folders: the working directory is never a default root in one of them
# (`cd /etc && ctxd serve`); /root only where it is not the home.
_SYSTEM = (
    "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/var",
    "/run", "/snap", "/root", *REFUSED,
)  # fmt: skip
# Folders that hold other users' or other disks' folders: never a default root themselves.
_HOLDERS = ("/", "/home", "/mnt", "/media", "/opt", "/srv")


def _home() -> str | None:
    """The real home, unless it is none at all or a folder that holds others (`HOME=/`)."""
    try:
        home = os.path.realpath(Path.home())
    except (RuntimeError, KeyError, OSError):
        return None
    if home in _HOLDERS or (home in _SYSTEM and home != "/root"):
        return None
    return home


def _cwd_root(home: str | None) -> str | None:
    """The working directory as a root, unless it would widen the roots to the system: `/`,
    a holder such as /home (or any folder above home), or a place in a system folder
    outside home. ctxd started from `/` or /etc watches home and /tmp only."""
    try:
        cwd = os.path.realpath(Path.cwd())
    except OSError:  # the folder was removed under a running process
        return None
    if cwd in _HOLDERS or (home is not None and _under(home, cwd)):
        return None
    if home is not None and _under(cwd, home):
        return cwd
    return None if any(_under(cwd, system) for system in _SYSTEM) else cwd


def default_roots() -> list[Path]:
    home = _home()
    cwd = _cwd_root(home)
    return [Path(p) for p in dict.fromkeys((home, "/tmp", cwd)) if p is not None]


def roots(settings: Settings) -> list[Path]:
    """The configured roots, resolved, so a symlinked root compares by its real location."""
    return [Path(os.path.realpath(r)) for r in (settings.watch_roots or default_roots())]


def roots_of_run(ctx: "CollectContext") -> tuple[Path, ...]:
    """`roots` once per collection run: the logs, artifacts and Slurm collectors share it."""
    return ctx.once("watch roots", lambda: tuple(roots(ctx.settings)))


def _under(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def _literal_prefix(pattern: str) -> tuple[str, str]:
    """Split a glob into the part without magic (which can be resolved) and the rest."""
    parts = pattern.split("/")
    for i, part in enumerate(parts):
        if glob.has_magic(part):
            return "/".join(parts[:i]) or "/", "/".join(parts[i:])
    return pattern, ""


def resolve(raw: str) -> str:
    """The absolute, symlink-free form of a path or glob (its magic part kept as written)."""
    if "\x00" in raw:
        raise Invalid("path: contains a NUL character")
    path = os.path.abspath(os.path.expanduser(raw))  # also folds `..` lexically
    literal, rest = _literal_prefix(path)
    real = os.path.realpath(literal)
    return os.path.join(real, rest) if rest else real


def check_path(
    raw: str, allowed: Sequence[Path], what: str = "path", real: str | None = None
) -> None:
    """Raise Refused (403) for a path outside the roots or inside /proc, /sys, /dev.
    `real`: `raw` resolved by the caller just before (not resolved again)."""
    lexical = os.path.abspath(os.path.expanduser(raw.replace("\x00", "")))
    real = real or resolve(raw)
    for candidate in (lexical, real):
        for refused in REFUSED:
            if _under(candidate, refused):
                raise Refused(f"{what} {raw!r}: {refused} is never watched")
    bases = [str(r) for r in allowed]
    # Both forms must be inside: `..` escapes show in the lexical one, symlinks in the real one.
    if not all(any(_under(c, b) for b in bases) for c in (lexical, real)):
        where = ", ".join(bases)
        raise Refused(
            f"{what} {raw!r} resolves outside the watch roots ({where}); "
            "set CTXD_WATCH_ROOTS to allow it"
        )


def within_roots(spec: object, settings: Settings) -> None:
    """Refuse a log, artifact or command watch whose path or cwd is outside the roots."""
    allowed = roots(settings)
    if isinstance(spec, LogWatch | ArtifactWatch):
        check_path(spec.path, allowed)
    elif isinstance(spec, CommandWatch) and spec.cwd is not None:
        check_path(spec.cwd, allowed, what="cwd")


def allowed(path: str, roots_: Iterable[Path], real: str | None = None) -> bool:
    """Whether one concrete file (a glob match, say) really lies under a root: for collectors,
    since a symlink created after the watch was added is only seen when it is read. `real`:
    `path` resolved by the caller just before (not resolved again)."""
    try:
        check_path(path, list(roots_), real=real)
    except (Refused, Invalid):
        return False
    return True


def refusal(real: str, roots_: Iterable[Path]) -> str | None:
    """Why an already resolved path (an opened descriptor's) may not be read, or None.

    No roots means no root confinement (a caller that has none), but /proc, /sys and /dev
    are refused all the same.
    """
    for refused in REFUSED:
        if _under(real, refused):
            return f"{refused} is never watched"
    bases = [str(r) for r in roots_]
    if bases and not any(_under(real, b) for b in bases):
        return "outside the watch roots (see CTXD_WATCH_ROOTS)"
    return None


def pseudo_devices() -> frozenset[int]:
    """Device numbers of /proc, /sys and /dev where they are mounted: a descriptor on one of
    them is refused even when a bind mount gives it a name under a root."""
    found = set()
    for path in REFUSED:
        try:
            if os.path.ismount(path):
                found.add(os.stat(path).st_dev)
        except OSError:
            continue
    return frozenset(found)
