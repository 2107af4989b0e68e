"""Log watches: tails read backwards, and new bytes since the last snapshot scanned for errors."""

import os
import re
import stat
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from service import confine, redact
from service.collectors import CollectContext, per_watch
from service.collectors._fs import (
    OUTSIDE,
    NotRegular,
    ShrankError,
    explain_error,
    find_rotated,
    is_glob,
    match_glob,
    open_regular,
    read_exact,
)
from service.collectors._logtext import (
    BLOCK_BYTES,
    detect_binary,
    find_error_block,
    parse_lines,
    parse_tail,
)
from service.models import LogInfo, LogsSection, LogWatch, Unavailable, Watch
from service.settings import Limits

NAME = "logs"
SECTION = LogsSection
CHECK_BYTES = 64


@dataclass
class Cursor:
    """Where the previous snapshot stopped reading one file, and what it showed."""

    dev: int
    ino: int
    offset: int  # just after the last whole line already scanned
    check: bytes  # the bytes before `offset`: if they differ now, the file was rewritten
    size: int = 0
    mtime_ns: int = 0
    tail: list[str] | None = None
    tail_lines: int = 0
    binary: bool = False
    errors: list[str] = field(default_factory=list)
    error_summary: str | None = None


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
    start = cursor.offset - len(cursor.check)
    return read_exact(fd, len(cursor.check), start) == cursor.check


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
    fd: int, st: os.stat_result, path: str, cursor: Cursor | None, limits: Limits
) -> Follow:
    """New whole lines since `cursor` (the last `log_scan_bytes_max` of them at most)."""
    event, rotated_from, lines = None, None, []
    start = 0
    if cursor is None:
        start = max(0, st.st_size - limits.log_scan_bytes_max)
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
    new_cursor = Cursor(st.st_dev, st.st_ino, offset, check, st.st_size, st.st_mtime_ns)
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


def redact_lines(lines: list[str]) -> list[str]:
    """Redact lines as one text, so a secret spread over lines (a PEM block) is seen whole."""
    return redact.text("\n".join(lines)).split("\n") if lines else []


def observe_log(
    watch_id: int,
    path: str,
    spec: LogWatch,
    limits: Limits,
    cursors: dict,
    now: float,
    roots: tuple[Path, ...] = (),
) -> tuple[LogInfo | Unavailable, Cursor | None]:
    """Tail one file and scan what is new since its cursor; a failure becomes an Unavailable."""
    real = os.path.realpath(path)
    cursor: Cursor | None = cursors.get((watch_id, real))
    lines = min(spec.lines, limits.log_lines_max)
    try:
        fd, st = open_regular(path)
    except NotRegular as exc:
        return Unavailable(watch_id=watch_id, target=path, reason=str(exc)), cursor
    except FileNotFoundError:
        return Unavailable(watch_id=watch_id, target=path, reason="no such file"), cursor
    except OSError as exc:
        return Unavailable(watch_id=watch_id, target=path, reason=explain_error(exc)), cursor
    if roots and not confine.allowed(path, roots):
        # checked again before every read: a glob match or a symlink can point outside later
        os.close(fd)
        return Unavailable(watch_id=watch_id, target=path, reason=OUTSIDE), cursor
    try:
        unchanged = (
            cursor is not None
            and cursor.tail is not None
            and cursor.tail_lines == lines
            and (cursor.dev, cursor.ino, cursor.size, cursor.mtime_ns)
            == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        )
        if unchanged and cursor is not None:  # nothing was written: reuse, read nothing
            new = Follow(lines=[], cursor=cursor)
            tail, binary = cursor.tail or [], cursor.binary
        else:
            new = follow_fd(fd, st, real, cursor, limits)
            raw, partial = read_tail(fd, st.st_size, lines, limits.log_tail_bytes_max)
            binary = detect_binary(raw)
            tail = (
                [] if binary else parse_tail(raw, lines, limits.log_line_chars_max, partial=partial)
            )
            tail = redact_lines(tail)
    except (ShrankError, FileNotFoundError):
        reason = "shrank or vanished while reading (truncated or rotated)"
        return Unavailable(watch_id=watch_id, target=path, reason=reason), cursor
    except OSError as exc:
        return Unavailable(watch_id=watch_id, target=path, reason=explain_error(exc)), cursor
    finally:
        os.close(fd)
    extra = [re.compile(p) for p in spec.errors]
    found = None if binary else find_error_block(new.lines, extra)
    summary: str | None
    if found:
        errors, summary, count = redact_lines(found[0]), redact.text(found[1]), found[2]
    elif cursor is not None and new.event is None:  # carried over, marked as not new
        errors, summary, count = cursor.errors, cursor.error_summary, 0
    else:
        errors, summary, count = [], None, 0
    nxt = new.cursor
    nxt.tail, nxt.tail_lines, nxt.binary = tail, lines, binary
    nxt.errors, nxt.error_summary = errors, summary
    grew = st.st_size - cursor.size if cursor is not None and new.event is None else None
    info = LogInfo(
        watch_id=watch_id,
        path=real,
        size=st.st_size,
        modified_at=datetime.fromtimestamp(st.st_mtime, UTC),
        silent_for_s=max(0.0, now - st.st_mtime),
        inode=st.st_ino,
        binary=binary,
        lines=tail,
        growth_bytes=grew,
        rotated=new.event == "rotated",
        truncated=new.event == "truncated",
        rotated_from=new.rotated_from,
        scanned_bytes=new.scanned,
        skipped_bytes=new.skipped,
        errors=errors,
        error_summary=summary,
        error_new=bool(found),
        error_lines=count,
    )
    return info, nxt


def collect_watch(
    watch_id: int,
    spec: LogWatch,
    limits: Limits,
    cursors: dict,
    seen: dict,
    roots: tuple[Path, ...] = (),
) -> list[LogInfo | Unavailable]:
    """Observations for one log watch: its file, or the newest files matching its glob."""
    target = os.path.expanduser(spec.path)
    now = time.time()
    if is_glob(target):
        paths = [path for path, st in match_glob(target) if stat.S_ISREG(st.st_mode)]
        if not paths:
            return [
                Unavailable(watch_id=watch_id, target=target, reason="no file matches the glob")
            ]
        paths = paths[: spec.files]
    else:
        paths = [target]
    results = []
    for path in paths:
        result, cursor = observe_log(watch_id, path, spec, limits, cursors, now, roots)
        if cursor is not None:
            seen[(watch_id, os.path.realpath(path))] = cursor
        results.append(result)
    return results


@dataclass
class LogsMemory:
    """Per (watch, real path): where the previous snapshot stopped reading, what it showed."""

    cursors: dict[tuple[int, str], Cursor] = field(default_factory=dict)


def collect(watches: list[Watch], ctx: CollectContext) -> LogsSection:
    """Tail every log watch of the session; failures are listed, never raised."""
    memory = ctx.memory_of(NAME, LogsMemory)
    seen: dict[tuple[int, str], Cursor] = {}
    roots = tuple(confine.roots(ctx.settings))

    def observe(watch: Watch) -> list[LogInfo | Unavailable]:
        assert isinstance(watch.spec, LogWatch)
        limits = ctx.settings.limits
        return collect_watch(watch.id, watch.spec, limits, memory.cursors, seen, roots)

    items, unavailable = per_watch(watches, LogWatch, observe, _target)
    memory.cursors = seen  # only files still watched: memory stays bounded
    return LogsSection(items=items, unavailable=unavailable)


def _target(watch: Watch) -> str:
    return watch.spec.path if isinstance(watch.spec, LogWatch) else NAME
