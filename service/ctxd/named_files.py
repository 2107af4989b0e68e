"""Opening a file a request named: no blocking, no final link, regular by fstat, bounded reads."""

import errno
import os
import stat
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

NOATIME = getattr(os, "O_NOATIME", 0)
# O_NONBLOCK: opening a fifo returns at once instead of waiting for a writer (and a read of
# one returns at once); a socket cannot be opened at all. O_NOFOLLOW: a link at the end of
# the name (swapped in after the name was checked) fails the open with ELOOP.
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | NOATIME


class NotRegular(Exception):
    """The path is not a regular file; the message says what it is instead."""


class TooSlow(Exception):
    """A read that did not finish within its time, or one refused while earlier ones hang."""


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


def open_named(path: str) -> tuple[int, os.stat_result]:
    """An fd and its fstat for the regular file at `path`; raises OSError or NotRegular.

    The mode is checked on an lstat first, so a fifo or device is not even opened (opening a
    device can act); the open then neither blocks nor follows a final link, and the mode is
    checked again on the descriptor, which is what a caller reads: a fifo swapped in between
    the two is opened without waiting and refused. O_NOATIME where allowed (ctxd looking does
    not change `ls -lu`). Nothing is left open when it raises.
    """
    pre = os.stat(path, follow_symlinks=False)
    if stat.S_ISLNK(pre.st_mode):
        raise OSError(errno.ELOOP, "symlink loop")
    reason = explain_mode(pre.st_mode)
    if reason:
        raise NotRegular(reason)
    try:
        fd = os.open(path, OPEN_FLAGS)
    except PermissionError:
        fd = os.open(path, OPEN_FLAGS & ~NOATIME)  # O_NOATIME needs the owner
    try:
        st = os.fstat(fd)
        reason = explain_mode(st.st_mode)
        if reason:
            raise NotRegular(reason)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def opened_name(fd: int) -> str:
    """The real path the kernel opened for `fd`, whatever links were swapped on the way
    (OSError where /proc is not mounted)."""
    return os.readlink(f"/proc/self/fd/{fd}")


def changed(name: str, st: os.stat_result) -> str | None:
    """Why `name` no longer names the file whose fstat is `st`, or None when it does: a name
    left over from a rename or deletion proves nothing."""
    try:
        named = os.stat(name, follow_symlinks=False)
    except OSError:
        return "changed while opening (renamed or removed)"
    if (named.st_dev, named.st_ino) != (st.st_dev, st.st_ino):
        return "changed while opening (renamed or replaced)"
    return None


def read_at_most(fd: int, limit: int) -> bytes:
    """Up to `limit` bytes from the start of `fd`, fewer only at end of file."""
    parts, offset = [], 0
    while offset < limit:
        chunk = os.pread(fd, limit - offset, offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


class TimedReads:
    """Blocking file work run in a thread of its own, waited for at most a given time.

    O_NONBLOCK does not help a regular file on a stuck network or FUSE filesystem (which a
    user can mount in their home): an open, stat or read there may never return. The caller
    gets TooSlow at its time instead; the stuck thread holds one of `slots` until it returns,
    and with every slot held the next call is refused at once, so threads stay bounded too.
    The work must clean up after itself (close what it opens) and return plain data.
    """

    def __init__(self, what: str, slots: int) -> None:
        self.what = what
        self._slots = threading.BoundedSemaphore(slots)
        self._count = slots

    def run(self, work: Callable[[], T], timeout_s: float) -> T:
        if not self._slots.acquire(blocking=False):
            raise TooSlow(f"{self._count} earlier reads of a {self.what} still hang")
        done = threading.Event()
        outcome: list[tuple[bool, object]] = []

        def target() -> None:
            try:
                outcome.append((True, work()))
            except BaseException as exc:  # handed to the caller, raised there
                outcome.append((False, exc))
            finally:
                self._slots.release()
                done.set()

        try:
            threading.Thread(target=target, name=f"read-{self.what}", daemon=True).start()
        except BaseException:  # no thread to give the slot back: give it back here
            self._slots.release()
            raise
        if not done.wait(timeout_s):
            raise TooSlow(f"reading a {self.what} took longer than {timeout_s:g} s")
        ok, value = outcome[0]
        if not ok:
            assert isinstance(value, BaseException)
            raise value
        return value  # type: ignore[return-value]
