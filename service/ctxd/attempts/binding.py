"""Attempts bound to processes: each snapshot binds an attempt to the root process its command
spawned, follows it while it runs and ends it when it is gone, with its log's error.

An attempt is born with the agent's command (`usecases/agent_actions.py` saves it before any
process is seen, `seen` 0): its command as written, directory, time, log files and expected
ports. A snapshot binds it to the root process that command spawned (a new root of a process
watch running the same program with the same arguments in the same directory, started
around the command), follows it while it runs (port state, idle time, the logs its tree
writes) and ends it when the process is gone, with the error its own log ended with. One
whose process is never seen died before ctxd looked: it stays an attempt, with its command
and its log's error. A root process no command accounts for (started by hand, by a script)
is an attempt too, from its first sighting.

Everything here reads but `save`: `observed` says which updates to write, and the snapshot
writes them (`save`) once it is stored, so a preview changes nothing.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath

from ctxd.attempts.flags import program_of
from ctxd.attempts.model import UNCHANGED, Attempt, AttemptUpdate, given, given_or, reported
from ctxd.collectors.logs import last_error
from ctxd.collectors.proc import procevents
from ctxd.collectors.proc.procfs import true_start
from ctxd.discovery.procscan import SHELLS
from ctxd.discovery.shellparse import WRAPPER_PROGRAMS
from ctxd.models import LogInfo, Observations, ProcessInfo, ProcessWatch, Watch
from ctxd.settings import Limits
from ctxd.store.database import Store

# An attempt whose process is not seen this long after its command was reported ended
# before ctxd looked (the settling snapshot comes a second after a launch).
PENDING_S = 1.0
# A shim's chain of scripts (pyenv's: several bash scripts) on a busy machine may take
# seconds before it execs the program; until then it is not a launch of its own.
SHIM_S = 5.0
# Its process may have started this long before the command was reported (a tool call that
# launched in the background, then slept and read the log before returning).
BIND_BEFORE_S = 600.0
SEEN_BEFORE_READ = 20  # the newest attempts a reported command may already be among


@dataclass(frozen=True)
class Cutoff:
    """What a snapshot may judge by what it sees: the attempts recorded before it began to look
    (`attempt_id` and lower) and a process table read after that (`at`, time.monotonic()). A
    command reported while it looked may have a process its table predates: such an attempt
    is not ended as 'died before ctxd saw it' by this snapshot."""

    attempt_id: int
    at: float


def cutoff(store: Store, sid: str) -> Cutoff:
    """The cutoff of a snapshot that begins to look now."""
    return Cutoff(store.last_attempt_id(sid), time.monotonic())


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
) -> list[AttemptUpdate]:
    """The attempt updates this observation calls for (read, not written): a new root binds
    the attempt its command made (or starts one), vanished roots and attempts never seen
    before `cut` end theirs (with their log's error), running ones get their port state, idle
    time and logs. The snapshot saves them once it is stored (`save`); a preview shows them
    unsaved."""
    process_watches = {w.id: w for w in watches if isinstance(w.spec, ProcessWatch)}
    open_attempts = store.running_attempts(sid)
    if not process_watches and not open_attempts:
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
    stored = {a.start_key: a for a in open_attempts if a.seen}
    pending = [a for a in open_attempts if not a.seen]
    bound: set[str] = set()
    running = set()
    saves: list[AttemptUpdate] = []
    # a shell that starts something in the background and goes: its child is the launch,
    # though the shell still lives for this look (a child that dies with it is seen no more)
    shells = {p.pid for p in items if p.root and not _exiting(p) and _passing(p)}
    becoming = bool(shells)  # a launch still on its way to its program (a shim, a wrapper)
    for p in items:
        watch = process_watches.get(p.watch_id)
        launched = not p.root and p.ppid in shells
        if not (p.root or launched) or watch is None or _exiting(p):
            continue
        if launched and _born_with(p.argv, p.cwd, p.started_at, pending, bound) is None:
            continue  # a shell's child no command names: it is followed once it is a root
        assert isinstance(watch.spec, ProcessWatch)
        running.add(p.key)
        expected = list(watch.spec.expect_ports)
        ports = listening.get(p.pid, set()) | (open_ports & set(expected))
        update = AttemptUpdate(
            start_key=p.key,
            watch_id=watch.id,
            pid=p.pid,
            started_at=true_start(p.started_at, p.host),
            argv=tuple(p.argv),
            cwd=p.cwd,
            env=p.env,
            expected_ports=tuple(expected),
            port_opened=bool(set(expected) & ports) if expected else None,
            idle_s=p.idle_for_s,
            logs=tuple(sorted(writes.get(p.pid, set()))),
        )
        known = stored.get(p.key)
        if known is None and (born := _born_with(p.argv, p.cwd, p.started_at, pending, bound)):
            bound.add(born.start_key)
            update = _bound(born, update)
        elif known is None and _passing(p):
            continue
        elif known is not None:
            update = replace(update, logs=tuple(sorted(set(known.logs) | set(given(update.logs)))))
            if known.command:
                update = replace(
                    update, started_at=known.started_at, expected_ports=known.expected_ports
                )
        saves.append(update)
    gone = {e.key: e for e in seen.processes.exited if e.root}
    for attempt in open_attempts:
        key = attempt.start_key
        if key in running or key in bound:
            continue
        started = attempt.started_at
        if attempt.seen:
            if attempt.watch_id not in process_watches:
                continue  # its watch was removed: it is no longer followed, not "gone"
            exited = gone.get(key)
            ended = (exited.last_seen_at if exited else None) or _exit_moment(attempt) or now
        elif (
            attempt.id > cut.attempt_id
            or (now - started).total_seconds() < PENDING_S
            or (becoming and (now - started).total_seconds() < SHIM_S)
        ):
            continue  # reported while this snapshot looked, or its process may be starting
        else:
            ended = now  # it died before any snapshot saw it
        found = _error(attempt.logs, logs, started, files)
        ending = AttemptUpdate(start_key=key, ended_at=ended)
        if attempt.seen and (exited := gone.get(key)) and exited.exit_status is not None:
            ending = replace(ending, exit_status=exited.exit_status)  # as the kernel told
        if found is not None:
            ending = replace(ending, error=found[0], error_log=found[1])
        saves.append(ending)
    return saves


def _exit_moment(attempt: Attempt) -> datetime | None:
    """When its process ended as its pidfd told, where no exited row says it: a zombie its
    parent has not reaped yet is still in the table, though it died when the pidfd said."""
    at = procevents.exited_at(attempt.pid) if attempt.pid is not None else None
    if at is None or at < attempt.started_at.timestamp() - 1:
        return None  # not followed, or an earlier process of that pid
    return datetime.fromtimestamp(at, UTC)


def _exiting(p: ProcessInfo) -> bool:
    """A process that has exited or is exiting: a zombie, or one whose memory is released
    already (its command line reads empty), which no attempt can be told by."""
    return p.state in ("zombie", "dead") or not p.argv


def _passing(p: ProcessInfo) -> bool:
    """A shell running a command line (`bash -c 'nohup python serve.py … &'`) or a wrapper
    (`nohup`, `setsid`, …) younger than PENDING_S, or a shell running a script (a shim that
    execs the program: `bash …/pyenv-exec python3 up.py`) younger than SHIM_S: the shell of
    a command that starts something in the background, its fork, a shim or a wrapper not yet
    replaced by the program; not a launch of its own unless it stays (or its own command
    was that, which binds it first)."""
    name = PurePosixPath(p.argv[0]).name
    options = [arg for arg in p.argv[1:-1] if arg.startswith("-") and not arg.startswith("--")]
    # a shell running a script: a version manager's shim (pyenv's `python3` is a bash script
    # that execs the interpreter in the same pid) before it has become the program
    if name in SHELLS and len(p.argv) > 1 and p.argv[1].startswith("/"):
        return p.age_s < SHIM_S
    shell = name in SHELLS and any("c" in arg for arg in options)
    return (shell or name in WRAPPER_PROGRAMS) and p.age_s < PENDING_S


def _bound(born: Attempt, update: AttemptUpdate) -> AttemptUpdate:
    """What a root process's update takes from the attempt its command made: that attempt's
    place (`bound_from`), its command, its time (the earlier: a kernel start time is a
    second coarse) and expected ports, its logs beside those the process writes, and the
    variables its line set beside those /proc shows (none, for a process already exiting)."""
    return replace(
        update,
        bound_from=born.start_key,
        seen=True,
        command=born.command,
        env={**born.env, **given_or(update.env, {})},
        started_at=min(born.started_at, given(update.started_at)),
        expected_ports=born.expected_ports,
        logs=tuple(sorted(set(born.logs) | set(given(update.logs)))),
    )


def _born_with(
    argv: Sequence[str],
    cwd: str | None,
    started_at: datetime,
    pending: Sequence[Attempt],
    bound: set[str],
) -> Attempt | None:
    """The oldest attempt not yet seen that this new root process is the launch of: the same
    program with the same arguments, in the command's directory, started around it."""
    program, args = program_of(list(argv))
    for attempt in pending:
        if attempt.start_key in bound:
            continue
        their_program, their_args = program_of(list(attempt.argv))
        if not _same_program(their_program, program) or their_args != args:
            continue
        if attempt.cwd and cwd and attempt.cwd != cwd:
            continue
        at = attempt.started_at
        if at - timedelta(seconds=BIND_BEFORE_S) <= started_at <= at + timedelta(minutes=10):
            return attempt
    return None


def joining(store: Store, sid: str, attempt: Attempt) -> AttemptUpdate:
    """The attempt a command makes, to save: a new one, or, when a snapshot already saw its
    process before the harness reported the command, that attempt given its command (one
    attempt, not two: a process seen early and a command that 'died before ctxd saw it')."""
    seen = seen_before(store, sid, attempt)
    if seen is None:
        return reported(attempt)
    return AttemptUpdate(
        start_key=seen.start_key,
        bound_from=seen.start_key,
        command=attempt.command,
        tool_id=attempt.tool_id,
        logs=attempt.logs,
        expected_ports=attempt.expected_ports,
        # the variables its line set beside what /proc showed, which tells their values as
        # they ran (none, for a process read as it exited)
        env={**attempt.env, **seen.env},
    )


def seen_before(store: Store, sid: str, attempt: Attempt) -> Attempt | None:
    """The attempt a snapshot already saw running for this attempt's command (a snapshot can
    come between the command and the harness's report of it): the newest root process no
    command accounts for, of the same program and arguments in the same folder, started
    around the command. None: the attempt is new."""
    for other in reversed(store.list_attempts(sid, limit=SEEN_BEFORE_READ)):
        unaccounted = other.command is None and other.seen and other.pid is not None
        if unaccounted and _born_with(other.argv, other.cwd, other.started_at, [attempt], set()):
            return other
    return None


def _same_program(written: tuple[str, ...], running: tuple[str, ...]) -> bool:
    """`torchrun` as written is `python …/torchrun` as it runs (a Python entry point script)."""
    names = tuple(PurePosixPath(part).name for part in written)
    running_names = tuple(PurePosixPath(part).name for part in running)
    return names == running_names or (
        running_names[:1] == ("python",) and names == running_names[1:]
    )


def _error(
    paths: Sequence[str], logs: dict[str, LogInfo], started: datetime, files: LogFiles
) -> tuple[str, str] | None:
    """(the error its own logs ended with, the log it is in): from a log it names that was
    written since it started, read from the file's end once, as the attempt ends (its first
    error there is the root cause: a log watch's summary is of the lines it read last, which
    may be a launcher's wrapper of it, torchrun's `ChildFailedError`), else as this
    snapshot's log watch saw it (a file ctxd may not read again)."""
    since = started - timedelta(seconds=1)
    for path in paths:
        if summary := last_error(path, files.roots, since.timestamp(), files.limits):
            return summary, path
        log = logs.get(path)
        if log is not None and log.error_summary and log.modified_at >= since:
            return log.error_summary, path
    return None


def save(store: Store, sid: str, saves: list[AttemptUpdate]) -> None:
    """Write what `observed` found (after the snapshot that found it was stored). A root
    process it saw first, with no command, joins the attempt of a command reported since
    (one attempt per launch); `agent_actions` binds the other way round, a command reported
    after its process was saved. Both check and write holding the store, so whichever of the
    two comes second finds the first."""
    if not saves:
        return
    with store.held():
        store.save_attempts(sid, _join_reported(store, sid, saves))


def _join_reported(store: Store, sid: str, saves: list[AttemptUpdate]) -> list[AttemptUpdate]:
    waiting = store.unseen_attempts(sid)
    roots = {u.start_key for u in saves if u.pid is not UNCHANGED and u.bound_from is UNCHANGED}
    if not waiting or not roots:
        return saves
    firsts = roots - store.attempt_keys(sid, list(roots))
    taken = {u.start_key for u in saves if u.ended_at is not UNCHANGED}
    joined = []
    for update in saves:
        if update.start_key in firsts:
            born = _born_with(
                given(update.argv), given(update.cwd), given(update.started_at), waiting, taken
            )
            if born is not None:
                taken.add(born.start_key)
                update = _bound(born, update)
        joined.append(update)
    return joined
