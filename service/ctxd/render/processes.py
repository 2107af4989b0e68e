"""The dump's process section worked out in Python: which rows show, which fold into a
worker line, which columns carry something, and the counts of a long list.

Jinja's select and map filters cost microseconds an item; a watch matching 300 processes
ran them a few thousand times a dump. The template keeps the layout, this the arithmetic.
"""

from dataclasses import dataclass, field

from ctxd.models import ProcessesSection, ProcessInfo, WorkerGroup


@dataclass
class Columns:
    """Which optional columns carry something for at least one row shown."""

    idle: bool
    io: bool
    fds: bool
    listens: bool
    waits: bool


@dataclass
class ProcessView:
    rows: list[ProcessInfo]  # shown: the featured ones when the section names some, else all
    singles: list[ProcessInfo]  # shown on a line of their own
    groups: list[tuple[WorkerGroup, ProcessInfo]]  # folded workers, and the row they show
    show: Columns
    detailed: list[ProcessInfo]  # the tree roots shown, described below the table
    states: dict[str, int] = field(default_factory=dict)  # of every row described
    cpu_percent: float = 0.0  # of every row described
    rss_bytes: int = 0


def _without_odd(group: WorkerGroup, section: ProcessesSection) -> WorkerGroup:
    """The group less the members a stuck tree's stacks set apart (rank 3 asleep in its own
    function while the others wait for it): alike in the kernel's view, not in the job's."""
    where = {pid: i for i, st in enumerate(section.stuck_stacks) for pid in st.pids
             if st.tree == group.tree and st.host == group.host}  # fmt: skip
    places = [where[pid] for pid in group.pids if pid in where]
    if not places:
        return group
    usual = max(set(places), key=places.count)
    kept = [pid for pid in group.pids if where.get(pid, usual) == usual]
    return group.model_copy(update={"pids": kept})


def _shown(group: WorkerGroup, by_ref: dict[str, ProcessInfo]) -> ProcessInfo:
    """The row a folded group shows: its first member's, listening on every port any of them
    listens on (gloo ranks each listen on a port of their own: one shown would read as all)."""
    first = by_ref[group.refs[0]]
    ports = sorted({port for ref in group.refs if ref in by_ref for port in by_ref[ref].listening})
    return (
        first if ports == sorted(first.listening) else first.model_copy(update={"listening": ports})
    )


def view(section: ProcessesSection, roots: list[ProcessInfo]) -> ProcessView:
    items = section.items
    featured = set(section.featured)
    rows = [p for p in items if p.pid in featured] if featured else items
    visible, by_ref = {p.ref for p in rows}, {p.ref: p for p in items}
    workers = [_without_odd(g, section) for g in section.workers]
    groups = [
        (g, _shown(g, by_ref))
        for g in workers
        if len(g.pids) > 1 and visible.intersection(g.refs) and g.refs[0] in by_ref
    ]
    folded = {ref for g, _ in groups for ref in g.refs}
    states: dict[str, int] = {}
    for p in items:
        states[p.state] = states.get(p.state, 0) + 1
    return ProcessView(
        rows=rows,
        singles=[p for p in rows if p.ref not in folded],
        groups=groups,
        show=Columns(
            idle=any(p.idle_for_s for p in rows),
            io=any(p.io_read_bps or p.io_write_bps for p in rows),
            fds=any(p.open_files is not None for p in rows),
            listens=any(p.listening for p in rows),
            waits=any(p.waiting for p in rows),
        ),
        detailed=[p for p in roots if p.ref in visible],
        states=states,
        cpu_percent=sum(p.cpu_percent for p in items if p.cpu_percent is not None),
        rss_bytes=sum(p.rss_bytes for p in items if p.rss_bytes is not None),
    )
