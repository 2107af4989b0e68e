"""Pure functions from observations (and the previous ones) to signals, worst first."""

from collections import Counter
from collections.abc import Set
from datetime import datetime, timedelta

from ctxd import redact
from ctxd.attempts.flags import process_name
from ctxd.collectors.proc.procfs import true_start
from ctxd.discovery.procscan import SHELLS
from ctxd.fmt import human_bytes, human_duration, ranges
from ctxd.models import SEVERITY_ORDER, GpuInfo, LogInfo, Observations, ProcessInfo, Signal
from ctxd.signals import ranks
from ctxd.signals.logs import log_errors, logs_of, root_cause, silent_for, silent_logs
from ctxd.signals.ray import ray_clusters
from ctxd.signals.slurm import slurm_jobs
from ctxd.snapshotter import happened
from ctxd.thresholds import (
    DISK_CRITICAL_RATIO,
    DISK_FREE_BYTES,
    DISK_FREE_RATIO,
    GPU_HELD_BYTES,
    IDLE_CPU_PERCENT,
    MEMORY_GROWTH_BPS,
    STUCK_AFTER_S,
)

# How long after it was last seen alive an exited process may still have written its log: the
# time between two looks (the sampler's, a snapshot's, a probe's)
EXIT_WRITE_SLACK_S = 5.0
LAST_LINE_CHARS = 240  # of a silent log's last line, quoted whole where it fits (with "…")


def derive(
    current: Observations,
    previous: Observations | None,
    earlier_runs: Set[str] = frozenset(),
    at: datetime | None = None,
) -> list[Signal]:
    """The signals of an observation, worst first; `earlier_runs`: logs of runs that ended
    (attempts' own logs), never taken as what the running one says; `at`: the version's
    instant, which the ages and silences they state are counted to, as the dump's are."""
    signals = [
        *stuck_trees(current, earlier_runs, at),
        *log_errors(current, previous),
        *exited_processes(current, previous),
        *idle_processes(current, at),
        *expected_ports(current, earlier_runs),
        *ports_opened(current, previous),
        *silent_logs(current, at),
        *zombies(current),
        *gpu_held_idle(current),
        *memory_growing(current),
        *disks_nearly_full(current),
        *unavailable_watches(current),
        *slurm_jobs(current),
        *ray_clusters(current),
    ]
    stuck = {s.subject for s in signals if s.code == "stuck"}
    # a stuck tree's line names its closed port already
    signals = [s for s in signals if not _port_of_stuck(s, stuck)]
    return sorted(signals, key=lambda s: SEVERITY_ORDER[s.severity])


def _port_of_stuck(signal: Signal, stuck: set[str]) -> bool:
    return signal.code == happened.PORT_CLOSED and any(f"(pid {t})" in signal.text for t in stuck)


def _trees(current: Observations) -> dict[str, list[ProcessInfo]]:
    trees: dict[str, list[ProcessInfo]] = {}
    for p in current.processes.items:
        trees.setdefault(p.tree_ref, []).append(p)  # "node2:10" is not this host's tree 10
    return trees


def _idle_for(members: list[ProcessInfo]) -> float | None:
    """How long every member has stayed under 1 % CPU; None when unknown or one is busy."""
    spans = [p.idle_for_s for p in members if p.state != "zombie"]
    if not spans or any(s is None for s in spans):
        return None
    shortest = min(s for s in spans if s is not None)
    return shortest if shortest > 0 else None


def _idle_range(members: list[ProcessInfo], shortest: float) -> str:
    """ "13-16 s" (an en dash): from the least idle member's span to the most idle's, as the
    process table shows each (one figure when they read the same)."""
    longest = max((p.idle_for_s or 0.0 for p in members if p.state != "zombie"), default=0.0)
    low, high = human_duration(shortest), human_duration(max(longest, shortest))
    if low == high:
        return low
    (low_n, _, low_unit), (high_n, _, high_unit) = low.partition(" "), high.partition(" ")
    if low_unit == high_unit and low_n.isdigit() and high_n.isdigit():
        return f"{low_n}\N{EN DASH}{high}"
    return f"{low} to {high}"


def _of_age(span: float, members: list[ProcessInfo], at: datetime | None) -> str:
    """ "7-9 s of its 11 s": the members' idle spans next to the age of the oldest member (too
    early to call a hang?), counted to the version's instant `at` as the process table counts
    it."""
    idle = _idle_range(members, span)
    if not members:
        return idle
    oldest = min(members, key=lambda p: p.started_at)
    born = true_start(oldest.started_at, oldest.host)
    age = oldest.age_s if at is None else int(at.timestamp()) - int(born.timestamp())
    if age < span:
        return idle
    return f"{idle} of its {human_duration(age)}"


def stuck_trees(
    current: Observations, earlier_runs: Set[str] = frozenset(), at: datetime | None = None
) -> list[Signal]:
    """A tree alive with every member idle past the threshold, and evidence it should not be:
    its port closed, or its own log silent (a log an ended attempt wrote, `earlier_runs`, or
    one another process writes, says nothing of this tree). Where its ranks wait comes first:
    it is what a reader acts on."""
    threshold = current.processes.stuck_after_s or STUCK_AFTER_S
    signals = []
    for tree, members in _trees(current).items():
        idle = _idle_for(members)
        if idle is None or idle < threshold:
            continue
        watch_ids = {p.watch_id for p in members}
        evidence = []
        for port in current.ports.items:
            if port.expected_by in watch_ids and not port.listening:
                evidence.append(f"port {port.port} expected, not listening")
        pids = {p.pid for p in members}
        for log in current.logs.items:
            theirs = log.writer_pid in pids if log.writer_pid else log.path not in earlier_runs
            if log.silent_for_s >= threshold and theirs:
                # cut as any text is: a known token's fragment at the edge is withheld
                last = redact.cut(log.lines[-1].strip(), LAST_LINE_CHARS, "…") if log.lines else ""
                tail = f", last line: “{last}”" if last else ""
                evidence.append(f"log {log.path} silent {silent_for(log, at)}{tail}")
        if not evidence:
            continue  # idle and serving (or nothing expected of it): waiting, not stuck
        # where they wait: the job's own lines, rank by rank, where they differ; else the
        # kernel's wait points, one entry per distinct point (eight in one call is one), the
        # tree's top apart (a launcher polling its workers is not one of them), and the
        # Python stacks (the process rows give each one's kernel wait either way)
        apart = ranks.apart(members, current.processes.stuck_stacks, tree)
        if not apart:
            evidence += _kernel_waits(members) + _python_waits(current, tree)
        below = f" (its top and {len(members) - 1} below it)" if len(members) > 2 else ""
        text = (
            f"stuck: all {len(members)} processes in tree {tree}{below} idle for"
            f" {_of_age(idle, members, at)},"
            f" past the {human_duration(threshold)} it takes to call a tree stuck"
        )
        signals.append(
            Signal(severity="critical", code="stuck", subject=str(tree),
                   text="; ".join([text, *apart, *evidence]))
        )  # fmt: skip
    return signals


def _kernel_waits(members: list[ProcessInfo]) -> list[str]:
    waits = Counter(p.waiting for p in members if p.waiting and not p.root)
    top = next((p for p in members if p.root and p.waiting), None)
    said = [f"its top (pid {top.pid}) waiting in {top.waiting}"] if top is not None else []
    if waits:
        points = (
            f"{w} \N{MULTIPLICATION SIGN}{n}" if n > 1 else w for w, n in waits.most_common(4)
        )
        said.append(("the others " if top else "") + "waiting in " + ", ".join(points))
    return said


def _python_waits(current: Observations, tree: str) -> list[str]:
    """The stuck tree's Python stacks in a line: innermost frames of each distinct one."""
    stacks = [s for s in current.processes.stuck_stacks if s.tree_ref == tree]
    shown = []
    for st in stacks[:3]:
        frames = [line.strip() for line in st.lines if line.startswith("  ")][:3]
        if not frames:
            continue
        names = [f.split(" (")[0] for f in frames[:-1]] + [frames[-1]]
        count = f" \N{MULTIPLICATION SIGN}{len(st.pids)}" if len(st.pids) > 1 else ""
        shown.append(" \N{LEFTWARDS ARROW} ".join(names) + count)
    if shown:
        return ["Python stack " + "; ".join(shown)]
    notes = {st.note for st in stacks if st.note}
    return sorted(notes)[:1]


def exited_processes(current: Observations, previous: Observations | None) -> list[Signal]:
    if previous is None:
        return []
    last_seen = {e.key: e.last_seen_at for e in current.processes.exited}
    exited = list(happened.exited(previous, current))
    # a shell that started a program and went with it: the program (its child) is the launch,
    # and says the news; the shell's own exit says nothing more
    launched = {q.tree for q in exited if not q.root and q.tree is not None and not _shell(q)}
    signals = []
    for p in exited:
        if p.root and p.pid in launched and _shell(p):
            continue
        lead = p.root or p.tree in launched
        seen = last_seen.get(p.key) or p.seen_at
        when = f", last seen alive {seen:%H:%M:%S} UTC" if seen else ""
        error = root_cause(current, _its_logs(current, previous, p, seen)) if lead else None
        # the evidence leads: what a reader acts on is the cause, not the exit
        crashed = f": {error[1]} (in {error[0]});" if error else ""
        verb = "crashed" if crashed else "exited"
        signals.append(
            Signal(severity="critical" if lead else "warning", code=happened.PROCESS_EXITED,
                   subject=p.key,
                   text=f"process {p.pid} ({process_name(p)}) {verb}{crashed}"
                   f"{' exited' if crashed else ''}{when}")
        )  # fmt: skip
    return signals


def _shell(p: ProcessInfo) -> bool:
    return (p.argv[0] if p.argv else p.name).rsplit("/", 1)[-1] in SHELLS


def _its_logs(
    current: Observations, previous: Observations, p: ProcessInfo, seen: datetime | None
) -> list[LogInfo]:
    """The logs an exited process may have ended with: those it was last seen writing, else
    its run's (`logs_of`) last written while it could still write, never a later run's (the
    next launch's error is not its): of those, the ones already there when it was last seen
    alive come first (a shell's redirection makes the log before the program starts, so a
    log made after that is a later launch's, where several start in one second)."""
    wrote = {log.path for log in previous.logs.items if log.writer_pid == p.pid}
    if wrote:
        return [log for log in current.logs.items if log.path in wrote]
    others = {log.path for log in previous.logs.items if log.writer_pid not in (None, p.pid)}
    theirs = [log for log in logs_of(current, {p.pid}, p.started_at) if log.path not in others]
    if seen is not None:
        latest = seen + timedelta(seconds=EXIT_WRITE_SLACK_S)
        theirs = [log for log in theirs if log.modified_at <= latest]
    there = {log.path for log in previous.logs.items}
    return [log for log in theirs if log.path in there] or theirs


def idle_processes(current: Observations, at: datetime | None = None) -> list[Signal]:
    """Many idle workers say "stuck" louder than one row each: group them."""
    procs = [
        p for p in current.processes.items if p.cpu_percent is not None and p.state != "zombie"
    ]  # a zombie has exited: it is said so on its own
    idle = [p for p in procs if p.cpu_percent is not None and p.cpu_percent < IDLE_CPU_PERCENT]
    if not procs or not idle or len(idle) != len(procs):
        return []
    if stuck_trees(current):
        return []  # the stuck signal already says it, with its evidence
    expected = [port for port in current.ports.items if port.expected_by is not None]
    if expected and all(port.listening and not port.health_error for port in expected):
        return []  # serving: a server waiting for requests idles, and that is fine
    spans = [p.idle_for_s for p in procs]
    known = [s for s in spans if s is not None]
    since = f" for {_of_age(min(known), procs, at)}" if known and len(known) == len(spans) else ""
    threshold = current.processes.stuck_after_s or STUCK_AFTER_S
    if since and min(known) < threshold:
        since += f": too early to call a hang (stuck takes {human_duration(threshold)} idle)"
    who = "the watched process is" if len(procs) == 1 else f"all {len(procs)} watched processes"
    text = f"{who} alive at <{IDLE_CPU_PERCENT:g}% CPU{since}"
    return [Signal(severity="warning", code="all_idle", subject="processes", text=text)]


def _run_logs(current: Observations, watch_id: int | None) -> list[LogInfo]:
    """The logs of the run that expects a port: what its processes write, or what was written
    since it started; none but fresh ones when no watched process expects it."""
    members = [p for p in current.processes.items if p.watch_id == watch_id] if watch_id else []
    roots = [p.started_at for p in members if p.root] or [p.started_at for p in members]
    started = max(roots) if roots else None
    if watch_id is None or not members:
        newest = [log.newest_root_started_at for log in current.logs.items]
        started = max((s for s in newest if s is not None), default=None)
        if started is None:
            return list(current.logs.items)  # nothing runs, no run to tell apart
    return logs_of(current, {p.pid for p in members}, started)


def _expecting(current: Observations, watch_id: int | None) -> str:
    """Who expects a port, in words: its watched process, or that none is running."""
    if watch_id is None:
        return ""
    members = [p for p in current.processes.items if p.watch_id == watch_id]
    if not members:
        return "; the process watch that expects it matches no running process"
    lead = next((p for p in members if p.root), members[0])
    return f"; expected by the watched process {process_name(lead)} (pid {lead.pid})"


def expected_ports(current: Observations, earlier_runs: Set[str] = frozenset()) -> list[Signal]:
    signals = []
    for port in current.ports.items:
        where = f"{port.host}:{port.port}"
        if not port.listening:
            run = [
                log for log in _run_logs(current, port.expected_by) if log.path not in earlier_runs
            ]
            cause = root_cause(current, run)
            why = f": {cause[1]} (in {cause[0]})" if cause else ""
            who = _expecting(current, port.expected_by)
            signals.append(
                Signal(severity="critical", code=happened.PORT_CLOSED, subject=where,
                       text=f"{where} not listening{why}{who}")
            )  # fmt: skip
        elif port.health_error or (port.health_status is not None and port.health_status >= 400):
            why = port.health_error or f"HTTP {port.health_status}"
            signals.append(
                Signal(severity="warning", code="health_failed", subject=where,
                       text=f"health {port.url} failing: {why}")
            )  # fmt: skip
    return signals


def ports_opened(current: Observations, previous: Observations | None) -> list[Signal]:
    """The thing started: a port closed in the previous snapshot listens now."""
    if previous is None:
        return []
    signals = []
    for port in happened.opened(previous, current):
        owner = f" (pid {port.owner_pid})" if port.owner_pid else ""
        where = f"{port.host}:{port.port}"
        signals.append(
            Signal(severity="info", code=happened.PORT_OPENED, subject=where,
                   text=f"{where} now listening{owner}")
        )  # fmt: skip
    return signals


def zombies(current: Observations) -> list[Signal]:
    """Exited processes their parent has not reaped: one line per parent (a launcher that
    never waits for its helpers leaves a row of them, one warning each said nothing more)."""
    by_parent: dict[int, list[ProcessInfo]] = {}
    for p in current.processes.items:
        if p.state == "zombie":
            by_parent.setdefault(p.ppid, []).append(p)
    signals = []
    for ppid, dead in by_parent.items():
        if len(dead) == 1:
            (p,) = dead
            text = f"process {p.pid} ({p.name}) is a zombie: parent {ppid} has not reaped it"
            subject = p.key
        else:
            pids = ", ".join(str(p.pid) for p in dead)
            text = f"{len(dead)} processes (pids {pids}) are zombies: parent {ppid} has not"
            text += " reaped them"
            subject = f"zombies of {ppid}"
        signals.append(Signal(severity="warning", code="zombie", subject=subject, text=text))
    return signals


def gpu_held_idle(current: Observations) -> list[Signal]:
    """Memory held at 0 % utilisation: loaded weights waiting on something that never comes.
    One line for all such GPUs: eight alike warnings say no more than one."""
    held = [
        gpu
        for gpu in current.gpus.items
        if gpu.utilization_percent == 0
        and (gpu.memory_used_bytes or 0) >= GPU_HELD_BYTES
        and gpu.processes
    ]
    if not held:
        return []
    watched = {p.pid for p in current.processes.items}
    owners = [p for gpu in held for p in gpu.processes]
    mine = [p for p in owners if p.watched or p.pid in watched]
    parts = [
        (f"GPU {gpus[0].index}: {size}" if len(gpus) == 1
         else f"GPUs {_indices(gpus)}: {size} each") + f" ({_pids(gpus)})"
        for size, gpus in by_size(held)
    ]  # fmt: skip
    whose = (
        ("all their processes watched" if len(mine) == len(owners) else
         f"{len(mine)} of their {len(owners)} processes watched") if len(owners) > 1
        else "watched" if mine else ""
    )  # fmt: skip
    text = f"{'; '.join(parts)} held at 0% utilisation" + (f"; {whose}" if whose else "")
    subject = "gpus" if len(held) > 1 else f"gpu{held[0].index}"
    return [Signal(severity="warning", code="gpu_held_idle", subject=subject, text=text)]


def by_size(gpus: list[GpuInfo]) -> list[tuple[str, list[GpuInfo]]]:
    """The GPUs grouped by the memory each holds (as written: "118.8 GiB"), the largest group
    first: alike ones together, an odd one (a rank still loading) apart."""
    groups: dict[str, list[GpuInfo]] = {}
    for gpu in gpus:
        groups.setdefault(human_bytes(gpu.memory_used_bytes), []).append(gpu)
    return sorted(groups.items(), key=lambda item: -len(item[1]))


def _pids(gpus: list[GpuInfo]) -> str:
    """ "pid 11" or "pids 11, 12, …": who holds these GPUs, each GPU's own holders."""
    pids = list(dict.fromkeys(p.pid for gpu in gpus for p in gpu.processes))
    shown = ", ".join(map(str, pids[:8])) + (" …" if len(pids) > 8 else "")
    return f"pid {shown}" if len(pids) == 1 else f"pids {shown}"


def _indices(gpus: list[GpuInfo]) -> str:
    """0-7, or 0-2, 4-7 (with en dashes): the GPUs by index, each run as its ends."""
    return ranges([g.index for g in gpus])


def memory_growing(current: Observations) -> list[Signal]:
    return [
        Signal(severity="warning", code="memory_growing", subject=p.key,
               text=f"process {p.pid} ({p.name}) memory growing steadily: "
               f"+{(p.rss_growth_bps or 0) * 60 / 1024**2:.0f} MiB/min")
        for p in current.processes.items
        if (p.rss_growth_bps or 0) >= MEMORY_GROWTH_BPS
    ]  # fmt: skip


def disks_nearly_full(current: Observations) -> list[Signal]:
    signals = []
    for disk in current.host.disks:
        if disk.total_bytes <= 0:
            continue
        ratio = disk.free_bytes / disk.total_bytes
        if ratio < DISK_FREE_RATIO or disk.free_bytes < DISK_FREE_BYTES:
            signals.append(
                Signal(severity="critical" if ratio < DISK_CRITICAL_RATIO else "warning",
                       code="disk_full", subject=disk.path,
                       text=f"disk holding {disk.path} nearly full: "
                       f"{disk.free_bytes / 1024**3:.1f} GiB free ({ratio:.0%})")
            )  # fmt: skip
    return signals


def unavailable_watches(current: Observations) -> list[Signal]:
    sections = (current.processes, current.logs, current.artifacts, current.ports)
    return [
        Signal(
            severity="warning",
            code="unavailable",
            subject=u.target,
            text=f"{u.target}: {u.reason}",
        )
        for section in sections
        for u in section.unavailable
    ]
