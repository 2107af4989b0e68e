"""Ranks of a stuck distributed job, compared: which wait together and which one is apart.

A hang of N ranks is most often one rank somewhere else (still loading, dead in a loop, in
another collective) while the others wait for it in a collective. From the stuck tree's
folded Python stacks and each member's rank (RANK / LOCAL_RANK in its environment, or a
`--rank`, `--local-rank`, `--tp-rank`, `--node-rank` flag), this says it in one line, by
where the job's own code waits (its innermost frame that is not the interpreter's nor a
library's), with that line's text and the library call it is in:

    ranks 0-2 (pids 11, 12, 13) wait in `dist.all_reduce(t)` at serve_tp.py:12
    (torch.distributed all_reduce); rank 3 (pid 14) in `time.sleep(3600)` at serve_tp.py:11

The launcher (the tree's root, with no rank: torchrun) waits apart from its ranks by design
and is said apart. Pure: observations in, words out.
"""

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from ctxd.attempts.flags import process_name
from ctxd.collectors.proc.procfs import true_start
from ctxd.fmt import between, ranges
from ctxd.models import ProcessInfo, StuckStack

RANK_VARIABLES = ("RANK", "LOCAL_RANK")
RANK_FLAGS = ("--rank", "--local-rank", "--local_rank", "--tp-rank", "--node-rank", "--rank-id")
_FRAME = re.compile(r"^\s+(?P<name>\S+) \((?P<file>[^:()]+):(?P<line>\d+)\)")
_THREAD = re.compile(r'^thread (?:"(?P<name>.*)" )?\(')
# Frames of the interpreter and of libraries: where a rank waits is the caller's frame.
_LIBRARY = re.compile(r"(^|/)(lib/python[\d.]*/|site-packages/|dist-packages/|<frozen )")
# A decorator's frame between the job's call and the library function it called.
_WRAPPER = re.compile(r"(^|\.)(wrapper|wrapped|inner|decorator|decorated|_fn|fn)$|<locals>")
APART_SHOWN = 3
PIDS_SHOWN = 8  # a node's ranks, all named


@dataclass(frozen=True)
class Place:
    """Where one stack waits: the job's frame (or, with none of its own, the innermost one),
    the text of its line where it was read, and the library call it is in."""

    name: str
    file: str
    line: str
    text: str = ""
    call: str = ""  # "torch.distributed all_reduce"
    own: bool = True

    def words(self, function: bool = True) -> str:
        """ "`time.sleep(0.5)` in wait_for_all_ranks at launch.py:23 (…)": the line's text and
        the function it is in (a module's top level has none; `function` False where the
        reader already has its name), else the function alone."""
        at = f"{_short(self.file)}:{self.line}"
        if not self.text:
            said = f"{self.name} at {at}"
        elif self.name.startswith("<") or not function:
            said = f"{_code(self.text)} at {at}"
        else:
            said = f"{_code(self.text)} in {self.name} at {at}"
        return f"{said} ({self.call})" if self.call else said


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


def place(stack: StuckStack) -> Place | None:
    """Where a stack waits (see Place): in its main thread (or its first one), at the
    innermost frame of the job's own code. Own frames are those the collector read as such
    (`stack.source`); without that, a script beside the program (`serve_tp.py`) and else any
    frame not of the interpreter or a library."""
    threads = _threads(stack.lines)
    if not threads:
        return None
    frames = next((t for name, t in threads if name == "MainThread"), threads[0][1])
    if not frames:
        frames = next((t for _, t in threads if t), [])
    if not frames:
        return None
    own = _own(frames, stack.source)
    if own is None:  # all the library's (a launcher's loop): its innermost frame, by module
        m = frames[0]
        return Place(m["name"], m["file"], m["line"], call=_module(m["file"]), own=False)
    m = frames[own]
    text = stack.source.get(f"{m['file']}:{m['line']}", "")
    call = _call(frames[:own]) or ("" if _script(m["file"]) else _module(m["file"]))
    return Place(m["name"], m["file"], m["line"], text, call)


def where(stack: StuckStack) -> str | None:
    """Where a stack waits, in words ("`dist.all_reduce(t)` at serve_tp.py:12
    (torch.distributed all_reduce)"); None without frames."""
    found = place(stack)
    return found.words() if found else None


def _threads(lines: Sequence[str]) -> list[tuple[str | None, list[re.Match[str]]]]:
    threads: list[tuple[str | None, list[re.Match[str]]]] = []
    for line in lines:
        if thread := _THREAD.match(line):
            threads.append((thread["name"], []))
        elif (frame := _FRAME.match(line)) is not None:
            if not threads:
                threads.append((None, []))
            threads[-1][1].append(frame)
    return threads


def _own(frames: list[re.Match[str]], source: dict[str, str]) -> int | None:
    if source:
        marked = next((i for i, m in enumerate(frames)
                       if f"{m['file']}:{m['line']}" in source and not _entry_point(m["file"])),
                      None)  # fmt: skip
        if marked is not None:
            return marked
    own = next((i for i, m in enumerate(frames) if _script(m["file"])), None)
    if own is None:
        own = next((i for i, m in enumerate(frames) if not _library(m["file"])), None)
    return own


def _call(inner: list[re.Match[str]]) -> str:
    """The library call the job's frame is in: of the frames just inside it, the outermost
    that is not a decorator's wrapper, named with its module ("torch.distributed
    all_reduce")."""
    if not inner:
        return ""
    candidates = [m for m in reversed(inner) if not _WRAPPER.search(m["name"])]
    m = candidates[0] if candidates else inner[-1]
    module = _module(m["file"])
    return f"{module} {m['name']}" if module else m["name"]


def _module(path: str) -> str:
    """A short module-ish name from a library frame's file: `torch/distributed/x.py` ->
    "torch.distributed", `multiprocessing/synchronize.py` -> "multiprocessing",
    `threading.py` -> "threading"."""
    if path.startswith("<"):
        return ""
    tail = re.split(r"/(?:site-packages|dist-packages|lib/python[\d.]*)/", path)[-1]
    parts = tail.lstrip("/").split("/")
    folders = parts[:-1][:2]
    return ".".join(folders) if folders else parts[-1].removesuffix(".py")


def _script(path: str) -> bool:
    """A file of the program itself: a script beside it (`serve_tp.py`), not a module of the
    standard library that py-spy names by its bare file name (`threading.py`)."""
    return "/" not in path and not path.startswith("<") and not _library(path)


def _entry_point(path: str) -> bool:
    return "/" not in path and "." not in path and not path.startswith("<")


def _library(path: str) -> bool:
    """The interpreter's or a library's file, or a package's entry point (`torchrun:8`, a
    script with no .py that only calls its package's main: where it waits is in there)."""
    top = path.split("/", 1)[0].removesuffix(".py")
    return (
        path.startswith("<")
        or _entry_point(path)
        or top in sys.stdlib_module_names
        or bool(_LIBRARY.search(path))
    )


def _on(pids: list[int], by_pid: dict[int, ProcessInfo]) -> str:
    """ ", opening /data/tp3.safetensors": what the call they all sit in waits on, when the
    kernel names one thing for all of them (the path being opened, the file or socket read);
    a FIFO older than their tree's top says so (an earlier run left it)."""
    found = {(p.waiting or "", p.waiting_on) for pid in pids if (p := by_pid.get(pid))}
    if len(found) != 1:
        return ""
    ((waiting, on),) = found
    if not on:
        return ""
    if "(open" not in waiting:
        return f", on {on}"
    if "wait_for_partner" in waiting or "fifo" in waiting:  # the kernel's FIFO open
        left = _left_before(pids, by_pid)
        return f", opening {on}, a FIFO no process writes (the open waits for a writer){left}"
    return f", opening {on}"


# A FIFO written this long before its tree's top started is older than the run: a launcher
# makes its FIFOs after it starts; a kernel start time is read a second coarse
_BEFORE_RUN_S = 2.0


def _left_before(pids: list[int], by_pid: dict[int, ProcessInfo]) -> str:
    """ "; the FIFO is older than this run: unchanged since 2026-12-06 23:12:40 UTC, 15 h
    before pid 40 (the top of its tree) started", where the FIFO they wait to open is."""
    first = by_pid[pids[0]]
    written, top = first.waiting_on_written_at, by_pid.get(first.tree or first.pid, first)
    started = true_start(top.started_at, top.host)  # as the dump's other start times read
    if written is None or (started - written).total_seconds() < _BEFORE_RUN_S:
        return ""
    whose = f"pid {top.pid} (the top of its tree)" if top.pid not in pids else f"pid {top.pid}"
    return (
        f"; the FIFO is older than this run: unchanged since {written:%Y-%m-%d %H:%M:%S} UTC,"
        f" {between(written, started)} before {whose} started"
    )


def apart(members: Sequence[ProcessInfo], stacks: Sequence[StuckStack], tree: str) -> list[str]:
    """One line saying where the tree's ranks (or, without any rank, its workers) wait, group
    by group, when they do not all wait in the same place; the launcher's own wait (the
    root's, with no rank) is said after them, apart."""
    by_pid = {p.pid: p for p in members}
    ranked = {p.pid: rank for p in members if (rank := rank_of(p)) is not None}
    workers = set(ranked) or {p.pid for p in members if not p.root}
    launchers = {p.pid for p in members if p.root and p.pid not in ranked}
    places: dict[str, list[int]] = {}
    launcher: list[tuple[int, str]] = []
    for stack in stacks:
        if stack.tree_ref != tree:
            continue
        found = where(stack)
        if found is None:
            continue
        pids = [pid for pid in stack.pids if pid in workers]
        if pids:
            places.setdefault(found, []).extend(pids)
        launcher += [(pid, found) for pid in stack.pids if pid in launchers]
    if len(places) < 2:
        return []
    ordered = sorted(places.items(), key=lambda item: (-len(item[1]), min(item[1])))
    parts = []
    for i, (said, pids) in enumerate(ordered[: APART_SHOWN + 1]):
        who = _who(sorted(pids), by_pid, ranked, len(workers) if i == 0 else 0)
        verb = ("waits" if len(pids) == 1 else "wait") if i == 0 else ""
        parts.append(f"{who} {verb + ' ' if verb else ''}in {said}{_on(pids, by_pid)}")
    if len(ordered) > APART_SHOWN + 1:
        parts.append(f"{len(ordered) - APART_SHOWN - 1} more places")
    for pid, said in launcher[:1]:
        name = process_name(by_pid[pid])
        # a launcher's own loop (torchrun's agent), not the job's code: its normal wait
        usual = "" if said.startswith("`") else " waits on its workers, as it does while they run,"
        parts.append(f"the launcher (pid {pid}{', ' + name if name else ''}){usual} in {said}")
    return ["; ".join(parts)]


def _who(
    pids: list[int], by_pid: dict[int, ProcessInfo], ranked: dict[int, str], of: int = 0
) -> str:
    """ "ranks 0-2 (pid by rank: 0=11, 1=12, 2=13)", "rank 3 (pid 14)"; without ranks, the
    first group counted against the `of` workers ("3 of its 4 workers (pids 11, 12, 13)") and
    the others by their pids ("pid 14"): "3 workers" beside "4 child processes" read as a
    contradiction. Ranked pids go in their ranks' order ("pids by rank 11, 12, 14" for ranks
    0-1, 3 read as three pids to map by counting)."""
    ranks = sorted({int(ranked[pid]) for pid in pids if pid in ranked})
    if ranks:
        pids = sorted(pids, key=lambda pid: int(ranked.get(pid, sys.maxsize)))
    more = ", …" if len(pids) > PIDS_SHOWN else ""
    shown = ", ".join(str(pid) for pid in pids[:PIDS_SHOWN]) + more
    pid_word = "pid" if len(pids) == 1 else "pids"
    if not ranks:
        if of > len(pids):
            return f"{len(pids)} of its {of} workers ({pid_word} {shown})"
        return f"{pid_word} {shown}" if len(pids) == 1 else f"{len(pids)} workers (pids {shown})"
    noun = "rank" if len(ranks) == 1 else "ranks"
    if len(ranks) > 1 and len(ranks) == len(pids):  # each pid beside its rank, none to count
        pairs = ", ".join(f"{ranked[pid]}={pid}" for pid in pids[:PIDS_SHOWN]) + more
        return f"{noun} {ranges(ranks)} (pid by rank: {pairs})"
    return f"{noun} {ranges(ranks)} ({pid_word} {shown})"


def _code(text: str) -> str:
    """Text as an inline code span, with enough backticks around it to hold its own."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]
