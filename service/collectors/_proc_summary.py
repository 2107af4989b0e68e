"""Many process rows summarised: the rows worth featuring, and workers folded by rank."""

from service.collectors._argv import fold_workers
from service.models import ProcessInfo, WorkerGroup

# Beyond this many rows the dump shows a summary and the most telling rows, not a long table.
TABLE_ROWS = 30
FEATURED_EACH = 8
WORKER_LINES = 6


def featured(items: list[ProcessInfo]) -> list[int]:
    """Roots, then the busiest, largest and newest rows: what a reader of 500 rows wants."""
    if len(items) <= TABLE_ROWS:
        return []
    picked = [p.pid for p in items if p.root][:FEATURED_EACH]
    rankings = (
        lambda p: -(p.cpu_percent or 0.0),
        lambda p: -(p.rss_bytes or 0),
        lambda p: p.age_s,
    )
    for rank in rankings:
        picked += [p.pid for p in sorted(items, key=rank)[:FEATURED_EACH]]
    return list(dict.fromkeys(picked))


def workers(items: list[ProcessInfo]) -> list[WorkerGroup]:
    groups: list[WorkerGroup] = []
    for root in (p for p in items if p.root):
        argvs = [p.argv for p in items if p.tree == root.pid and not p.root and p.argv]
        folded = fold_workers(argvs)[:WORKER_LINES]
        groups += [WorkerGroup(tree=root.pid, count=n, command=cmd) for n, cmd in folded]
    return groups
