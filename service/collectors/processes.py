"""Watched processes: trees matched by pid, command line or name, with flags, env and load."""

import contextlib
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psutil
from psutil import _pslinux

from service import redact, sampler
from service.collectors import CollectContext, _proc_static, _procfs, _proctree, _pystacks
from service.collectors._argv import parse_flags
from service.collectors._proc_static import DEFAULT_ENV
from service.collectors._proc_summary import featured, workers
from service.models import (
    ExitedProcess,
    ProcessesSection,
    ProcessInfo,
    ProcessWatch,
    Unavailable,
    Watch,
)
from service.thresholds import STUCK_AFTER_S

NAME = "processes"
SECTION = ProcessesSection

# Read at every snapshot: /proc/PID/stat and statm (see `_procfs.stat_fields`), the command
# line, cwd and exe; what follows from the command line and the environment (which a process
# cannot change after exec) is described once per process and exec (see `_proc_static`).
_STATUSES = _pslinux.PROC_STATUSES

Key = tuple[int, float]
PROBE_TABLE_AGE_S = 1.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

__all__ = ["DEFAULT_ENV", "NAME", "SECTION", "ProcessesMemory", "collect", "parse_flags"]


@dataclass
class ProcessesMemory:
    """psutil handles kept between snapshots: a second cpu_percent() call is a real reading."""

    handles: dict[Key, psutil.Process] = field(default_factory=dict)
    described: dict[Key, _proc_static.Static] = field(default_factory=dict)
    # Python stacks of a stuck tree's members, per process key: taken once per stuck episode
    stacks: dict[str, _pystacks.Taken] = field(default_factory=dict)


@dataclass
class _State:
    """What one collect() shares across watches."""

    handles: dict[Key, psutil.Process]
    described: dict[Key, _proc_static.Static]
    limit: int
    sampler: sampler.Sampler
    listen: dict[int, int]
    table: dict[int, _proctree.Entry] = field(default_factory=dict)
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


def _table_key(pid: int, table: dict[int, _proctree.Entry], boot: float) -> Key | None:
    """(pid, start time) as psutil computes it (same float), from the process table."""
    entry = table.get(pid)
    if entry is None or not entry.start_ticks:
        return None
    return pid, float(entry.start_ticks) / _CLOCK_TICKS + boot


def _ask(read: Any) -> Any:
    """What one read returns; None where it is refused (as psutil's as_dict)."""
    try:
        return read()
    except (psutil.AccessDenied, psutil.ZombieProcess, PermissionError):
        return None


def _describe(
    proc: psutil.Process, key: Key, watch_id: int, root: bool, spec: ProcessWatch, state: "_State"
) -> ProcessInfo:
    """A row for proc; what may not be read is named in `not_permitted`. Raises NoSuchProcess."""
    try:
        name, letter, ppid, threads = _procfs.stat_fields(proc.pid)
        rss, vms = _procfs.memory(proc.pid)
        argv: list[str] | None = _ask(lambda: _procfs.cmdline(proc.pid))
    except OSError as exc:
        raise psutil.NoSuchProcess(proc.pid) from exc
    status = _STATUSES.get(letter, "?")
    zombie = status == psutil.STATUS_ZOMBIE
    if zombie and not argv:
        argv = None  # as psutil: a zombie's command line is not known
    info = {"cmdline": argv, "cwd": _ask(proc.cwd), "exe": _ask(proc.exe)}
    static = state.described.get(key)
    if static is None or static.signature != _proc_static.signature(info, root, spec, zombie):
        static = state.described[key] = _proc_static.describe(proc, info, root, spec, zombie)
    if len(name) >= 15 and info["cmdline"]:  # the kernel cuts names; psutil extends them so
        longer = os.path.basename(info["cmdline"][0])
        name = longer if longer.startswith(name) else name
    created = key[1]
    denied = list(static.denied)
    if not zombie:
        denied += [what for what in ("cwd", "exe") if info[what] is None]
    row = ProcessInfo(
        watch_id=watch_id,
        pid=proc.pid,
        ppid=ppid,
        name=name or "?",
        user=static.user,
        state=status,
        rss_bytes=rss,
        vms_bytes=vms,
        threads=threads,
        started_at=datetime.fromtimestamp(created, UTC),
        age_s=max(0.0, time.time() - created),
        argv=list(static.argv),
        flags=parse_flags(static.argv),
        env=dict(static.env),
        root=root,
        cwd=info["cwd"],
        exe=info["exe"],
        seen_at=datetime.now(UTC),
    )
    if static.packages is not None:
        row.packages = dict(static.packages)
    row.not_permitted = [] if zombie else denied
    row.relaunch = list(static.relaunch)
    if status in (psutil.STATUS_SLEEPING, psutil.STATUS_DISK_SLEEP):
        row.waiting = _procfs.waiting_point(proc.pid)
    return row


def _row(
    pid: int, tree: int, watch_id: int, spec: ProcessWatch, state: _State
) -> tuple[Key, ProcessInfo, psutil.Process | None, bool]:
    """(key, row, handle, whether the handle is new) for one pid; raises NoSuchProcess.

    A probe's row comes from the process table when the table knows the process; a pid
    watch can name one newer than a shared table, which is then described in full.
    """
    if state.probe and pid in state.table:
        key, row = _glimpse(pid, watch_id, pid == tree, state)
        return key, row, None, False
    key, proc, new = _handle(pid, state.handles, _table_key(pid, state.table, state.boot))
    return key, _describe(proc, key, watch_id, pid == tree, spec, state), proc, new


def _glimpse(pid: int, watch_id: int, root: bool, state: _State) -> tuple[Key, ProcessInfo]:
    """A probe's row, from the process table alone: which process it is, nothing read.

    Events need to know which processes live; a snapshot describes them.
    """
    entry, key = state.table.get(pid), _table_key(pid, state.table, state.boot)
    if entry is None or key is None:
        raise psutil.NoSuchProcess(pid)
    started = datetime.fromtimestamp(key[1], UTC)
    row = ProcessInfo(
        watch_id=watch_id, pid=pid, ppid=entry.ppid, name=entry.name, state="unknown",
        started_at=started, age_s=max(0.0, time.time() - key[1]), root=root,
    )  # fmt: skip
    return key, row


def _add_descriptors(row: ProcessInfo, state: _State) -> None:
    try:
        row.open_files, sockets = _procfs.descriptors(row.pid)
    except PermissionError:
        row.not_permitted.append("open files and sockets")
        return
    except OSError:
        return  # gone, or a zombie without descriptors
    row.listening = sorted({state.listen[i] for i in sockets if i in state.listen})


def _add_reading(row: ProcessInfo, key: Key, state: _State) -> bool:
    """Fill what the background sampler measured; False when it has no CPU figure yet."""
    state.sampler.track(key)
    reading = state.sampler.reading(key)
    if reading is None:
        return False
    row.idle_for_s = reading.idle_for_s
    row.io_read_bps, row.io_write_bps = reading.io_read_bps, reading.io_write_bps
    row.rss_growth_bps = reading.rss_growth_bps
    row.cpu_percent = reading.cpu_percent
    return reading.cpu_percent is not None


def _target(spec: ProcessWatch) -> str:
    if spec.pid is not None:
        return f"pid {spec.pid}"
    return f"name {spec.name}" if spec.name is not None else f"/{spec.match}/"


def _reason(exc: BaseException) -> str:
    return redact.text(f"{type(exc).__name__}: {exc}")[:200]


def _collect_watch(
    watch_id: int,
    spec: ProcessWatch,
    rows: list[tuple[int, int]],
    state: _State,
    section: ProcessesSection,
) -> None:
    target = _target(spec)
    found = shown = 0
    for pid, tree in rows:
        if shown >= state.limit:
            reason = f"showing the first {state.limit} of {len(rows)} processes"
            section.unavailable.append(Unavailable(watch_id=watch_id, target=target, reason=reason))
            break
        try:
            key, row, proc, new = _row(pid, tree, watch_id, spec, state)
            if key in state.seen:
                found += 1
                continue  # an earlier watch already shows it
        except psutil.NoSuchProcess:
            continue  # exited while we looked: the next snapshot reports it gone
        row.tree = tree
        state.seen.add(key)
        found += 1
        shown += 1
        section.items.append(row)
        if state.probe or proc is None:
            state.sampler.track(key)  # kept sampled while only probes ask (idle history)
            continue
        _add_descriptors(row, state)
        sampled = _add_reading(row, key, state)
        if not sampled:
            if new:
                state.fresh.append((proc, row))
            else:
                with contextlib.suppress(psutil.Error):
                    row.cpu_percent = proc.cpu_percent(None)
        for what in row.not_permitted:
            section.unavailable.append(
                Unavailable(watch_id=watch_id, target=f"pid {pid} {what}", reason="not permitted")
            )
    if not found:
        reason = (
            f"no process with pid {spec.pid}"
            if spec.pid is not None
            else f"no process matches {target}"
        )
        section.unavailable.append(Unavailable(watch_id=watch_id, target=target, reason=reason))


def _orphans(
    watch_id: int, rows: list[tuple[int, int]], ctx: CollectContext, table: dict
) -> list[tuple[int, int]]:
    """Last time's members of the watch that still run outside its tree (their parent died).

    A crashed launcher's orphaned workers still hold GPU memory and ports: they stay in
    view until they exit themselves, instead of being reported as exited.
    """
    if ctx.previous is None:
        return []
    current = {pid for pid, _ in rows}
    kept = []
    for old in ctx.previous.processes.items:
        if old.watch_id != watch_id or old.pid in current or old.pid not in table:
            continue
        try:
            same = abs(psutil.Process(old.pid).create_time() - old.started_at.timestamp()) < 0.05
        except psutil.Error:
            continue
        if same:  # not a reused pid
            kept.append((old.pid, old.tree or old.pid))
    return kept


def _excluded() -> set[int]:
    """ctxd itself and its ancestors (shell, pytest, harness), whose command lines echo patterns."""
    own = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        own.update(p.pid for p in psutil.Process().parents())
    return own


def _still_alive(pid: int, started_at: datetime) -> bool:
    try:
        return abs(psutil.Process(pid).create_time() - started_at.timestamp()) < 0.01
    except psutil.Error:
        return False


def _exited(
    ctx: CollectContext, section: ProcessesSection, state: _State, watch_ids: set[int]
) -> None:
    """Rows of the previous snapshot whose process is gone (not merely cut by a row limit)."""
    if ctx.previous is None:
        return
    current = {p.key for p in section.items}
    for old in ctx.previous.processes.items:
        if old.key in current or old.watch_id not in watch_ids:
            continue
        if _still_alive(old.pid, old.started_at):
            continue
        reading = state.sampler.reading((old.pid, old.started_at.timestamp()))
        last_seen = old.seen_at
        if reading is not None and reading.last_alive:
            last_seen = datetime.fromtimestamp(reading.last_alive, UTC)
        section.exited.append(
            ExitedProcess(watch_id=old.watch_id, pid=old.pid, name=old.name, root=old.root,
                          key=old.key, last_seen_at=last_seen)
        )  # fmt: skip


def collect(watches: list[Watch], ctx: CollectContext) -> ProcessesSection:
    section = ProcessesSection(stuck_after_s=ctx.settings.stuck_after_s)
    specs = [(w.id, w.spec) for w in watches if isinstance(w.spec, ProcessWatch)]
    memory = ctx.memory_of(NAME, ProcessesMemory)
    handles = memory.handles
    try:
        # a probe may share a table read within the last second (the watcher probes every
        # session in one tick); a snapshot reads its own, which probes then share
        table, children = _proctree.shared(PROBE_TABLE_AGE_S if ctx.probe else 0.0, bool(specs))
        excluded = _excluded()
        state = _State(
            handles=handles,
            described=memory.described,
            limit=ctx.settings.limits.processes_per_watch_max,
            sampler=sampler.shared(ctx.settings.sample_interval_s),
            listen=_procfs.listening_inodes() if specs and not ctx.probe else {},
            probe=ctx.probe,
            table=table,
            boot=psutil.boot_time(),
        )
    except Exception as exc:  # a broken /proc must not cost the whole dump
        section.unavailable.append(Unavailable(target=NAME, reason=_reason(exc)))
        return section
    matched: set[int] = set()
    for watch_id, spec in specs:
        try:
            rows = _proctree.candidates(spec, table, excluded, children)
            rows += _orphans(watch_id, rows, ctx, table)
            matched.update(pid for pid, _ in rows)
            _collect_watch(watch_id, spec, rows, state, section)
        except Exception as exc:  # one odd watch must not hide the others
            section.unavailable.append(
                Unavailable(watch_id=watch_id, target=_target(spec), reason=_reason(exc))
            )
    if state.fresh and not ctx.probe:
        # A first cpu_percent() call only starts the clock: sample all newcomers in one wait.
        for proc, _ in state.fresh:
            with contextlib.suppress(psutil.Error):
                proc.cpu_percent(None)
        time.sleep(ctx.settings.cpu_sample_s)
        for proc, row in state.fresh:
            with contextlib.suppress(psutil.Error):
                row.cpu_percent = proc.cpu_percent(None)
    for key in set(handles) - state.seen:
        del handles[key]
    for key in set(memory.described) - state.seen:
        del memory.described[key]
    section.matched = len(matched)
    section.featured = featured(section.items)
    section.workers = workers(section.items)
    with contextlib.suppress(Exception):
        _exited(ctx, section, state, {wid for wid, _ in specs})
    if specs and not ctx.probe:
        try:
            section.stuck_stacks = _pystacks.for_stuck(
                section.items, dict(specs), set(state.listen.values()),
                section.stuck_after_s or STUCK_AFTER_S, ctx.previous, memory.stacks,
            )  # fmt: skip
        except Exception as exc:  # the stacks add to the section: they must not cost it
            section.unavailable.append(Unavailable(target="stuck stacks", reason=_reason(exc)))
    return section
