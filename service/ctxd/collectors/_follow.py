"""Following one log file between snapshots: its cursor, and what is new, rotated or rewritten."""

import os
from dataclasses import dataclass, field

from ctxd.collectors._fs import (
    NotRegular,
    ShrankError,
    explain_error,
    find_rotated,
    open_regular,
    read_exact,
)
from ctxd.collectors._logtext import BLOCK_BYTES, parse_lines
from ctxd.settings import Limits

CHECK_BYTES = 64


@dataclass
class Cursor:
    """Where the previous snapshot stopped reading one file, and what it showed."""

    dev: int
    ino: int
    offset: int  # just after the last whole line already scanned
    check: bytes  # the bytes before `offset`: if they differ now, the file was rewritten
    head: bytes = b""  # the file's first bytes: another file under a reused inode differs here
    size: int = 0
    mtime_ns: int = 0
    tail: list[str] | None = None
    tail_lines: int = 0
    binary: bool = False
    errors: list[str] = field(default_factory=list)
    error_summary: str | None = None
    error_repeats: int = 0


@dataclass
class Follow:
    """What appeared in a file since its cursor."""

    lines: list[str]
    cursor: Cursor
    event: str | None = None  # "rotated" or "truncated"
    rotated_from: str | None = None
    skipped: int = 0
    scanned: int = 0


def _unchanged_prefix(fd: int, cursor: Cursor) -> bool:
    """Whether the file still holds what the cursor saw: its start and the bytes before the
    offset (a file deleted and made again can get the old one's inode, and even the same
    bytes at the offset; its first line is then what tells it apart)."""
    start = cursor.offset - len(cursor.check)
    return (
        read_exact(fd, len(cursor.check), start) == cursor.check
        and read_exact(fd, len(cursor.head), 0) == cursor.head
    )


def _read_lines(fd: int, start: int, end: int, aligned: bool, limits: Limits) -> tuple:
    """Whole lines in [start, end): (lines, offset after the last one, check bytes)."""
    raw = read_exact(fd, end - start, start)
    cut = 0 if aligned else raw.find(b"\n") + 1
    last = raw.rfind(b"\n", cut)
    if last < 0:
        return [], start + cut if cut else start, None
    lines = parse_lines(raw[cut : last + 1], limits.log_line_chars_max)
    offset = start + last + 1
    check = raw[max(0, last + 1 - CHECK_BYTES) : last + 1]
    return lines, offset, check


def follow_fd(
    fd: int,
    st: os.stat_result,
    path: str,
    cursor: Cursor | None,
    limits: Limits,
    from_end: bool = False,
) -> Follow:
    """New whole lines since `cursor` (the last `log_scan_bytes_max` of them at most); with
    no cursor, the newest `log_scan_bytes_max`, or none when `from_end` (an event probe's
    first look: only what is written after it is news, and 8 MB read for nothing costs RSS)."""
    event, rotated_from, lines = None, None, []
    start = 0
    if cursor is None:
        start = st.st_size if from_end else max(0, st.st_size - limits.log_scan_bytes_max)
    elif (cursor.dev, cursor.ino) != (st.st_dev, st.st_ino):
        event = "rotated"
        rotated_from = find_rotated(path, cursor.dev, cursor.ino)
        if rotated_from:  # finish the old file first, so lines written before rotation count
            try:
                old_fd, old_st = open_regular(rotated_from)
                try:
                    if old_st.st_size >= cursor.offset and _unchanged_prefix(old_fd, cursor):
                        end = min(old_st.st_size, cursor.offset + limits.log_scan_bytes_max)
                        lines = _read_lines(old_fd, cursor.offset, end, True, limits)[0]
                finally:
                    os.close(old_fd)
            except (OSError, NotRegular):
                rotated_from = None
    elif st.st_size < cursor.offset or not _unchanged_prefix(fd, cursor):
        event = "truncated"
    else:
        start = cursor.offset
    aligned = start == 0 or (cursor is not None and event is None)
    skipped = max(0, st.st_size - start - limits.log_scan_bytes_max)
    if skipped:
        start, aligned = start + skipped, False
    new, offset, check = _read_lines(fd, start, st.st_size, aligned, limits)
    if check is None:  # no whole line yet: keep what the cursor vouched for, if still valid
        keep = cursor is not None and event is None
        check = cursor.check if keep and cursor is not None else b""
        offset = cursor.offset if keep and cursor is not None else offset
        if not keep and offset:
            check = read_exact(fd, min(CHECK_BYTES, offset), max(0, offset - CHECK_BYTES))
    if cursor is not None and event is None and len(cursor.head) == min(CHECK_BYTES, offset):
        head = cursor.head  # the same file, its start just checked by _unchanged_prefix
    else:
        head = read_exact(fd, min(CHECK_BYTES, offset), 0) if offset else b""
    new_cursor = Cursor(st.st_dev, st.st_ino, offset, check, head, st.st_size, st.st_mtime_ns)
    return Follow(
        lines=lines + new,
        cursor=new_cursor,
        event=event,
        rotated_from=rotated_from,
        skipped=skipped,
        scanned=st.st_size - start,
    )


def follow_path(path: str, cursor: Cursor | None, limits: Limits) -> Follow | str:
    """follow_fd on a path; a file that cannot be read gives its reason instead of raising."""
    try:
        fd, st = open_regular(path)
    except NotRegular as exc:
        return str(exc)
    except OSError as exc:
        return explain_error(exc)
    try:
        return follow_fd(fd, st, path, cursor, limits)
    except OSError as exc:
        return explain_error(exc)
    finally:
        os.close(fd)


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
