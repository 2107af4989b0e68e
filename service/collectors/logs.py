"""Log tails: the last lines of watched files and globs, read backwards within a byte bound."""

import errno
import glob
import itertools
import os
import re
import stat
import time
from datetime import UTC, datetime

from service.collectors import CollectContext
from service.models import LogInfo, LogsSection, LogWatch, Unavailable, Watch
from service.settings import Limits

NAME = "logs"
BLOCK_BYTES = 64 * 1024
FILES_PER_WATCH = 5
GLOB_EXAMINED_MAX = 10_000
CUT_MARKER = " … [cut {} chars]"

_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erase line
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"  # the remaining two-byte escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
# Tab survives; everything else a terminal would interpret (and \n, \r) must not reach a dump.
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
# Bytes that do not occur in text logs; \t \n \r \b \f and ESC do.
_NON_TEXT = re.compile(r"[\x00-\x07\x0b\x0e-\x1a\x1c-\x1f\x7f\ufffd]")

_ERRNO_REASONS = {
    errno.ENOENT: "no such file",
    errno.ENOTDIR: "no such file (a parent is not a directory)",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ELOOP: "symlink loop",
    errno.ENAMETOOLONG: "path too long",
    errno.EISDIR: "is a directory",
}


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


def clean_line(line: str, max_line_chars: int) -> str:
    """Collapse `\\r` progress updates to the last one with content, strip escapes, cut."""
    text = ""
    for segment in reversed(line.split("\r")):
        segment = _CONTROLS.sub("", _ESCAPES.sub("", segment))
        if segment.strip():
            text = segment
            break
    if len(text) > max_line_chars:
        text = text[:max_line_chars] + CUT_MARKER.format(len(text) - max_line_chars)
    return text


def parse_tail(raw: bytes, lines: int, max_line_chars: int, *, partial: bool = False) -> list[str]:
    """The last `lines` clean lines of `raw`; `partial`: raw starts mid-line, drop that piece."""
    if lines <= 0:
        return []
    parts = raw.decode("utf-8", errors="replace").split("\n")
    if partial and len(parts) > 1:
        parts = parts[1:]
    if parts[-1] == "":
        parts.pop()  # the newline ending the last line does not start another one
    return [clean_line(part, max_line_chars) for part in parts[-lines:]]


def detect_binary(raw: bytes) -> bool:
    """True when the last block of `raw` looks like binary data rather than text."""
    block = raw[-BLOCK_BYTES:]
    if not block:
        return False
    if block.count(0) * 10 > len(block):
        return True
    text = block.decode("utf-8", errors="replace")
    return len(_NON_TEXT.findall(text)) * 10 > len(text) * 3


def read_tail(fd: int, size: int, lines: int, budget: int) -> tuple[bytes, bool]:
    """Read backwards in blocks until `lines` whole lines or `budget` bytes; (bytes, partial)."""
    chunks: list[bytes] = []
    pos = size
    newlines = 0
    # lines + 1 newlines: one more than needed marks where the first wanted line starts.
    while pos > 0 and size - pos < budget and newlines <= lines:
        take = min(BLOCK_BYTES, pos, budget - (size - pos))
        pos -= take
        chunk = os.pread(fd, take, pos)
        if len(chunk) != take:
            raise ShrankError
        chunks.append(chunk)
        newlines += chunk.count(b"\n")
    chunks.reverse()
    return b"".join(chunks), pos > 0


def observe_log(
    watch_id: int, path: str, lines: int, limits: Limits, now: float
) -> LogInfo | Unavailable:
    """Stat, check and tail one file; any failure becomes an Unavailable with a reason."""

    def unavailable(reason: str) -> Unavailable:
        return Unavailable(watch_id=watch_id, target=path, reason=reason)

    try:
        st = os.stat(path)
    except OSError as exc:
        return unavailable(explain_error(exc))
    reason = explain_mode(st.st_mode)
    if reason:
        return unavailable(reason)  # never open a fifo or device: it could block or act
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            reason = explain_mode(st.st_mode)
            if reason:
                return unavailable(reason)
            raw, partial = read_tail(fd, st.st_size, lines, limits.log_tail_bytes_max)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return unavailable("vanished while reading")
    except ShrankError:
        return unavailable("shrank while reading (truncated or rotated)")
    except OSError as exc:
        return unavailable(explain_error(exc))
    binary = detect_binary(raw)
    return LogInfo(
        watch_id=watch_id,
        path=os.path.realpath(path),
        size=st.st_size,
        modified_at=datetime.fromtimestamp(st.st_mtime, UTC),
        silent_for_s=max(0.0, now - st.st_mtime),
        inode=st.st_ino,
        binary=binary,
        lines=[] if binary else parse_tail(raw, lines, limits.log_line_chars_max, partial=partial),
    )


def collect_watch(watch_id: int, spec: LogWatch, limits: Limits) -> list[LogInfo | Unavailable]:
    """Observations for one log watch: its file, or the newest files matching its glob."""
    target = os.path.expanduser(spec.path)
    lines = min(spec.lines, limits.log_lines_max)
    now = time.time()
    if not is_glob(target):
        return [observe_log(watch_id, target, lines, limits, now)]
    matches = [path for path, st in match_glob(target) if stat.S_ISREG(st.st_mode)]
    if not matches:
        return [Unavailable(watch_id=watch_id, target=target, reason="no file matches the glob")]
    return [observe_log(watch_id, path, lines, limits, now) for path in matches[:FILES_PER_WATCH]]


def collect(watches: list[Watch], ctx: CollectContext) -> LogsSection:
    """Tail every log watch of the session; failures are listed, never raised."""
    section = LogsSection()
    for watch in watches:
        if not isinstance(watch.spec, LogWatch):
            continue
        try:
            results = collect_watch(watch.id, watch.spec, ctx.settings.limits)
        except Exception as exc:  # a bad watch must not cost the rest of the dump
            results = [
                Unavailable(watch_id=watch.id, target=watch.spec.path, reason=f"error: {exc!r}")
            ]
        for result in results:
            if isinstance(result, LogInfo):
                section.items.append(result)
            else:
                section.unavailable.append(result)
    return section
