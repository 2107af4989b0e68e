"""Attempts: each launch, from the agent's command to how it ended, followed per snapshot.

An attempt is born with the agent's command (`usecases/agent_actions.py` saves it before any
process is seen, `seen` 0): its command as written, directory, time, log files and expected
ports. A snapshot binds it to the root process that command spawned (a new root of a process
watch running the same program with the same arguments in the same directory, started
around the command), follows it while it runs (port state, idle time, the logs its tree
writes) and ends it when the process is gone, with the error its own log ended with. One
whose process is never seen died before ctxd looked: it stays an attempt, with its command
and its log's error. A root process no command accounts for (started by hand, by a script)
is an attempt too, from its first sighting.

Everything here reads: `observed` says which rows to write, and the snapshot writes them
(`save`) once it is stored, so a preview changes nothing.
"""

import functools
import re
import shlex
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

from ctxd.collectors.logs import last_error
from ctxd.discovery.launches import Launch, flag_diff, program_of, summary_line, typed_name
from ctxd.discovery.procscan import SHELLS
from ctxd.discovery.shellparse import WRAPPER_PROGRAMS
from ctxd.fmt import attempts, human_duration
from ctxd.models import (
    HistoryItem,
    JournalEntry,
    LogInfo,
    Observations,
    ProcessInfo,
    ProcessWatch,
    Watch,
)
from ctxd.settings import Limits
from ctxd.store.database import Store

COMMAND_CHARS = 2000  # the running and the newest failed attempt show theirs whole
LAUNCHES_FOLDED = 500  # the newest attempts read for the dump; older ones are searched
SHOWN_IN_FULL = 6  # the newest attempts shown one by one; older ones fold by outcome
FLAGS_COMPARED = 50  # of the folded ones, the newest whose flags say which varied
# An attempt whose process is not seen this long after its command was reported ended
# before ctxd looked (the settling snapshot comes a second after a launch).
PENDING_S = 1.0
# Its process may have started this long before the command was reported (a tool call that
# launched in the background, then slept and read the log before returning).
BIND_BEFORE_S = 600.0
SEEN_BEFORE_READ = 20  # the newest attempts a reported command may already be among


@dataclass(frozen=True)
class Cutoff:
    """What a snapshot may judge by what it sees: the attempts recorded before it began to look
    (`launch_id` and lower) and a process table read after that (`at`, time.monotonic()). A
    command reported while it looked may have a process its table predates: such an attempt
    is not ended as 'died before ctxd saw it' by this snapshot."""

    launch_id: int
    at: float


def cutoff(store: Store, sid: str) -> Cutoff:
    """The cutoff of a snapshot that begins to look now."""
    return Cutoff(store.last_launch_id(sid), time.monotonic())


@dataclass(frozen=True)
class LogFiles:
    """Where an ended attempt's log may be read when no watch reads it: the watch roots and
    the bounds of a log read (the snapshot's settings)."""

    roots: tuple[Path, ...]
    limits: Limits


def observed(
    store: Store,
    sid: str,
    watches: list[Watch],
    seen: Observations,
    files: LogFiles,
    cut: Cutoff,
) -> list[dict]:
    """The attempt rows this observation calls for (read, not written): a new root binds the
    attempt its command made (or starts one), vanished roots and attempts never seen before
    `cut` end theirs (with their log's error), running ones get their port state, idle time
    and logs. The snapshot saves them once it is stored (`save`); a preview shows them
    unsaved."""
    process_watches = {w.id: w for w in watches if isinstance(w.spec, ProcessWatch)}
    open_rows = store.running_launches(sid)
    if not process_watches and not open_rows:
        return []
    items = seen.processes.items
    tree_of = {p.pid: p.tree if p.tree is not None else p.pid for p in items}
    listening: dict[int, set[int]] = {}
    for p in items:
        listening.setdefault(tree_of[p.pid], set()).update(p.listening)
    writes: dict[int, set[str]] = {}  # tree -> the logs its members write
    for log in seen.logs.items:
        if log.writer_pid in tree_of:
            writes.setdefault(tree_of[log.writer_pid], set()).add(log.path)
    open_ports = {port.port for port in seen.ports.items if port.listening}
    logs = {log.path: log for log in seen.logs.items}
    now = datetime.now(UTC)
    stored = {row["start_key"]: row for row in open_rows if row["seen"]}
    pending = [row for row in open_rows if not row["seen"]]
    bound: set[str] = set()
    running = set()
    saves: list[dict] = []
    for p in items:
        watch = process_watches.get(p.watch_id)
        if not p.root or watch is None or _exiting(p):
            continue
        assert isinstance(watch.spec, ProcessWatch)
        running.add(p.key)
        expected = list(watch.spec.expect_ports)
        ports = listening.get(p.pid, set()) | (open_ports & set(expected))
        row: dict[str, Any] = {
            "start_key": p.key,
            "watch_id": watch.id,
            "pid": p.pid,
            "started_at": p.started_at,
            "argv": p.argv,
            "cwd": p.cwd,
            "env": p.env,
            "expected_ports": expected,
            "port_opened": int(bool(set(expected) & ports)) if expected else None,
            "idle_s": p.idle_for_s,
        }
        row["logs"] = sorted(writes.get(p.pid, set()))
        known = stored.get(p.key)
        if known is None and (born := _born_with(p.argv, p.cwd, p.started_at, pending, bound)):
            bound.add(born["start_key"])
            row |= _bound(born, row)
        elif known is None and _passing(p):
            continue
        elif known is not None:
            row["logs"] = sorted(set(known["logs"]) | set(row["logs"]))
            if known["command"]:
                row |= {k: known[k] for k in ("started_at", "expected_ports")}
        saves.append(row)
    gone = {e.key: e.last_seen_at for e in seen.processes.exited if e.root}
    for row in open_rows:
        key = row["start_key"]
        if key in running or key in bound:
            continue
        started = datetime.fromisoformat(row["started_at"])
        if row["seen"]:
            if row["watch_id"] not in process_watches:
                continue  # its watch was removed: it is no longer followed, not "gone"
            ended = gone.get(key) or now
        elif row["id"] > cut.launch_id or (now - started).total_seconds() < PENDING_S:
            continue  # reported while this snapshot looked, or its process may be starting
        else:
            ended = now  # it died before any snapshot saw it
        error = _error(row["logs"], logs, started, files)
        saves.append({"start_key": key, "ended_at": ended, **error})
    return saves


def _exiting(p: ProcessInfo) -> bool:
    """A process that has exited or is exiting: a zombie, or one whose memory is released
    already (its command line reads empty), which no attempt can be told by."""
    return p.state in ("zombie", "dead") or not p.argv


def _passing(p: ProcessInfo) -> bool:
    """A shell running a command line (`bash -c 'nohup python serve.py … &'`) or a wrapper
    (`nohup`, `setsid`, …) younger than PENDING_S: the shell of a command that starts
    something in the background, its fork or a wrapper not yet replaced by the program; not
    a launch of its own unless it stays (or its own command was that, which binds it first)."""
    name = PurePosixPath(p.argv[0]).name
    options = [arg for arg in p.argv[1:-1] if arg.startswith("-") and not arg.startswith("--")]
    shell = name in SHELLS and any("c" in arg for arg in options)
    return (shell or name in WRAPPER_PROGRAMS) and p.age_s < PENDING_S


def _bound(born: dict, row: dict) -> dict:
    """What a root process's row takes from the attempt its command made: that attempt's
    place (`bound_from`), its command, its time (the earlier: a kernel start time is a
    second coarse) and expected ports, and its logs beside those the process writes."""
    return {
        "bound_from": born["start_key"],
        "seen": 1,
        "command": born["command"],
        "started_at": min(_time(born["started_at"]), _time(row["started_at"])),
        "expected_ports": born["expected_ports"],
        "logs": sorted(set(born["logs"]) | set(row["logs"])),
    }


def _born_with(
    argv: Sequence[str],
    cwd: str | None,
    started_at: datetime,
    pending: list[dict],
    bound: set[str],
) -> dict | None:
    """The oldest attempt not yet seen that this new root process is the launch of: the same
    program with the same arguments, in the command's directory, started around it."""
    program, args = program_of(list(argv))
    for row in pending:
        if row["start_key"] in bound:
            continue
        their_program, their_args = program_of(row["argv"])
        if not _same_program(their_program, program) or their_args != args:
            continue
        if row["cwd"] and cwd and row["cwd"] != cwd:
            continue
        at = datetime.fromisoformat(row["started_at"])
        if at - timedelta(seconds=BIND_BEFORE_S) <= started_at <= at + timedelta(minutes=10):
            return row
    return None


def seen_before(store: Store, sid: str, attempt: dict) -> str | None:
    """The start key of the launch a snapshot already saw running for this attempt's command
    (a snapshot can come between the command and the harness's report of it): the newest
    root process no command accounts for, of the same program and arguments in the same
    folder, started around the command. None: the attempt is new."""
    for row in reversed(store.list_launches(sid, limit=SEEN_BEFORE_READ)):
        if row["command"] is None and row["seen"] and row["pid"] is not None:
            started = datetime.fromisoformat(row["started_at"])
            if _born_with(row["argv"], row["cwd"], started, [_iso(attempt)], set()):
                return str(row["start_key"])
    return None


def _iso(attempt: dict) -> dict:
    started = attempt["started_at"]
    return {
        **attempt,
        "started_at": started.isoformat() if isinstance(started, datetime) else started,
    }


def _same_program(written: tuple[str, ...], running: tuple[str, ...]) -> bool:
    """`torchrun` as written is `python …/torchrun` as it runs (a Python entry point script)."""
    names = tuple(PurePosixPath(part).name for part in written)
    running_names = tuple(PurePosixPath(part).name for part in running)
    return names == running_names or (
        running_names[:1] == ("python",) and names == running_names[1:]
    )


def _error(
    paths: Sequence[str], logs: dict[str, LogInfo], started: datetime, files: LogFiles
) -> dict:
    """The error its own logs ended with: from a log it names that was written since it
    started, as this snapshot's log watch saw it, else read from the file's end."""
    since = started - timedelta(seconds=1)
    for path in paths:
        log = logs.get(path)
        if log is not None:
            if log.error_summary and log.modified_at >= since:
                return {"error": log.error_summary, "error_log": path}
        elif summary := last_error(path, files.roots, since.timestamp(), files.limits):
            return {"error": summary, "error_log": path}
    return {}


def attempt_logs(store: Store, sid: str, pending: Sequence[dict] = ()) -> tuple[set[str], set[str]]:
    """(the log files of the session's newest attempts, those of attempts that ended but for
    those a running attempt writes too: an error in them is an earlier run's, never the
    running one's); `pending`: rows from `observed` not saved yet."""
    launches = _with_pending(_recent(store, sid)[0], pending)
    every = {path for launch in launches for path in launch.logs}
    running = {path for launch in launches if launch.ended_at is None for path in launch.logs}
    return every, {path for launch in launches if launch.ended_at for path in launch.logs} - running


def save(store: Store, sid: str, saves: list[dict]) -> None:
    """Write what `observed` found (after the snapshot that found it was stored). A root
    process it saw first, with no command, joins the attempt of a command reported since
    (one attempt per launch); `agent_actions` binds the other way round, a command reported
    after its process was saved. Both check and write holding the store, so whichever of the
    two comes second finds the first."""
    if not saves:
        return
    with store.held():
        store.save_launches(sid, _join_reported(store, sid, saves))


def _join_reported(store: Store, sid: str, saves: list[dict]) -> list[dict]:
    waiting = store.unseen_launches(sid)
    roots = {row["start_key"] for row in saves if "pid" in row and "bound_from" not in row}
    if not waiting or not roots:
        return saves
    firsts = roots - store.launch_keys(sid, list(roots))
    taken = {row["start_key"] for row in saves if "ended_at" in row}
    joined = []
    for row in saves:
        if row["start_key"] in firsts:
            born = _born_with(row["argv"], row["cwd"], _time(row["started_at"]), waiting, taken)
            if born is not None:
                taken.add(born["start_key"])
                row = row | _bound(born, row)
        joined.append(row)
    return joined


def history(
    store: Store, sid: str, attempts: list[JournalEntry], pending: Sequence[dict] = ()
) -> list[HistoryItem]:
    """Attempts and the agent's own journal attempts in one list, oldest first: the newest
    SHOWN_IN_FULL launches one by one, older ones folded by how they ended; `pending` holds
    rows from `observed` not saved yet, shown as if they were."""
    stored, total = _recent(store, sid)
    launches = _with_pending(stored, pending)
    known = dict(stored)
    total += sum(  # a root no command made, seen for the first time
        1
        for row in pending
        if "pid" in row and "bound_from" not in row and row["start_key"] not in known
    )
    first_number = total - len(launches) + 1
    now = datetime.now(UTC)
    older: list[_Light] = []
    newest: list[HistoryItem] = []
    previous: Launch | None = None
    runs = _runs(list(enumerate(launches, start=first_number)))
    full_from = len(runs) - SHOWN_IN_FULL  # older runs are folded: only what the fold says
    for index, run in enumerate(runs):
        number, launch = run[0]
        if index < full_from:
            compared = index >= full_from - FLAGS_COMPARED
            older.append(_light(run, previous if compared else None))
        else:
            item = _item(launch, previous, now, number)
            if len(run) > 1:
                item = _crowd(run, item, _item(run[-1][1], None, now, run[-1][0]))
            newest.append(item)
        previous = run[-1][1]
    if older:
        newest.insert(0, _folded(older, first_number - 1, sid))
    elif first_number > 1:
        newest.insert(0, _earlier(first_number - 1, sid, launches[0].started_at))
    return interleave(newest, sorted(map(_journal, attempts), key=lambda i: i.at))


def interleave(launches: list[HistoryItem], notes: list[HistoryItem]) -> list[HistoryItem]:
    """The attempts in their order (the order of the commands, not of kernel start times, which
    are a second coarse), each of the agent's own notes before the first attempt after it."""
    out: list[HistoryItem] = []
    waiting = list(notes)
    for launch in launches:
        while waiting and waiting[0].at <= launch.at:
            out.append(waiting.pop(0))
        out.append(launch)
    return out + waiting


# The newest launches of each session as read last, by store, with the stamp they were read at:
# a crowd's hundreds of launches cost a read and three JSON decodes each, every snapshot.
_Stamped = tuple[tuple[int, int], tuple[list[tuple[str, Launch]], int]]
_read: "weakref.WeakKeyDictionary[Store, dict[str, _Stamped]]" = weakref.WeakKeyDictionary()


def _recent(store: Store, sid: str) -> tuple[list[tuple[str, Launch]], int]:
    """The newest LAUNCHES_FOLDED attempts by start key, oldest first, and how many the
    session has in all; read again only once they changed."""
    stamp = store.launches_stamp(sid)
    of_store = _read.setdefault(store, {})
    kept = of_store.get(sid)
    if kept is not None and kept[0] == stamp:
        return kept[1]
    rows = store.list_launches(sid, limit=LAUNCHES_FOLDED)
    launches = [(row["start_key"], _launch(row)) for row in rows]
    read = (launches, store.count_launches(sid))
    of_store[sid] = (stamp, read)
    return read


def _with_pending(stored: list[tuple[str, Launch]], pending: Sequence[dict]) -> list[Launch]:
    """The stored launches with the unsaved rows of `observed` applied: new ones added, the
    others updated (bound to their process, ended, port opened, idle, their error)."""
    if not pending:
        return [launch for _, launch in stored]
    by_key = dict(stored)  # in the order they were made: the order of the attempts
    for row in pending:
        key = row.get("bound_from") or row["start_key"]
        if key in by_key:
            current = by_key[key]
            opened = row.get("port_opened", current.port_opened)
            by_key[key] = replace(
                current,
                pid=row.get("pid", current.pid),
                # as stored: a process's argv is written once, when it binds its attempt
                argv=tuple(row["argv"]) if "bound_from" in row else current.argv,
                started_at=_time(row.get("started_at", current.started_at)),
                env=row.get("env", current.env),
                seen=bool(row.get("seen", current.seen)),
                ended_at=row.get("ended_at", current.ended_at),
                port_opened=None if opened is None else bool(opened),
                idle_s=row.get("idle_s", current.idle_s),
                logs=tuple(row.get("logs", current.logs)),
                error=row.get("error", current.error),
                error_log=row.get("error_log", current.error_log),
            )
        elif "pid" in row:
            by_key[key] = _launch(row)
    return list(by_key.values())


def _runs(numbered: list[tuple[int, Launch]]) -> list[list[tuple[int, Launch]]]:
    """Launches of one command line in a row, in one state (a crowd of alike processes, one
    program started again and again unchanged), each run a list."""
    runs: list[list[tuple[int, Launch]]] = []
    for number, launch in numbered:
        if runs and _alike(runs[-1][0][1], launch):
            runs[-1].append((number, launch))
        else:
            runs.append([(number, launch)])
    return runs


def _alike(a: Launch, b: Launch) -> bool:
    return (a.argv, a.ended_at is None, a.port_opened, a.expected_ports, a.error) == (
        b.argv, b.ended_at is None, b.port_opened, b.expected_ports, b.error,
    )  # fmt: skip


def _crowd(run: list[tuple[int, Launch]], first: HistoryItem, last: HistoryItem) -> HistoryItem:
    """A run as one line: "launched `sleep 60` 20 times (pids …)", with the newest's outcome."""
    pids = [str(launch.pid) for _, launch in run if launch.pid is not None]
    shown = ", ".join(pids[:3]) + (f", … {pids[-1]}" if len(pids) > 3 else "")
    program = _program(run[0][1])
    start, end = (f"{run[i][1].started_at:%H:%M:%S}" for i in (0, -1))
    when = f"at {start}" if start == end else f"from {start} to {end}"
    ran = f" (pids {shown})" if pids else ""
    text = f"`{program}` {len(run)} times{ran} {when} UTC"
    numbers = {"first": run[0][0], "last": run[-1][0], "label": attempts(run[0][0], run[-1][0])}
    update = {"text": text, "outcome": last.outcome, "ran": last.ran, **numbers}
    return first.model_copy(update=update)


@dataclass(frozen=True, slots=True)
class _Light:
    """An attempt (or a run of alike ones) that only the fold shows; a plain record, since a
    long session's snapshot makes hundreds of them (a model each cost it milliseconds)."""

    at: datetime
    first: int
    last: int
    status: str
    error: str | None
    error_log: str | None
    flags: tuple[str, ...]


def _light(run: list[tuple[int, Launch]], previous: Launch | None) -> _Light:
    """Its numbers, how it ended, its error and, against the one before (`previous`, for the
    newest folded ones), the flags it changed."""
    (first, launch), (last, newest) = run[0], run[-1]
    flags: tuple[str, ...] = ()
    if previous is not None:
        diff = flag_diff(previous.argv, launch.argv, previous.env, launch.env)
        flags = tuple(sorted({p.split(" ")[0] for p in diff.added + diff.removed + diff.changed}))
    status = "running" if newest.ended_at is None and newest.seen else "ended"
    return _Light(launch.started_at, first, last,
                  status if newest.ended_at or newest.seen else "started",
                  newest.error, newest.error_log, flags)  # fmt: skip


def _folded(older: list[_Light], before: int, sid: str) -> HistoryItem:
    """The attempts older than the newest few, in one line: how many ended how (the same error
    once, with its count) and which flags varied among them."""
    first, last = older[0].first, older[-1].last
    outcomes: dict[str, int] = {}
    for item in older:
        count = item.last - item.first + 1
        key = _shape(item.error or item.status or "?")
        outcomes[key] = outcomes.get(key, 0) + count
    said = "; ".join(
        f"{n} {_outcome_words(shape)}" for shape, n in sorted(outcomes.items(), key=lambda x: -x[1])
    )
    varied = sorted({flag for item in older for flag in item.flags})
    flags = f"; flags that varied: {', '.join(varied[:8])}" if varied else ""
    earlier = f" (and {before} before them)" if before else ""
    failed = [item for item in older if item.error]
    return HistoryItem(
        error=failed[-1].error if failed else None,
        error_log=failed[-1].error_log if failed else None,
        at=older[0].at,
        source="launch",
        label=attempts(first, last),
        first=first,
        last=last,
        text=f"{said}{flags}{earlier}",
        status="folded",
        outcome=f"each one: `ctxd search {sid} WORDS`",
    )


def _earlier(before: int, sid: str, at: datetime) -> HistoryItem:
    return HistoryItem(
        at=at - timedelta(microseconds=1),
        source="launch",
        label=attempts(1, before),
        first=1,
        last=before,
        text=f"{before} earlier attempts, not read for this dump",
        status="folded",
        outcome=f"each one: `ctxd search {sid} WORDS`",
    )


@functools.lru_cache(maxsize=4096)  # a long session's errors repeat: hundreds per snapshot
def _shape(text: str) -> str:
    """An error as a class of errors: its numbers and paths elided (run 14 and run 23 of one
    failure read alike)."""
    return re.sub(r"\d+", "N", text)[:160]


def _outcome_words(shape: str) -> str:
    if shape in ("running", "ended", "started", "?"):
        return {"running": "running", "ended": "ended", "started": "starting"}.get(shape, "?")
    return f"died with `{shape}`"


def _journal(entry: JournalEntry) -> HistoryItem:
    return HistoryItem(
        at=entry.created_at,
        source="journal",
        text=entry.text,
        status=entry.status,
        outcome=entry.outcome,
    )


def _time(value: datetime | str) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def _launch(row: dict[str, Any]) -> Launch:
    ended = row.get("ended_at")
    return Launch(
        pid=row["pid"],
        argv=tuple(row["argv"]),
        started_at=_time(row["started_at"]),
        cwd=row.get("cwd"),
        env=row.get("env") or {},
        expected_ports=tuple(row.get("expected_ports") or ()),
        ended_at=datetime.fromisoformat(ended) if isinstance(ended, str) else ended,
        exit_status=row.get("exit_status"),
        port_opened=None if row.get("port_opened") is None else bool(row["port_opened"]),
        idle_s=row.get("idle_s"),
        command=row.get("command"),
        seen=bool(row.get("seen", 1)),
        logs=tuple(row.get("logs") or ()),
        error=row.get("error"),
        error_log=row.get("error_log"),
    )


def _program(launch: Launch) -> str:
    """How Attempts names a launch: as a person would type its program, with the word after
    it when that is no flag (`vllm serve`, `sleep 60`)."""
    _, args = program_of(list(launch.argv))
    word = f" {args[0]}" if args and not args[0].startswith("-") else ""
    return typed_name(launch.argv) + (word if " " not in typed_name(launch.argv) else "")


def _item(launch: Launch, previous: Launch | None, now: datetime, number: int) -> HistoryItem:
    program = _program(launch)
    pid = f" (pid {launch.pid})" if launch.pid is not None else ""
    text = f"`{program}`{pid} at {launch.started_at:%H:%M:%S} UTC"
    notes = [launch.outcome(now)]
    if launch.ended_at is None:
        status = "running" if launch.seen else "started"
        if launch.idle_s is not None and launch.idle_s >= 10:
            notes.append(f"idle for {human_duration(launch.idle_s)}")
    else:
        status = "ended"
    ports = ", ".join(str(p) for p in launch.expected_ports)
    if launch.port_opened is False or (launch.expected_ports and not launch.seen):
        notes.append(f"port {ports} {'never opened' if launch.ended_at else 'not open yet'}")
    elif launch.port_opened:
        notes.append(f"port {ports} opened")
    if launch.error:
        where = f" (in {PurePosixPath(launch.error_log).name})" if launch.error_log else ""
        notes.append(f"its log: {launch.error}{where}")
    flags: list[str] = []
    changed = None
    if previous is not None:
        diff = flag_diff(previous.argv, launch.argv, previous.env, launch.env)
        flags = sorted({part.split(" ")[0] for part in diff.added + diff.removed + diff.changed})
        changed = summary_line(diff, program, _program(previous))
        notes.append(changed)
    command = launch.command or shlex.join(launch.argv)  # an argv read: quoted, safe to paste
    if len(command) > COMMAND_CHARS:
        command = command[:COMMAND_CHARS] + " …"
    return HistoryItem(
        at=launch.started_at,
        source="launch",
        label=attempts(number, number),
        first=number,
        last=number,
        text=text,
        status=status,
        outcome="; ".join(notes),
        command=command,
        cwd=launch.cwd,
        written=launch.command is not None,
        error=launch.error,
        error_log=launch.error_log,
        pid=launch.pid,
        flags=flags,
        ran=notes[0],
        changed=changed,
        ports=list(launch.expected_ports),
        port_open=bool(launch.port_opened) if launch.expected_ports else None,
        logs=list(launch.logs),
    )
