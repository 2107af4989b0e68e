"""Filesystem helpers shared by the file collectors: safe opens, globs and reasons for failure."""

import errno
import functools
import glob
import itertools
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from ctxd import confine
from ctxd.named_files import NotRegular as NotRegular
from ctxd.named_files import changed, open_named, opened_name
from ctxd.named_files import explain_mode as explain_mode

GLOB_EXAMINED_MAX = 10_000
ROTATED_SEARCH_MAX = 1000

_ERRNO_REASONS = {
    errno.ENOENT: "no such file",
    errno.ENOTDIR: "no such file (a parent is not a directory)",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ELOOP: "symlink loop",
    errno.ENAMETOOLONG: "path too long",
    errno.EISDIR: "is a directory",
}

OUTSIDE = "outside the watch roots (see CTXD_WATCH_ROOTS)"


class Outside(NotRegular):
    """What was opened lies outside the watch roots or on /proc, /sys, /dev: never read.

    A kind of NotRegular so that every caller reports it the same way: its message is the
    reason shown for the watch.
    """


class ShrankError(Exception):
    """The file got shorter between stat and read: truncated or replaced by a rotation."""


def explain_error(exc: OSError) -> str:
    """A short, human reason for an OSError on a watched path."""
    if exc.errno in _ERRNO_REASONS:
        return _ERRNO_REASONS[exc.errno]
    return f"cannot read: {exc.strerror or exc}"


def open_regular(path: str) -> tuple[int, os.stat_result]:
    """An fd and fstat for a regular file; raises OSError or NotRegular (see open_confined)."""
    return open_confined(path, ())


@functools.cache
def _pseudo_devices() -> frozenset[int]:
    return confine.pseudo_devices()


def _verify(fd: int, st: os.stat_result, roots: Iterable[Path]) -> None:
    """Raise Outside unless the open descriptor `fd` (whose fstat is `st`) may be read.

    The name in /proc/self/fd is what the kernel opened, whatever links were swapped on the
    way; it must lie under a root and still name the same device and inode (a name left over
    from a rename or deletion proves nothing).
    """
    if st.st_dev in _pseudo_devices():
        raise Outside("a pseudo filesystem (/proc, /sys, /dev) is never watched")
    try:
        opened = opened_name(fd)
    except OSError as exc:
        raise Outside("cannot verify what was opened (/proc is not mounted)") from exc
    reason = confine.refusal(opened, roots) or changed(opened, st)
    if reason:
        raise Outside(reason)


def _no_link(st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):  # swapped in after the name was resolved
        raise OSError(errno.ELOOP, "symlink loop")


def stat_confined(path: str, roots: Iterable[Path] = ()) -> tuple[os.stat_result, str]:
    """The stat of what `path` leads to, and its real path, only if that lies under a root.

    Opened with O_PATH (nothing is read, a device or fifo is not really opened) and the final
    component not followed, then verified like open_confined: the size and time of a file
    outside the roots are never seen, even while links are being swapped.
    """
    real = os.path.realpath(path)
    fd = os.open(real, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        _no_link(st)
        _verify(fd, st, roots)
    finally:
        os.close(fd)
    return st, real


def open_confined(
    path: str, roots: Iterable[Path] = (), real: str | None = None
) -> tuple[int, os.stat_result]:
    """An fd and fstat for a regular file under `roots`; raises OSError or NotRegular/Outside.
    `real`: `path` resolved by the caller just before (not resolved again).

    The name is resolved once and opened by `named_files.open_named`: without blocking (a
    fifo swapped in opens at once and is refused), without following its final component (a
    link swapped in meanwhile fails as a loop), a regular file by lstat before and by fstat
    after. The descriptor is then verified (see _verify) before a byte is read, so checking
    one file and reading another cannot happen. openat2(RESOLVE_NO_SYMLINKS) would also stop
    a swap of a parent directory before the open, but Python does not expose it (only
    through ctypes and syscall numbers, and kernels before 5.6 lack it); verifying the
    descriptor gives the same guarantee for what is read. Time is bounded by the collector
    runner's deadline, which every caller runs under.
    """
    fd, st = open_named(real or os.path.realpath(path))
    try:
        _verify(fd, st, roots)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def open_dir_confined(path: str, roots: Iterable[Path] = ()) -> int:
    """A directory fd for listing (os.scandir(fd)), verified like open_confined (O_DIRECTORY
    refuses anything else before it is opened, O_NONBLOCK all the same)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(os.path.realpath(path), flags)
    try:
        _verify(fd, os.fstat(fd), roots)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_exact(fd: int, size: int, offset: int) -> bytes:
    """`size` bytes at `offset`, fewer only at end of file."""
    parts = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


def is_glob(path: str) -> bool:
    """True when `path` is a pattern, not a literal name that happens to contain `[` or `*`."""
    return glob.has_magic(path) and not os.path.lexists(path)


def match_glob(pattern: str, cap: int = GLOB_EXAMINED_MAX) -> list[tuple[str, os.stat_result]]:
    """Matches of `pattern` with their stat, newest first; at most `cap` matches are examined."""
    found = []
    for path in itertools.islice(glob.iglob(pattern, recursive=True), cap):
        try:
            found.append((path, os.stat(path)))
        except OSError:
            continue  # broken symlink or vanished since the directory was listed
    found.sort(key=lambda item: item[1].st_mtime_ns, reverse=True)
    return found


def find_rotated(path: str, dev: int, ino: int) -> str | None:
    """The file in `path`'s directory that still has inode `ino` (logrotate's `app.log.1`)."""
    folder = os.path.dirname(path) or "."
    try:
        with os.scandir(folder) as entries:
            for i, entry in enumerate(entries):
                if i >= ROTATED_SEARCH_MAX:
                    return None
                if entry.inode() == ino and entry.path != path:
                    st = entry.stat(follow_symlinks=False)
                    if st.st_dev == dev and stat.S_ISREG(st.st_mode):
                        return entry.path
    except OSError:
        return None
    return None
