"""One watched process as a row: /proc and psutil read each snapshot, its static facts
described once per exec (`procstatic`), its CPU reading from the shared sampler."""

import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psutil
from psutil import _pslinux

from ctxd.collectors.proc import procfs, procstatic, proctree, sampler
from ctxd.models import ProcessInfo, ProcessWatch

# Read at every snapshot: /proc/PID/stat and statm (see `procfs.stat_fields`), the command
# line, cwd, exe, open descriptors and wait point, unless it has not run since its last row
# (see KEEP_UNMOVED_S); what follows from the command line and the environment (which a
# process cannot change after exec) is described once per process and exec (`procstatic`).
_STATUSES = _pslinux.PROC_STATUSES

Key = tuple[int, float]
# A single-threaded process that has not run since its last row cannot have changed what
# only it can change: its state, CPU time, command line, working directory, executable, open
# descriptors and where it waits. The kernel's count of its runs (/proc/PID/schedstat) says
# so in one read where those take ten. Its parent comes from the process table (a parent's
# death re-parents it without it running). Kept this long at most: what others can do to it
# unseen (reclaim its memory, rename a file it holds open) shows within this time.
KEEP_UNMOVED_S = 30.0


@dataclass
class Unmoved:
    """What a process showed when the kernel had run it `runs` (its schedstat line)."""

    runs: bytes
    read_at: float  # time.monotonic()
    stat: procfs.Stat
    memory: tuple[int, int]  # rss, vms
    info: dict[str, Any]  # cmdline, cwd, exe
    waiting: str | None
    waiting_on: str | None
    waiting_on_written_at: datetime | None
    descriptors: tuple[int, set[int]] | None  # None: not permitted


@dataclass
class State:
    """What one collect() shares across watches."""

    handles: dict[Key, psutil.Process]
    described: dict[Key, procstatic.Static]
    limit: int
    sampler: sampler.Sampler
    listen: dict[int, int]
    unmoved: dict[Key, Unmoved] = field(default_factory=dict)  # kept between snapshots
    cpu_ticks: dict[Key, tuple[int, float]] = field(default_factory=dict)  # and when read
    table: dict[int, proctree.Entry] = field(default_factory=dict)
    boot: float = 0.0
    # a probe looks for exits only: its rows come from the process table (see `_glimpse`)
    probe: bool = False
    seen: set[Key] = field(default_factory=set)
    fresh: list[tuple[psutil.Process, ProcessInfo]] = field(default_factory=list)


def _handle(
    pid: int, handles: dict[Key, psutil.Process], known: Key | None = None
) -> tuple[Key, psutil.Process, bool]:
    """The kept psutil handle for pid (and whether it is new); raises psutil.NoSuchProcess.

    `known`: the key as the process table computes it, which saves opening a new handle
    (two reads of /proc) for a process already kept.
    """
    kept = handles.get(known) if known is not None else None
    if kept is not None and known is not None:
        return known, kept, False
    proc = psutil.Process(pid)
    key = (pid, proc.create_time())
    kept = handles.get(key)
    if kept is not None:
        return key, kept, False
    handles[key] = proc
    return key, proc, True


def _table_key(pid: int, table: dict[int, proctree.Entry], boot: float) -> Key | None:
    """(pid, start time) as psutil computes it (same float), from the process table."""
    entry = table.get(pid)
    started = entry.started(boot) if entry is not None else None
    return None if started is None else (pid, started)


def _ask(read: Any) -> Any:
    """What one read returns; None where it is refused (as psutil's as_dict)."""
    try:
        return read()
    except (psutil.AccessDenied, psutil.ZombieProcess, PermissionError):
        return None


def _describe(
    proc: psutil.Process, key: Key, watch_id: int, tree: int, spec: ProcessWatch, state: "State"
) -> ProcessInfo:
    """A row for proc; what may not be read is named in `not_permitted`. Raises NoSuchProcess.

    Every field is gathered first and the row made in one call: a pydantic model checks each
    attribute set afterwards, a dozen a row for a crowd of 256."""
    root = proc.pid == tree
    try:
        stat, (rss, vms), info, kept, runs = _facts(proc, key, state)
    except OSError as exc:
        raise psutil.NoSuchProcess(proc.pid) from exc
    name, letter = stat.name, stat.letter
    status = _STATUSES.get(letter, "?")
    zombie = status == psutil.STATUS_ZOMBIE
    if zombie and not info["cmdline"]:
        info["cmdline"] = None  # as psutil: a zombie's command line is not known
    static = state.described.get(key)
    if static is None or static.signature != procstatic.signature(info, root, spec, zombie):
        static = state.described[key] = procstatic.describe(proc, info, root, spec, zombie)
    if len(name) >= 15 and info["cmdline"]:  # the kernel cuts names; psutil extends them so
        longer = os.path.basename(info["cmdline"][0])
        name = longer if longer.startswith(name) else name
    created = key[1]
    denied = [] if zombie else list(static.denied)
    if not zombie:
        denied += [what for what in ("cwd", "exe") if info[what] is None]
    fields: dict[str, Any] = {
        "cpu_percent": _cpu_since_last(key, stat.cpu_ticks, state),
        "waiting": None,
        "waiting_on": None,
        "waiting_on_written_at": None,
    }
    known, descriptors = True, kept.descriptors if kept is not None else None
    if kept is not None:
        fields["waiting"], fields["waiting_on"] = kept.waiting, kept.waiting_on
        fields["waiting_on_written_at"] = kept.waiting_on_written_at
    else:
        if status in (psutil.STATUS_SLEEPING, psutil.STATUS_DISK_SLEEP):
            fields["waiting"], fields["waiting_on"] = procfs.waiting(proc.pid)
            fields["waiting_on_written_at"] = procfs.fifo_written_at(
                fields["waiting"], fields["waiting_on"]
            )
        known, descriptors = _read_descriptors(proc.pid, state)
    if known and descriptors is None:
        denied.append("open files and sockets")
    elif descriptors is not None:
        fields["open_files"], sockets = descriptors
        fields["listening"] = sorted({state.listen[i] for i in sockets if i in state.listen})
    if state.probe:
        state.sampler.track(key)  # kept sampled while only probes ask (idle history)
    else:
        fields.update(_sampled(key, state))
    row = ProcessInfo(
        watch_id=watch_id,
        pid=proc.pid,
        ppid=stat.ppid,
        name=name or "?",
        user=static.user,
        state=status,
        rss_bytes=rss,
        vms_bytes=vms,
        threads=stat.threads,
        started_at=datetime.fromtimestamp(created, UTC),
        age_s=max(0.0, time.time() - created),
        argv=list(static.argv),
        flags=list(static.flags),  # the deep redaction copies each Flag on its way out
        env=dict(static.env),
        root=root,
        tree=tree,
        cwd=info["cwd"],
        exe=info["exe"],
        seen_at=datetime.now(UTC),
        packages=dict(static.packages) if static.packages is not None else {},
        not_permitted=denied,
        relaunch=list(static.relaunch),
        **fields,
    )
    if runs is not None and kept is None and known:
        now = time.monotonic()
        state.unmoved[key] = Unmoved(runs, now, stat, (rss, vms), info, fields["waiting"],
                                     fields["waiting_on"], fields["waiting_on_written_at"],
                                     descriptors)  # fmt: skip
    return row


def _read_descriptors(pid: int, state: "State") -> tuple[bool, tuple[int, set[int]] | None]:
    """(whether known, (open descriptors, socket inodes) or None when not permitted). Not
    known: not read for a probe, or gone meanwhile (a zombie has none)."""
    if state.probe:
        return False, None
    try:
        return True, procfs.descriptors(pid)
    except PermissionError:
        return True, None
    except OSError:
        return False, None


def _sampled(key: Key, state: "State") -> dict[str, Any]:
    """What the background sampler measured of it; its CPU figure only when it has one."""
    state.sampler.track(key)
    reading = state.sampler.reading(key)
    if reading is None:
        return {}
    fields = {
        "idle_for_s": reading.idle_for_s,
        "io_read_bps": reading.io_read_bps,
        "io_write_bps": reading.io_write_bps,
        "rss_growth_bps": reading.rss_growth_bps,
    }
    if reading.cpu_percent is not None:
        fields["cpu_percent"] = reading.cpu_percent
    return fields


def _cpu_since_last(key: Key, ticks: int, state: "State") -> float | None:
    """Percent of one CPU it used since its last row, as psutil's cpu_percent(None) computes
    it, from the stat line already read; None at its first row. The sampler's figure, when it
    has one, takes its place (_sampled)."""
    now = time.monotonic()
    before = state.cpu_ticks.get(key)
    state.cpu_ticks[key] = (ticks, now)
    if before is None or now <= before[1]:
        return None
    return round((ticks - before[0]) / procfs.CLOCK_TICKS / (now - before[1]) * 100, 1)


def _changing(proc: psutil.Process) -> dict[str, Any]:
    """What a process may change after exec, read now: its command line (a retitled one),
    working directory and executable."""
    return {
        "cmdline": _ask(lambda: procfs.cmdline(proc.pid)),
        "cwd": _ask(proc.cwd),
        "exe": _ask(lambda: procfs.exe(proc.pid)),
    }


Facts = tuple[procfs.Stat, tuple[int, int], dict[str, Any], Unmoved | None, bytes | None]


def _facts(proc: psutil.Process, key: Key, state: "State") -> Facts:
    """(stat line, (rss, vms), cmdline/cwd/exe, its kept facts when it has not run since,
    its count of runs when it is a single-threaded sleeper); raises OSError when it is gone.

    The count is read before the facts it vouches for (at a first sight, right after the
    stat line that says it sleeps: a run within those microseconds is not seen until the
    facts are read again, KEEP_UNMOVED_S at most)."""
    pid = proc.pid
    kept = None if state.probe else state.unmoved.pop(key, None)
    runs = procfs.runs(pid) if kept is not None else None
    recent = kept is not None and time.monotonic() - kept.read_at < KEEP_UNMOVED_S
    if kept is not None and recent and runs == kept.runs:
        state.unmoved[key] = kept
        entry = state.table.get(pid)
        stat = kept.stat if entry is None else kept.stat._replace(ppid=entry.ppid)
        return stat, kept.memory, dict(kept.info), kept, runs
    stat = procfs.stat_fields(pid)
    memory = procfs.memory(pid)
    quiet = procfs.sleeps_alone(stat) and not state.probe
    if quiet and runs is None:
        runs = procfs.runs(pid)
    return stat, memory, _changing(proc), None, runs if quiet else None


def read_row(
    pid: int, tree: int, watch_id: int, spec: ProcessWatch, state: State
) -> tuple[Key, ProcessInfo, psutil.Process | None, bool]:
    """(key, row, handle, whether the handle is new) for one pid; raises NoSuchProcess.

    A probe's row comes from the process table when the table knows the process; a pid
    watch can name one newer than a shared table, which is then described in full.
    """
    if state.probe and pid in state.table:
        key, row = _glimpse(pid, watch_id, tree, state)
        state.sampler.track(key)  # kept sampled while only probes ask (idle history)
        return key, row, None, False
    key, proc, new = _handle(pid, state.handles, _table_key(pid, state.table, state.boot))
    return key, _describe(proc, key, watch_id, tree, spec, state), proc, new


def _glimpse(pid: int, watch_id: int, tree: int, state: State) -> tuple[Key, ProcessInfo]:
    """A probe's row, from the process table alone: which process it is, nothing read.

    Events need to know which processes live; a snapshot describes them.
    """
    entry, key = state.table.get(pid), _table_key(pid, state.table, state.boot)
    if entry is None or key is None:
        raise psutil.NoSuchProcess(pid)
    started = datetime.fromtimestamp(key[1], UTC)
    row = ProcessInfo(
        watch_id=watch_id, pid=pid, ppid=entry.ppid, name=entry.name, state="unknown",
        started_at=started, age_s=max(0.0, time.time() - key[1]), root=pid == tree, tree=tree,
    )  # fmt: skip
    return key, row
