"""Log watches: tails read backwards, and new bytes since the last snapshot scanned for errors."""

import os
import re
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ctxd import confine, redact
from ctxd.collectors import CollectContext, per_watch
from ctxd.collectors._follow import Cursor, Follow, follow_fd, read_tail
from ctxd.collectors._fs import (
    OUTSIDE,
    NotRegular,
    ShrankError,
    explain_error,
    is_glob,
    match_glob,
    open_confined,
)
from ctxd.collectors._holders import WriterMemory, attach_writers
from ctxd.collectors._logtext import (
    detect_binary,
    find_error_block,
    parse_lines,
    repeats,
    tail_text,
)
from ctxd.models import LogInfo, LogsSection, LogWatch, Unavailable, Watch
from ctxd.settings import Limits

NAME = "logs"
SECTION = LogsSection
KIND = "log"
RETIRES = True
TAIL_READ_FACTOR = 4


def redact_lines(lines: list[str]) -> list[str]:
    """Redact a window of lines, so a secret spread over lines (a PEM block) is seen whole,
    even when the window starts inside it."""
    return redact.lines(lines)


# How much of an ended run's log its error is looked for in (from the end).
ENDED_RUN_TAIL_BYTES = 256 * 1024


def last_error(path: str, roots: Iterable[Path], since: float, limits: Limits) -> str | None:
    """The root cause of the error a run's log ended with (redacted), when the file was
    written since `since` (epoch seconds): for an attempt that ended, whether or not its log
    is watched. Confined and bounded as any read of a watched log; None when unreadable."""
    try:
        fd, st = open_confined(path, roots)
    except (OSError, NotRegular):
        return None
    try:
        if st.st_mtime < since:
            return None  # an earlier run's file, left as it was
        raw, partial = read_tail(fd, st.st_size, 10**6, ENDED_RUN_TAIL_BYTES)
    except (OSError, ShrankError):
        return None
    finally:
        os.close(fd)
    if detect_binary(raw[:4096]):
        return None
    found = find_error_block(parse_lines(raw, limits.log_line_chars_max, partial=partial))
    return redact.text(found[1]) if found else None


def observe_log(
    watch_id: int,
    path: str,
    spec: LogWatch,
    limits: Limits,
    cursors: dict,
    now: float,
    roots: tuple[Path, ...] = (),
    from_end: bool = False,
    real: str | None = None,
) -> tuple[LogInfo | Unavailable, Cursor | None]:
    """Tail one file and scan what is new since its cursor (`real`: its real path, its cursor's
    key, when the caller has it); a failure becomes an Unavailable."""
    real = real or os.path.realpath(path)
    cursor: Cursor | None = cursors.get((watch_id, real))
    lines = min(spec.lines, limits.log_lines_max)
    try:
        fd, st = open_confined(path, roots, real)
    except NotRegular as exc:
        return Unavailable(watch_id=watch_id, target=path, reason=str(exc)), cursor
    except FileNotFoundError:
        return Unavailable(watch_id=watch_id, target=path, reason="no such file"), cursor
    except OSError as exc:
        return Unavailable(watch_id=watch_id, target=path, reason=explain_error(exc)), cursor
    if roots and not confine.allowed(path, roots, real):
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
            new = follow_fd(fd, st, real, cursor, limits, from_end)
            # more lines than shown: progress frames fold away (the byte budget still bounds it)
            want = lines * TAIL_READ_FACTOR
            raw, partial = read_tail(fd, st.st_size, want, limits.log_tail_bytes_max)
            tail, binary = tail_text(raw, lines, limits.log_line_chars_max, partial=partial)
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
        same = repeats(new.lines, found[1], extra)
    elif cursor is not None and new.event is None:  # carried over, marked as not new
        errors, summary, count = cursor.errors, cursor.error_summary, 0
        same = cursor.error_repeats
    else:
        errors, summary, count, same = [], None, 0, 0
    nxt = new.cursor
    nxt.tail, nxt.tail_lines, nxt.binary = tail, lines, binary
    nxt.errors, nxt.error_summary, nxt.error_repeats = errors, summary, same
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
        error_repeats=same,
    )
    return info, nxt


def collect_watch(
    watch_id: int,
    spec: LogWatch,
    limits: Limits,
    cursors: dict,
    seen: dict,
    roots: tuple[Path, ...] = (),
    from_end: bool = False,
    dirs: dict[str, str] | None = None,
) -> list[LogInfo | Unavailable]:
    """Observations for one log watch: its file, or the newest files matching its glob
    (`dirs`: the directories resolved in this run, see `real_path`)."""
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
        real = real_path(path, {} if dirs is None else dirs)  # its cursor's key, resolved once
        result, cursor = observe_log(
            watch_id, path, spec, limits, cursors, now, roots, from_end, real
        )
        if cursor is not None:
            seen[(watch_id, real)] = cursor
        results.append(result)
    return results


def real_path(path: str, dirs: dict[str, str]) -> str:
    """`os.path.realpath(path)`, its directory resolved once for all the files of one run
    (`dirs`: directory as named -> resolved): a session's logs sit in a few directories,
    and resolving each one's whole path again costs a system call per component. What is
    then opened is still verified by its descriptor (`open_confined`)."""
    # not abspath: it folds `..` before a link is resolved, and realpath does not
    head, tail = os.path.split(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))
    if tail in ("", ".", ".."):
        return os.path.realpath(path)
    resolved = dirs.get(head)
    if resolved is None:
        resolved = dirs[head] = os.path.realpath(head)
    joined = os.path.join(resolved, tail)
    return os.path.realpath(joined) if os.path.islink(joined) else joined


@dataclass
class LogsMemory:
    """Per (watch, real path): where the previous snapshot stopped reading, what it showed."""

    cursors: dict[tuple[int, str], Cursor] = field(default_factory=dict)
    writers: WriterMemory = field(default_factory=WriterMemory)


def collect(watches: list[Watch], ctx: CollectContext) -> LogsSection:
    """Tail every log watch of the session; failures are listed, never raised."""
    memory = ctx.memory_of(NAME, LogsMemory)
    seen: dict[tuple[int, str], Cursor] = {}
    roots = confine.roots_of_run(ctx)

    # A probe's very first look is its baseline: what the logs already hold is no news to it
    # (a snapshot read it), so it starts at their ends; a log it meets later is read as ever.
    baseline = ctx.probe and not memory.cursors
    dirs: dict[str, str] = {}  # resolved once in this run

    def observe(watch: Watch) -> list[LogInfo | Unavailable]:
        assert isinstance(watch.spec, LogWatch)
        limits = ctx.settings.limits
        cursors = memory.cursors
        return collect_watch(watch.id, watch.spec, limits, cursors, seen, roots, baseline, dirs)

    items, unavailable = per_watch(watches, LogWatch, observe, _target)
    memory.cursors = seen  # only files still watched: memory stays bounded
    if not ctx.probe:  # a probe looks for events; who writes a log is for the dump
        try:
            logs = [i for i in items if isinstance(i, LogInfo)]
            attach_writers(logs, watches, memory.writers, ctx)
        except OSError as exc:  # /proc unreadable: the logs themselves still count
            unavailable.append(Unavailable(target="log writers", reason=explain_error(exc)))
    return LogsSection(items=items, unavailable=unavailable)


def _target(watch: Watch) -> str:
    return watch.spec.path if isinstance(watch.spec, LogWatch) else NAME
