"""Many process rows summarised: the rows worth featuring, and workers folded by rank."""

import re
from collections import defaultdict

from ctxd.collectors.proc.argv import fold_workers, is_python, shape
from ctxd.fmt import printable
from ctxd.models import ProcessInfo, WorkerGroup

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
    """Per root, its children folded by command line; alike ones carry their pids and ranks."""
    groups: list[WorkerGroup] = []
    by_tree: dict[int | None, list[ProcessInfo]] = defaultdict(list)
    for p in items:  # one pass: a watch of 300 roots asked 300 passes over 300 rows
        if not p.root and p.argv:
            by_tree[p.tree].append(p)
    for root in (p for p in items if p.root):
        children = by_tree.get(root.pid, [])
        by_shape: dict[tuple[str, ...], list[ProcessInfo]] = defaultdict(list)
        for p in children:
            by_shape[shape(p.argv)].append(p)
        for n, cmd in fold_workers([p.argv for p in children])[:WORKER_LINES]:
            members = next((m for m in by_shape.values() if _folds_to(m, n, cmd)), [])
            core = _alike_core(members)
            groups.append(
                WorkerGroup(tree=root.pid, count=n, command=_as_typed(cmd),
                            pids=[p.pid for p in core], ranks=_ranks(cmd) if core else None)
            )  # fmt: skip
    return groups


def _as_typed(command: str) -> str:
    """A folded command line as a person types it: `python3 serve.py --rank {0..7}`, the
    interpreter by its name rather than its path (the top's executable is said beside it),
    on one line (a `-c` program's newlines escaped, never cut off)."""
    program, space, rest = command.partition(" ")
    name = program.rsplit("/", 1)[-1]
    typed = f"{name}{space}{rest}" if "/" in program and is_python(name) else command
    return printable(typed, lines=False)


def _folds_to(members: list[ProcessInfo], count: int, command: str) -> bool:
    return len(members) == count and fold_workers([p.argv for p in members]) == [(count, command)]


def _band(p: ProcessInfo) -> tuple[str, str, int, str | None]:
    """What a reader compares workers by: name, state, idle or how busy, where it waits."""
    cpu = p.cpu_percent or 0.0
    return p.name, p.state, 0 if cpu < 1 else 1 + int(cpu // 25), p.waiting


def _alike_core(members: list[ProcessInfo]) -> list[ProcessInfo]:
    """The members alike enough to show as one row: all of them, else the most of them that
    are (more than half: the odd one out, a rank waiting elsewhere, gets its own row); none
    when no such majority is."""
    if len(members) < 2:
        return []
    if _alike(members):
        return members
    bands: dict[tuple[str, str, int, str | None], list[ProcessInfo]] = defaultdict(list)
    for p in members:
        bands[_band(p)].append(p)
    most = max(bands.values(), key=len)
    return most if 2 * len(most) > len(members) and _alike(most) else []


def _alike(members: list[ProcessInfo]) -> bool:
    """Same name, state and CPU band, and resident sizes within 10 % of each other."""
    if len({_band(p) for p in members}) != 1:
        return False
    sizes = [p.rss_bytes for p in members]
    if any(s is None for s in sizes):
        return all(s is None for s in sizes)
    known = [s for s in sizes if s is not None]
    return max(known) <= min(known) * 1.1


_VARYING = re.compile(r"\{(\d+)\.\.(\d+)\}|\{([^{}]*)\}")


def _ranks(command: str) -> str | None:
    """The first varying part of a folded command line, as a reader writes it: "0-7"."""
    m = _VARYING.search(command)
    if not m:
        return None
    return f"{m.group(1)}-{m.group(2)}" if m.group(1) is not None else m.group(3)
