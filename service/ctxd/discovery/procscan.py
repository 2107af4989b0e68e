"""The live machine seen for discovery: workspace processes and their stdout/stderr files.

Read with psutil, and /proc where psutil has nothing (the file behind fd 1 and 2). A process
that vanishes mid-read, or that ctxd may not inspect, is skipped or reported as unknown
(None); nothing here raises for it.
"""

import functools
import os
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import psutil

from ctxd.collectors.proc import proctree

PROC = "/proc"
MIN_AGE_S = 5.0
# A process's working directory, read once, is trusted this long: a process seldom changes it.
CWD_MAX_AGE_S = 10.0
# What never is the agent's work, whatever its cwd: the harness, ctxd, editors, shells,
# terminal multiplexers (their children are the work) and one-shot tools.
# Harnesses ctxd has no adapter for; those it has declare their own (`Adapter.programs`).
OTHER_HARNESSES = {"aider", "cursor-agent"}
EDITORS = {"vim", "nvim", "vi", "nano", "emacs", "code", "code-server", "micro", "hx", "less"}
SHELLS = {"bash", "sh", "zsh", "fish", "dash", "ksh", "tmux", "screen", "tmux: server"}
ONE_SHOT = {
    "grep", "rg", "git", "ls", "sleep", "cat", "tail", "head", "find", "ps", "top", "htop",
    "watch", "sed", "awk", "xargs", "env", "sort", "wc", "ssh", "sudo", "timeout", "tee",
    "less", "more", "man", "which", "du", "df", "curl", "wget", "nvidia-smi", "strace", "gdb",
}  # fmt: skip
_JS_RUNTIMES = {"node", "bun", "deno"}


@dataclass
class Candidate:
    """A long-lived process of the workspace; `root` is the top of its tree among candidates."""

    pid: int
    ppid: int
    name: str
    argv: list[str]
    cwd: str | None
    create_time: float
    root: int = 0


class _Inside:
    """Whether a path lies in one of the roots: one prefix test of a tuple, in C (a scan asks
    it of every process's cwd and every argument that names a root)."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = roots
        self.exact = frozenset(roots)
        self.prefixes = tuple(root.rstrip("/") + "/" for root in roots)

    def __call__(self, path: str | None) -> bool:
        if not path or not path.startswith("/"):
            return False
        return path in self.exact or path.startswith(self.prefixes)

    def named_in(self, text: str) -> bool:
        return any(root in text for root in self.roots)


@functools.cache
def harness_programs() -> frozenset[str]:
    """The programs of every harness: those ctxd's adapters declare, and the others'."""
    from ctxd.harness.registry import programs  # the adapters: data, read once

    return frozenset(programs() | OTHER_HARNESSES)


def is_harness(name: str, argv: list[str]) -> bool:
    """An agent harness's own process: `claude`, `node …/claude-code/cli.js`, `bun …/opencode`,
    `node …/.bin/codex` (its npm launcher), `node …/gemini`, `python -m aider`."""
    program = os.path.basename(argv[0]) if argv else name
    harnesses = harness_programs()
    if name in harnesses or program in harnesses:
        return True
    if program in _JS_RUNTIMES or program.startswith("python"):
        tail = " ".join(argv[1:4]).lower()
        return any(word in tail for word in harnesses)
    return False


def is_excluded(name: str, argv: list[str]) -> bool:
    """The harness, ctxd, an editor, a shell or a one-shot tool."""
    program = os.path.basename(argv[0]) if argv else name
    names = {name, program}
    if names & (EDITORS | SHELLS | ONE_SHOT) or "ctxd" in names or is_harness(name, argv):
        return True
    # `python -m ctxd serve`: ctxd; a program that only has "ctxd" in an argument
    # (`--tag ctxd-run-1`) is not ctxd
    return program.startswith("python") and any(
        arg == "ctxd" or arg.endswith("/ctxd") for arg in argv[1:4]
    )


def _wrappers(reads: dict[int, "Read"]) -> set[int]:
    """The processes above a harness among `reads`: what started the agent's harness
    (`npm exec claude`, `uv run`, a script that drives it) is never the agent's work, and its
    tree holds the harness's own shells and helpers."""
    above: set[int] = set()
    for pid, (name, ppid, _, argv, _) in reads.items():
        if not is_harness(name, list(argv)):
            continue
        seen = {pid}
        while ppid in reads and ppid not in seen:
            above.add(ppid)
            seen.add(ppid)
            ppid = reads[ppid][1]
    return above


def _read(pid: int, proc: str) -> tuple[str, int, float, list[str]] | None:
    """(name, ppid, start in clock ticks after boot, argv) from /proc; None if gone or a
    kernel thread. Read directly: psutil's per-process objects cost ~10x more for 1,000."""
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            raw = f.read(65536)
        with open(f"{proc}/{pid}/stat", "rb") as f:
            stat_line = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    if not raw:
        return None
    close = stat_line.rfind(")")
    fields = stat_line[close + 2 :].split()
    if close < 0 or len(fields) < 20:
        return None
    name = stat_line[stat_line.find("(") + 1 : close]
    argv = [a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0")]
    return name, int(fields[1]), float(fields[19]), argv


Read = tuple[str, int, float, Sequence[str], str | None]


def _inside_table(proc: str, inside: _Inside, own: frozenset[int]) -> Iterator[tuple[int, Read]]:
    """(pid, (name, ppid, start in ticks after boot, argv, cwd)) of each process but ctxd's
    own whose cwd or an argument lies inside.

    /proc itself is read through the process collector's table, which reads only processes
    it has not seen before (a crowd of 5,000 costs a listing, not 10,000 reads) and keeps each
    one's cwd for CWD_MAX_AGE_S; another folder (tests) is read file by file."""
    if proc != PROC:
        for entry in os.listdir(proc):
            read = _read(int(entry), proc) if entry.isdigit() else None
            if read is None or int(entry) in own:
                continue
            cwd = _cwd(int(entry), proc)
            if inside(cwd) or any(inside(arg) for arg in read[3]):
                yield int(entry), (*read, cwd)
        return
    table, _ = proctree.shared(0.0)  # fresh: it looks for what was just launched

    def is_inside(pid: int, e: proctree.Entry) -> bool:
        # kernel threads have no command line: never the agent's work; an argument inside
        # names a root, so most command lines are ruled out by one search
        if not e.argv:
            return False
        cwd = e.working_dir(pid, CWD_MAX_AGE_S)
        return inside(cwd) or (inside.named_in(e.text) and any(map(inside, e.argv)))

    # tested again where the table changed, and in whole as often as a cwd is read again
    found = proctree.kept_matches(("inside", *inside.roots), table, is_inside, CWD_MAX_AGE_S)
    for pid in sorted(found):
        e = table[pid]
        if pid not in own:
            cwd = e.working_dir(pid, CWD_MAX_AGE_S)
            yield pid, (e.name, e.ppid, float(e.start_ticks), e.argv, cwd)


def _cwd(pid: int, proc: str) -> str | None:
    try:
        return os.readlink(f"{proc}/{pid}/cwd")
    except OSError:
        return None


def workspace_processes(
    workspaces: list[str], min_age_s: float = MIN_AGE_S, now: float | None = None, proc: str = PROC
) -> list[Candidate]:
    """Processes running for at least `min_age_s` whose cwd or an argv path lies inside one of
    the workspaces, minus the excluded kinds; each with the root of its tree among them."""
    # "/" as a workspace (an agent started at the root, no git) would claim every process.
    roots = [os.path.abspath(w) for w in workspaces if w and os.path.abspath(w) != "/"]
    if not roots:
        return []
    now = time.time() if now is None else now
    boot, ticks = psutil.boot_time(), os.sysconf("SC_CLK_TCK")
    started_before = (now - min_age_s - boot) * ticks
    found: dict[int, Candidate] = {}
    inside = _Inside(roots)
    reads = dict(_inside_table(proc, inside, proctree.own_family()))
    wrappers = _wrappers(reads)  # of every age: a harness starts after what started it
    for pid, (name, ppid, start, argv, cwd) in reads.items():
        # asked of the few inside: a crowd costs nothing
        if start > started_before or pid in wrappers or is_excluded(name, list(argv)):
            continue
        found[pid] = Candidate(pid, ppid, name, list(argv), cwd, boot + start / ticks)
    for candidate in found.values():
        top, seen = candidate.pid, {candidate.pid}
        while (parent := found[top].ppid) in found and parent not in seen:
            top = parent
            seen.add(parent)
        candidate.root = top
    return sorted(found.values(), key=lambda c: (c.create_time, c.pid))


def roots(candidates: list[Candidate]) -> list[Candidate]:
    return [c for c in candidates if c.root == c.pid]


def stdio_files(pid: int, proc: str = PROC) -> list[str]:
    """The regular files open on a process's stdout and stderr (once each): where a redirect
    went even when the command line was never seen. Pipes, ttys, sockets, deleted files and
    unreadable descriptors are left out."""
    found: list[str] = []
    for fd in (1, 2):
        link = f"{proc}/{pid}/fd/{fd}"
        try:
            target = os.readlink(link)
            info = os.stat(link)  # follows to the open file itself, even if renamed
        except OSError:
            continue  # gone, not ours, or closed
        if not stat.S_ISREG(info.st_mode) or not target.startswith("/"):
            continue
        if target.endswith(" (deleted)") or target in found:
            continue
        found.append(target)
    return found
