"""Ranks of a stuck distributed job, compared: which wait together and which one is apart.

A hang of N ranks is most often one rank somewhere else (still loading, dead in a loop, in
another collective) while the others wait for it in a collective. From the stuck tree's
folded Python stacks and each member's rank (RANK / LOCAL_RANK in its environment, or a
`--rank`, `--local-rank`, `--tp-rank`, `--node-rank` flag), this says it in one line: "3 of 4
ranks wait in all_reduce at serve_tp.py:12 in main; rank 3 (pid 4242) is elsewhere:
load_shard at serve_tp.py:9". Pure: observations in, words out.
"""

import re
import sys
from collections.abc import Sequence

from ctxd.models import ProcessInfo, StuckStack

RANK_VARIABLES = ("RANK", "LOCAL_RANK")
RANK_FLAGS = ("--rank", "--local-rank", "--local_rank", "--tp-rank", "--node-rank", "--rank-id")
_FRAME = re.compile(r"^\s+(?P<name>\S+) \((?P<file>[^:()]+):(?P<line>\d+)\)")
# Frames of the interpreter and of libraries: where a rank waits is the caller's frame.
_LIBRARY = re.compile(r"(^|/)(lib/python[\d.]*/|site-packages/|dist-packages/|<frozen )")
APART_SHOWN = 3


def rank_of(p: ProcessInfo) -> str | None:
    """The rank a member says it is, from its environment or its flags; None if it says none."""
    for name in RANK_VARIABLES:
        value = p.env.get(name)
        if value is not None and value.isdigit():
            return value
    argv = p.argv
    for i, word in enumerate(argv):
        flag, eq, glued = word.partition("=")
        if flag in RANK_FLAGS:
            value = glued if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if value.isdigit():
                return value
    return None


def where(stack: StuckStack) -> str | None:
    """Where a stack waits, in words: the call its program's own code is in, at that line
    ("Barrier.wait at launch.py:5 in all_reduce", "all_reduce at serve_tp.py:12 in main"), or
    its innermost frame when none of it is the program's own."""
    frames = [m for line in stack.lines if (m := _FRAME.match(line))]
    if not frames:
        return None
    own = next((i for i, m in enumerate(frames) if _script(m["file"])), None)
    if own is None:
        own = next((i for i, m in enumerate(frames) if not _library(m["file"])), None)
    if own is None:
        m = frames[0]
        return f"{m['name']} at {_short(m['file'])}:{m['line']}"
    m = frames[own]
    at = f"{_short(m['file'])}:{m['line']}"
    return f"{frames[own - 1]['name']} at {at} in {m['name']}" if own else f"{m['name']} at {at}"


def _script(path: str) -> bool:
    """A file of the program itself: a script beside it (`serve_tp.py`), not a module of the
    standard library that py-spy names by its bare file name (`threading.py`)."""
    return "/" not in path and not path.startswith("<") and not _library(path)


def _library(path: str) -> bool:
    top = path.split("/", 1)[0].removesuffix(".py")
    return path.startswith("<") or top in sys.stdlib_module_names or bool(_LIBRARY.search(path))


def apart(members: Sequence[ProcessInfo], stacks: Sequence[StuckStack], tree: str) -> list[str]:
    """One line naming the ranks that wait apart from the others, when the tree's members
    with a rank (or, without any rank, its workers) do not all wait in the same place."""
    by_pid = {p.pid: p for p in members}
    ranked = {p.pid: rank for p in members if (rank := rank_of(p)) is not None}
    workers = set(ranked) or {p.pid for p in members if not p.root}
    places: dict[str, list[int]] = {}
    for stack in stacks:
        if stack.tree_ref != tree:
            continue
        place = where(stack)
        if place is None:
            continue
        pids = [pid for pid in stack.pids if pid in workers]
        if pids:
            places.setdefault(place, []).extend(pids)
    if len(places) < 2:
        return []
    ordered = sorted(places.items(), key=lambda item: -len(item[1]))
    (main, together), rest = ordered[0], ordered[1:]
    total = sum(len(pids) for pids in places.values())
    noun = "ranks" if ranked else "workers"
    line = f"{len(together)} of {total} {noun} wait in {main}"
    for place, pids in rest[:APART_SHOWN]:
        who = ", ".join(_who(by_pid[pid], ranked) for pid in sorted(pids)[:4])
        line += f"; {who} {'is' if len(pids) == 1 else 'are'} elsewhere: {place}"
    return [line]


def _who(p: ProcessInfo, ranked: dict[int, str]) -> str:
    rank = ranked.get(p.pid)
    return f"rank {rank} (pid {p.pid})" if rank is not None else f"pid {p.pid}"


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]
