"""The dump's history of attempts: the session's newest attempts as its lines (updates a
snapshot has not saved yet applied), interleaved with the agent's own journal entries, and the
logs those attempts write.
"""

import re
import shlex
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TypeVar

from ctxd.attempts.flags import attempt_diff, changed_values, program_name, summary_line
from ctxd.attempts.folding import Light, Numbered, crowd, earlier, folded, light, runs
from ctxd.attempts.model import UNCHANGED, Attempt, AttemptUpdate, given, given_or
from ctxd.fmt import attempts, human_duration, log_name
from ctxd.models import HistoryItem, JournalEntry
from ctxd.store.database import Store

COMMAND_CHARS = 2000  # the running and the newest failed attempt show theirs whole
ATTEMPTS_FOLDED = 500  # the newest attempts read for the dump; older ones are searched
SHOWN_IN_FULL = 6  # the newest attempts shown one by one; older ones fold by outcome
FLAGS_COMPARED = 200  # of the folded ones, the newest whose flags say which varied
# An attempt gone this soon, with no error, may have gone with the command that started it.
AT_ONCE_S = 3.0
T = TypeVar("T")


Logs = tuple[frozenset[str], frozenset[str]]


def attempt_logs(store: Store, sid: str, pending: Sequence[AttemptUpdate] = ()) -> Logs:
    """(the log files of the session's newest attempts, those of attempts that ended but for
    those a running attempt writes too: an error in them is an earlier run's, never the
    running one's); `pending`: updates from `observed` not saved yet."""
    stored = _recent(store, sid)[0]
    if pending:
        return _logs_of(_with_pending(stored, pending))
    return _kept(_logs_kept, store, sid, stored, lambda: _logs_of(stored))


def _logs_of(newest: list[Attempt]) -> Logs:
    every = frozenset(path for attempt in newest for path in attempt.logs)
    running = {path for a in newest if a.ended_at is None for path in a.logs}
    return every, frozenset(path for a in newest if a.ended_at for path in a.logs) - running


_logs_kept: "weakref.WeakKeyDictionary[Store, dict[str, tuple[list[Attempt], Logs]]]" = (
    weakref.WeakKeyDictionary()
)


def history(
    store: Store, sid: str, journal: list[JournalEntry], pending: Sequence[AttemptUpdate] = ()
) -> list[HistoryItem]:
    """Attempts and the agent's own journal attempts (`journal`) in one list, oldest first: the
    newest SHOWN_IN_FULL attempts one by one, older ones folded by how they ended; `pending`
    holds updates from `observed` not saved yet, shown as if they were."""
    stored, total = _recent(store, sid)
    if pending:
        newest_attempts = _with_pending(stored, pending)
        known = {attempt.start_key for attempt in stored}
        total += sum(  # a root no command made, seen for the first time
            1
            for update in pending
            if update.pid is not UNCHANGED
            and update.bound_from is UNCHANGED
            and update.start_key not in known
        )
        fold = _fold(newest_attempts, total, sid)
    else:  # as stored: the fold made of this read, kept until the attempts change
        fold = _kept_fold(store, sid, stored, total)
    now = datetime.now(UTC)
    ended_by = _harness_reaper(store, sid)
    newest = [fold.head.model_copy(deep=True)] if fold.head is not None else []
    previous = fold.before
    for run, against in zip(fold.shown, fold.compared, strict=True):
        number, attempt = run[0]
        item = _item(attempt, previous, now, number, ended_by, against)
        if len(run) > 1:
            item = crowd(run, item, _item(run[-1][1], None, now, run[-1][0], ended_by))
        newest.append(item)
        previous = run[-1][1]
    return interleave(newest, sorted(map(_journal, journal), key=lambda i: i.at))


@dataclass(frozen=True, slots=True)
class Fold:
    """The attempts a dump reads, as its table takes them: the line the older ones fold into
    (`head`: None when there are none), the newest SHOWN_IN_FULL runs each with its numbers,
    and the attempt before the first of those (`before`), which its row is compared with.
    None of it depends on the time: what does (how long one runs) is made from `shown`."""

    head: HistoryItem | None
    shown: list[list[Numbered]]
    before: Attempt | None
    compared: list["Compared | None"]  # each shown run's first against the attempt before it


def _fold(newest_attempts: list[Attempt], total: int, sid: str) -> Fold:
    """The fold of the newest attempts read (`total`: how many the session has in all)."""
    first_number = total - len(newest_attempts) + 1
    older: list[Light] = []
    previous: Attempt | None = None
    numbered_runs = runs(list(enumerate(newest_attempts, start=first_number)))
    full_from = max(0, len(numbered_runs) - SHOWN_IN_FULL)  # older runs: what the fold says
    for index, run in enumerate(numbered_runs[:full_from]):
        number = run[0][0]
        compared = index >= full_from - FLAGS_COMPARED
        following = numbered_runs[index + 1][0][1] if number == 1 else None
        older.append(light(run, previous if compared else None, following))
        previous = run[-1][1]
    head = None
    if older:
        every_compared = full_from <= FLAGS_COMPARED
        first = numbered_runs[0][0][1] if every_compared else None
        head = folded(older, first_number - 1, sid, first)
    elif first_number > 1:
        head = earlier(first_number - 1, sid, newest_attempts[0].started_at)
    shown, before, against = numbered_runs[full_from:], previous, []
    for run in shown:
        against.append(compare(previous, run[0][1]) if previous is not None else None)
        previous = run[-1][1]
    return Fold(head, shown, before, against)


# The fold of each session's attempts as read last (`_recent`), by store, with that read: a
# long session's continue folds the same hundreds of attempts only once they changed.
_folds: "weakref.WeakKeyDictionary[Store, dict[str, tuple[list[Attempt], Fold]]]" = (
    weakref.WeakKeyDictionary()
)


def _kept_fold(store: Store, sid: str, stored: list[Attempt], total: int) -> Fold:
    """The fold of `stored`, the read `_recent` keeps while the attempts are unchanged."""
    return _kept(_folds, store, sid, stored, lambda: _fold(stored, total, sid))


def _kept(
    kept: "weakref.WeakKeyDictionary[Store, dict[str, tuple[list[Attempt], T]]]",
    store: Store,
    sid: str,
    stored: list[Attempt],
    make: Callable[[], T],
) -> T:
    """What `make` makes of `stored`, the read `_recent` keeps while the attempts are
    unchanged: made again only for another read (any write of an attempt, here or by another
    connection)."""
    of_store = kept.setdefault(store, {})
    hit = of_store.get(sid)
    if hit is None or hit[0] is not stored:
        hit = of_store[sid] = (stored, make())
    return hit[1]


def interleave(attempt_items: list[HistoryItem], notes: list[HistoryItem]) -> list[HistoryItem]:
    """The attempts in their order (the order of the commands, not of kernel start times, which
    are a second coarse), each of the agent's own notes before the first attempt after it."""
    out: list[HistoryItem] = []
    waiting = list(notes)
    for item in attempt_items:
        while waiting and waiting[0].at <= item.at:
            out.append(waiting.pop(0))
        out.append(item)
    return out + waiting


# The newest attempts of each session as read last, by store, with the stamp they were read at:
# a crowd's hundreds of attempts cost a read and three JSON decodes each, every snapshot.
_Stamped = tuple[tuple[int, int], tuple[list[Attempt], int]]
_read: "weakref.WeakKeyDictionary[Store, dict[str, _Stamped]]" = weakref.WeakKeyDictionary()


def _recent(store: Store, sid: str) -> tuple[list[Attempt], int]:
    """The newest ATTEMPTS_FOLDED attempts, oldest first, and how many the session has in all;
    read again only once they changed."""
    stamp = store.attempts_stamp(sid)
    of_store = _read.setdefault(store, {})
    kept = of_store.get(sid)
    if kept is not None and kept[0] == stamp:
        return kept[1]
    read = (store.list_attempts(sid, limit=ATTEMPTS_FOLDED), store.count_attempts(sid))
    of_store[sid] = (stamp, read)
    return read


def _with_pending(stored: list[Attempt], pending: Sequence[AttemptUpdate]) -> list[Attempt]:
    """The stored attempts with the unsaved updates of `observed` applied: new ones added, the
    others updated (bound to their process, ended, port opened, idle, their error)."""
    if not pending:
        return list(stored)
    by_key = {a.start_key: a for a in stored}  # in the order they were made: the attempts'
    for update in pending:
        key = given_or(update.bound_from, None) or update.start_key
        if key in by_key:
            current = by_key[key]
            opened = given_or(update.port_opened, current.port_opened)
            by_key[key] = replace(
                current,
                pid=given_or(update.pid, current.pid),
                # as stored: a process's argv is written once, when it binds its attempt
                argv=given(update.argv) if update.bound_from is not UNCHANGED else current.argv,
                started_at=given_or(update.started_at, current.started_at),
                # one exec's environment: what /proc read adds to what its line set (a read
                # of an exiting process finds none, and takes nothing away)
                env={**current.env, **given_or(update.env, {})},
                seen=bool(given_or(update.seen, current.seen)),
                ended_at=given_or(update.ended_at, current.ended_at),
                port_opened=None if opened is None else bool(opened),
                idle_s=given_or(update.idle_s, current.idle_s),
                logs=given_or(update.logs, current.logs),
                error=given_or(update.error, current.error),
                error_log=given_or(update.error_log, current.error_log),
            )
        elif update.pid is not UNCHANGED:
            by_key[key] = _sighted(update)
    return list(by_key.values())


def _sighted(update: AttemptUpdate) -> Attempt:
    """A root process seen for the first time, as the attempt its saved update will make."""
    return Attempt(
        pid=given(update.pid),
        argv=given(update.argv),
        started_at=given(update.started_at),
        cwd=given_or(update.cwd, None),
        env=given_or(update.env, {}),
        expected_ports=given_or(update.expected_ports, ()),
        ended_at=given_or(update.ended_at, None),
        exit_status=given_or(update.exit_status, None),
        port_opened=given_or(update.port_opened, None),
        idle_s=given_or(update.idle_s, None),
        command=given_or(update.command, None),
        seen=given_or(update.seen, True),
        logs=given_or(update.logs, ()),
        error=given_or(update.error, None),
        error_log=given_or(update.error_log, None),
        start_key=update.start_key,
        watch_id=given_or(update.watch_id, None),
        tool_id=given_or(update.tool_id, None),
    )


_DETACHERS = ("setsid", "nohup", "disown")
_DETACHER = re.compile(r"(?:^|[\s;|&(])(setsid|nohup|disown)(?=\s|$)")


def _sent_off_anew(previous: Attempt, attempt: Attempt) -> str | None:
    """ "`setsid` added": how its line sends it off changed (a harness that ends a command's
    process group spares only a `setsid` launch), as the two lines say; None where the same
    or either line is not known."""
    if not previous.command or not attempt.command:
        return None
    was = set(_DETACHER.findall(previous.command))
    now = set(_DETACHER.findall(attempt.command))
    parts = [f"`{w}` added" for w in _DETACHERS if w in now - was]
    parts += [f"`{w}` dropped" for w in _DETACHERS if w in was - now]
    return ", ".join(parts) or None


def _output_moved(previous: Attempt, attempt: Attempt) -> str | None:
    """ "output logs/attempt1.log → server.log": where its output went instead, as its line
    names the files; None where both wrote the same ones (or either none ctxd knows)."""
    if not previous.logs or not attempt.logs or set(previous.logs) == set(attempt.logs):
        return None
    was = ", ".join(log_name(path, previous.cwd) for path in previous.logs)
    now = ", ".join(log_name(path, attempt.cwd) for path in attempt.logs)
    if re.sub(r"\d+", "N", was) == re.sub(r"\d+", "N", now):
        return None  # a log per run (run198.log, run199.log): the run's number, not a change
    return f"output {was} \N{RIGHTWARDS ARROW} {now}"


def _journal(entry: JournalEntry) -> HistoryItem:
    return HistoryItem(
        at=entry.created_at,
        source="journal",
        text=entry.text,
        status=entry.status,
        outcome=entry.outcome,
    )


Reaper = Callable[[str], str | None]


def _harness_reaper(store: Store, sid: str) -> Reaper:
    """Why a process a command sent off ended with the command, where a harness of this
    session's conversations ends such processes itself (`Adapter.left_behind`)."""
    from ctxd.harness.registry import MODULES, adapter

    named = {c["harness"] for c in store.conversations_of(sid)} & set(MODULES)
    harnesses = [adapter(name) for name in sorted(named)]

    def why(command: str) -> str | None:
        return next((w for h in harnesses if (w := h.left_behind(command))), None)

    return why


@dataclass(frozen=True, slots=True)
class Compared:
    """What an attempt changed from the one before it: the flags, their new values, and the
    words its row says it with ("--port 8000 → 8001", "relaunched unchanged")."""

    flags: tuple[str, ...]
    values: dict[str, str]
    changed: str


def compare(previous: Attempt, attempt: Attempt) -> Compared:
    diff = attempt_diff(previous, attempt)
    flags = sorted({part.split(" ")[0] for part in diff.added + diff.removed + diff.changed})
    changed = summary_line(diff, program_name(attempt.argv), program_name(previous.argv))
    moved = "; ".join(filter(None, (_sent_off_anew(previous, attempt),
                                     _output_moved(previous, attempt))))  # fmt: skip
    if moved and not diff.program_changed:
        unchanged = changed == "relaunched unchanged"
        changed = f"relaunched with {moved}" if unchanged else f"{changed}; {moved}"
    return Compared(tuple(flags), changed_values(diff), changed)


def _item(
    attempt: Attempt,
    previous: Attempt | None,
    now: datetime,
    number: int,
    ended_by: Reaper | None = None,
    against: Compared | None = None,
) -> HistoryItem:
    program = program_name(attempt.argv)
    pid = f" (pid {attempt.pid})" if attempt.pid is not None else ""
    text = f"`{program}`{pid} at {attempt.started_at:%H:%M:%S} UTC"
    notes = [attempt.outcome(now)]
    lived_s = (attempt.ended_at - attempt.started_at).total_seconds() if attempt.ended_at else None
    at_once = lived_s is not None and (not attempt.seen or lived_s <= AT_ONCE_S)
    if at_once and not attempt.error and attempt.command and ended_by is not None:
        notes[0] = ended_by(attempt.command) or notes[0]
    if attempt.ended_at is None:
        status = "running" if attempt.seen else "started"
        if attempt.idle_s is not None and attempt.idle_s >= 10:
            notes.append(f"idle for {human_duration(attempt.idle_s)}")
    else:
        status = "ended"
    ports = ", ".join(str(p) for p in attempt.expected_ports)
    if attempt.port_opened is False or (attempt.expected_ports and not attempt.seen):
        notes.append(f"port {ports} {'never opened' if attempt.ended_at else 'not open yet'}")
    elif attempt.port_opened:
        notes.append(f"port {ports} opened")
    if attempt.error:
        where = f" (in {log_name(attempt.error_log, attempt.cwd)})" if attempt.error_log else ""
        notes.append(f"its log: {attempt.error}{where}")
    flags: list[str] = []
    values: dict[str, str] = {}
    changed = None
    if previous is not None:
        said = against or compare(previous, attempt)
        flags, values, changed = list(said.flags), dict(said.values), said.changed
        notes.append(changed)
    command = attempt.command or shlex.join(attempt.argv)  # an argv read: quoted, safe to paste
    if len(command) > COMMAND_CHARS:
        command = command[:COMMAND_CHARS] + " …"
    return HistoryItem(
        at=attempt.started_at,
        source="launch",
        label=attempts(number, number),
        first=number,
        last=number,
        text=text,
        status=status,
        outcome="; ".join(notes),
        command=command,
        cwd=attempt.cwd,
        written=attempt.command is not None,
        error=attempt.error,
        error_log=attempt.error_log,
        pid=attempt.pid,
        flags=flags,
        flag_values=values,
        ran=notes[0],
        changed=changed,
        ports=list(attempt.expected_ports),
        port_open=bool(attempt.port_opened) if attempt.expected_ports else None,
        logs=list(attempt.logs),
        lived_s=lived_s,
    )
