"""Which pids, and which trees, a process watch selects from the process table."""

from collections.abc import Set

import psutil

from ctxd.collectors import _patterns
from ctxd.collectors.proc.proctree import Entry, kept_matches
from ctxd.models import ProcessWatch


def ancestors(pid: int, table: dict[int, Entry]) -> list[int]:
    found: list[int] = []
    entry = table.get(pid)
    while entry is not None and entry.ppid and entry.ppid not in found and entry.ppid != pid:
        found.append(entry.ppid)
        entry = table.get(entry.ppid)
    return found


def descendants(root: int, children: dict[int, list[int]]) -> list[int]:
    """Every process below root, depth first in pid order (the launcher's workers in rank order)."""
    found: list[int] = []
    seen = {root}
    stack = sorted(children.get(root, []), reverse=True)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        found.append(pid)
        stack += sorted(children.get(pid, []), reverse=True)
    return found


# How old a process's working directory may be when a watch scoped to a folder reads it.
CWD_MAX_AGE_S = 5.0


def _matches(spec: ProcessWatch, table: dict[int, Entry], excluded: Set[int]) -> list[int]:
    found = _targets(spec, table, excluded)
    if spec.cwd is None:
        return found
    scope = spec.cwd.rstrip("/") or "/"
    return [
        pid
        for pid in found
        if pid in table and _within(table[pid].working_dir(pid, CWD_MAX_AGE_S), scope)
    ]


def _within(cwd: str | None, scope: str) -> bool:
    return cwd is not None and (cwd == scope or cwd.startswith(scope.rstrip("/") + "/"))


def _targets(spec: ProcessWatch, table: dict[int, Entry], excluded: Set[int]) -> list[int]:
    if spec.pid is not None:
        return [spec.pid] if spec.pid in table or psutil.pid_exists(spec.pid) else []
    if spec.name is not None:
        # psutil's name is the kernel's 15-character comm; argv[0] has the full program name.
        return sorted(
            pid
            for pid, e in table.items()
            if pid not in excluded and spec.name in (e.name, e.program)
        )
    return sorted(_pattern_matches(spec.match or "", table) - excluded)


def _pattern_matches(source: str, table: dict[int, Entry]) -> frozenset[int]:
    pattern, budget = _patterns.compiled(source), _patterns.Budget()

    def hit(_: int, entry: Entry) -> bool:
        known = entry.matched.get(pattern.pattern)
        if known is None:
            if len(entry.matched) >= 64:
                entry.matched.clear()
            known = entry.matched[pattern.pattern] = budget.search(pattern, entry.text) is not None
        return known

    return kept_matches(("pattern", source), table, hit)


def candidates(
    spec: ProcessWatch,
    table: dict[int, Entry],
    excluded: Set[int],
    children: dict[int, list[int]],
) -> list[tuple[int, int]]:
    """(pid, tree root) pairs for one watch, each root followed by its tree.

    A match below another match is part of that match's tree, not a root of its own.
    """
    matched = _matches(spec, table, excluded)
    matched_set = set(matched)
    roots = [p for p in matched if not matched_set.intersection(ancestors(p, table))]
    rows: list[tuple[int, int]] = []
    for root in roots:
        rows.append((root, root))
        if spec.children:
            rows += [(pid, root) for pid in descendants(root, children)]
    if not spec.children:
        root_set = set(roots)
        for pid in matched:
            if pid not in root_set:
                tree = next((a for a in ancestors(pid, table) if a in root_set), pid)
                rows.append((pid, tree))
    return rows
