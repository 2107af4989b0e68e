"""Watched processes: trees matched by pid, command line or name, with flags, env and load."""

import contextlib
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psutil

from ctxd import redact
from ctxd.collectors import CollectContext
from ctxd.collectors.proc import (
    procevents,
    procfs,
    procselect,
    procstatic,
    proctree,
    pystacks,
    sampler,
)
from ctxd.collectors.proc.procrows import Key, State, Unmoved, read_row
from ctxd.collectors.proc.procsummary import featured, workers
from ctxd.models import (
    ExitedProcess,
    ProcessesSection,
    ProcessWatch,
    Unavailable,
    Watch,
)
from ctxd.thresholds import STUCK_AFTER_S

NAME = "processes"
SECTION = ProcessesSection
KIND = "process"
RETIRES = True


@dataclass
class ProcessesMemory:
    """psutil handles kept between snapshots: a second cpu_percent() call is a real reading."""

    handles: dict[Key, psutil.Process] = field(default_factory=dict)
    described: dict[Key, procstatic.Static] = field(default_factory=dict)
    unmoved: dict[Key, Unmoved] = field(default_factory=dict)
    cpu_ticks: dict[Key, tuple[int, float]] = field(default_factory=dict)
    # Python stacks of a stuck tree's members, per process key: taken once per stuck episode
    stacks: dict[str, pystacks.Taken] = field(default_factory=dict)

    def per_process(self) -> tuple[dict[Key, Any], ...]:
        """What is kept per watched process (by key), dropped with the process's last row."""
        return (self.handles, self.described, self.unmoved, self.cpu_ticks)


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
    state: State,
    section: ProcessesSection,
    auto: bool = False,
) -> None:
    target = _target(spec)
    found = shown = 0
    for pid, tree in rows:
        if shown >= state.limit:
            reason = f"showing the first {state.limit} of {len(rows)} processes"
            section.unavailable.append(Unavailable(watch_id=watch_id, target=target, reason=reason))
            break
        try:
            key, row, proc, new = read_row(pid, tree, watch_id, spec, state)
            if key in state.seen:
                found += 1
                continue  # an earlier watch already shows it
        except psutil.NoSuchProcess:
            continue  # exited while we looked: the next snapshot reports it gone
        state.seen.add(key)
        found += 1
        shown += 1
        section.items.append(row)
        if state.probe or proc is None:
            continue
        if new and row.cpu_percent is None:
            state.fresh.append((proc, row))  # a newcomer with no CPU figure: sampled below
        for what in row.not_permitted:
            section.unavailable.append(
                Unavailable(watch_id=watch_id, target=f"pid {pid} {what}", reason="not permitted")
            )
    if not found and not auto:  # ctxd's own guess gone: its attempt says how it ended
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


def _still_alive(pid: int, started_at: datetime) -> bool:
    try:
        return abs(psutil.Process(pid).create_time() - started_at.timestamp()) < 0.01
    except psutil.Error:
        return False


def _exited(
    ctx: CollectContext, section: ProcessesSection, state: State, watch_ids: set[int]
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
        ended = procevents.exited_at(old.pid)
        if ended is not None and ended >= old.started_at.timestamp():
            last_seen = datetime.fromtimestamp(ended, UTC)  # its pidfd told the moment
        section.exited.append(
            ExitedProcess(watch_id=old.watch_id, pid=old.pid, name=old.name, root=old.root,
                          key=old.key, last_seen_at=last_seen,
                          exit_status=procevents.exit_status(old.pid))
        )  # fmt: skip


def collect(watches: list[Watch], ctx: CollectContext) -> ProcessesSection:
    section = ProcessesSection(stuck_after_s=ctx.settings.stuck_after_s)
    specs = [(w.id, w.spec, w.auto) for w in watches if isinstance(w.spec, ProcessWatch)]
    memory = ctx.memory_of(NAME, ProcessesMemory)
    handles = memory.handles
    try:
        if not specs:
            for kept in memory.per_process():
                kept.clear()
            return section
        run = proctree.of_run(ctx)
        table, children, excluded = run.table, run.children, run.excluded
        state = State(
            handles=handles,
            described=memory.described,
            unmoved=memory.unmoved,
            cpu_ticks=memory.cpu_ticks,
            limit=ctx.settings.limits.processes_per_watch_max,
            sampler=sampler.shared(ctx.settings.sample_interval_s),
            listen=procfs.listening_of_run(ctx) if not ctx.probe else {},
            probe=ctx.probe,
            table=table,
            boot=run.boot,
        )
    except Exception as exc:  # a broken /proc must not cost the whole dump
        section.unavailable.append(Unavailable(target=NAME, reason=_reason(exc)))
        return section
    matched: set[int] = set()
    for watch_id, spec, auto in specs:
        try:
            rows = procselect.candidates(spec, table, excluded, children)
            rows += _orphans(watch_id, rows, ctx, table)
            matched.update(pid for pid, _ in rows)
            _collect_watch(watch_id, spec, rows, state, section, auto)
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
    for kept in memory.per_process():
        for key in set(kept) - state.seen:
            del kept[key]
    section.matched = len(matched)
    section.featured = featured(section.items)
    section.workers = workers(section.items)
    with contextlib.suppress(Exception):
        _exited(ctx, section, state, {wid for wid, _, _ in specs})
    if specs and not ctx.probe:
        try:
            section.stuck_stacks = pystacks.for_stuck(
                section.items, {wid: spec for wid, spec, _ in specs}, set(state.listen.values()),
                section.stuck_after_s or STUCK_AFTER_S, ctx.previous, memory.stacks,
            )  # fmt: skip
        except Exception as exc:  # the stacks add to the section: they must not cost it
            section.unavailable.append(Unavailable(target="stuck stacks", reason=_reason(exc)))
    return section
