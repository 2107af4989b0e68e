"""Filesystem helpers shared by the file collectors: safe opens, globs and reasons for failure."""

import errno
import glob
import itertools
import os
import stat

GLOB_EXAMINED_MAX = 10_000
ROTATED_SEARCH_MAX = 1000
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOATIME", 0)

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


class NotRegular(Exception):
    """The path is not a regular file; the message says what it is instead."""


class ShrankError(Exception):
    """The file got shorter between stat and read: truncated or replaced by a rotation."""


def explain_error(exc: OSError) -> str:
    """A short, human reason for an OSError on a watched path."""
    if exc.errno in _ERRNO_REASONS:
        return _ERRNO_REASONS[exc.errno]
    return f"cannot read: {exc.strerror or exc}"


def explain_mode(mode: int) -> str | None:
    """Why a file of this mode is not read as a regular file, or None when it is one."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISFIFO(mode):
        return "not a regular file (fifo)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "not a regular file (device)"
    if stat.S_ISSOCK(mode):
        return "not a regular file (socket)"
    return "not a regular file"


def open_regular(path: str) -> tuple[int, os.stat_result]:
    """An fd and fstat for a regular file; raises OSError or NotRegular.

    The mode is checked on a stat before opening (opening a fifo or device could block or
    act) and again on the fd (the path may have been swapped in between). O_NOATIME is
    used where allowed, so ctxd looking at a file does not change what `ls -lu` says.
    """
    reason = explain_mode(os.stat(path).st_mode)
    if reason:
        raise NotRegular(reason)
    try:
        fd = os.open(path, OPEN_FLAGS)
    except PermissionError:
        fd = os.open(path, OPEN_FLAGS & ~getattr(os, "O_NOATIME", 0))  # not the owner
    try:
        st = os.fstat(fd)
        reason = explain_mode(st.st_mode)
        if reason:
            raise NotRegular(reason)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


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
