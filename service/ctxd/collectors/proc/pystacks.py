"""Stacks of a stuck tree's members, Python (py-spy dump) and kernel (/proc/PID/stack): taken
once per stuck episode, kept, and folded across members that wait in the same place.

A tree counts as stuck here as the stuck signal sees it from the processes collector: every
member idle past the threshold, and an expected port of its watch not listening, or a log
silent past the threshold in the previous snapshot. Python stacks are taken for its Python
members at once, within one time budget, kept per process while the episode lasts (not taken again
each snapshot), and members that wait in the same stack fold into one entry.
"""

import contextlib
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from ctxd import redact
from ctxd.collectors.proc.argv import is_python
from ctxd.models import Observations, ProcessInfo, ProcessWatch, StuckStack

BUDGET_S = 3.0
PIDS_MAX = 32
THREADS_MAX = 8
FRAMES_MAX = 24
KERNEL_FRAMES_MAX = 16
_KERNEL_FRAME = re.compile(r"^\[<[0-9a-f]+>\] ([A-Za-z0-9_.]+)")
_SYSCALL_ENTRY = ("do_syscall_64", "entry_SYSCALL")  # every syscall's: they tell nothing
_THREAD = re.compile(r'^Thread (?:0x)?[0-9a-fA-F]+ \((\w+)\)(?:: "(.*)")?$')


@dataclass(frozen=True)
class Taken:
    """One process's stack (lines) or why there is none (note), and when it was taken."""

    lines: tuple[str, ...]
    note: str | None
    at: datetime
    kernel: tuple[str, ...] = ()


def py_spy() -> str | None:
    """py-spy beside ctxd's interpreter (its virtual environment), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def parse(text: str) -> list[str]:
    """py-spy's dump as stable lines: thread names and frames, without thread ids or header."""
    lines: list[str] = []
    threads = frames = 0
    for raw in text.splitlines():
        line = raw.rstrip()
        thread = _THREAD.match(line)
        if thread:
            threads += 1
            frames = 0
            if threads > THREADS_MAX:
                lines.append("(more threads left out)")
                break
            name = f'"{thread.group(2)}" ' if thread.group(2) else ""
            lines.append(f"thread {name}({thread.group(1)})")
        elif line.startswith("    ") and threads:
            frames += 1
            if frames <= FRAMES_MAX:
                lines.append("  " + line.strip())
            elif frames == FRAMES_MAX + 1:
                lines.append("  (outer frames left out)")
    return lines


def kernel_stack(pid: int) -> tuple[str, ...]:
    """The kernel functions pid waits in, innermost first; () when not readable (not root)."""
    try:
        with open(f"/proc/{pid}/stack") as handle:
            text = handle.read(16384)
    except OSError:
        return ()
    frames = (_KERNEL_FRAME.match(line) for line in text.splitlines())
    names = [m.group(1) for m in frames if m and not m.group(1).startswith(_SYSCALL_ENTRY)]
    return tuple(names[:KERNEL_FRAMES_MAX])


def why_not(output: str, returncode: int | None) -> str:
    """py-spy's failure in words for the dump."""
    if returncode is None:
        return f"py-spy took longer than {BUDGET_S:g} s: no stack"
    if "Permission Denied" in output or "Operation not permitted" in output:
        return (
            "Python stack not permitted: ptrace refused (ctxd needs the process's user, "
            "CAP_SYS_PTRACE, or kernel.yama.ptrace_scope 0)"
        )
    if "Failed to find python version" in output:
        return "no Python stack: py-spy found no Python interpreter in it"
    first = next((x for x in output.splitlines() if x.startswith("Error:")), "")
    return f"no Python stack: {first.removeprefix('Error:').strip() or f'py-spy exit {returncode}'}"


def take(
    pids: list[int], budget_s: float = BUDGET_S, program: str | None = None
) -> dict[int, Taken]:
    """py-spy dump of each pid, all at once, none past `budget_s`; `program` is py-spy's path."""
    now = datetime.now(UTC)
    if program is None or not os.access(program, os.X_OK):
        missing = "no Python stack: py-spy is not installed beside ctxd nor on PATH"
        return {pid: Taken((), missing, now) for pid in pids}
    running: dict[int, subprocess.Popen[bytes]] = {}
    taken: dict[int, Taken] = {}
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RUST_BACKTRACE": "0"}
    for pid in pids:
        try:
            running[pid] = subprocess.Popen(
                [program, "dump", "--pid", str(pid)], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        except OSError as exc:
            taken[pid] = Taken(
                (), redact.text(f"no Python stack: py-spy did not start: {exc}"), now
            )
    deadline = time.monotonic() + budget_s
    for pid, proc in running.items():
        try:
            out, _ = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            # py-spy stuck reading a stuck target (D state), or a child holding the pipe
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=1)
            taken[pid] = Taken((), why_not("", None), now)
            continue
        text = out.decode(errors="replace")
        lines = parse(text) if proc.returncode == 0 else []
        note = None if lines else why_not(text, proc.returncode)
        taken[pid] = Taken(tuple(redact.lines(lines)), note and redact.text(note), now)
    return taken


def _is_python(p: ProcessInfo) -> bool:
    return is_python(p.exe or p.name)


def stuck_trees(
    items: list[ProcessInfo],
    specs: Mapping[int, ProcessWatch],
    listening: set[int],
    threshold: float,
    previous: Observations | None,
) -> dict[int, list[ProcessInfo]]:
    """{tree: members} of the trees that are stuck, as far as this collector can tell."""
    trees: dict[int, list[ProcessInfo]] = {}
    for p in items:
        trees.setdefault(p.tree if p.tree is not None else p.pid, []).append(p)
    silent_log = previous is not None and any(
        log.silent_for_s >= threshold for log in previous.logs.items
    )
    stuck = {}
    for tree, members in trees.items():
        alive = [p for p in members if p.state != "zombie"]
        if not alive or any((p.idle_for_s or 0) < threshold for p in alive):
            continue
        expected = {port for p in alive if p.watch_id in specs
                    for port in specs[p.watch_id].expect_ports}  # fmt: skip
        if expected - listening or silent_log or _output_silent(alive, threshold):
            stuck[tree] = alive
    return stuck


def _output_silent(members: list[ProcessInfo], threshold: float) -> bool:
    """Whether the files the members write their output to (a log on stdout or stderr, as
    `nohup … > run.log` makes) were all last written longer ago than `threshold`: the tree's
    own log went silent, whether or not a log watch reads it (this snapshot's is not read yet)."""
    now = time.time()
    written = []
    for p in members:
        for fd in (1, 2):
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{p.pid}/fd/{fd}")
                if stat.S_ISREG(st.st_mode):
                    written.append(st.st_mtime)
    return bool(written) and now - max(written) >= threshold


def for_stuck(
    items: list[ProcessInfo],
    specs: Mapping[int, ProcessWatch],
    listening: set[int],
    threshold: float,
    previous: Observations | None,
    kept: dict[str, Taken],
) -> list[StuckStack]:
    """The folded stacks of every stuck tree; `kept` (per process key) is the memory of this
    episode: a process's stacks are taken once, and forgotten when it is no longer stuck."""
    stuck = stuck_trees(items, specs, listening, threshold, previous)
    members = {p.key: p for group in stuck.values() for p in group}
    for key in set(kept) - set(members):
        del kept[key]  # the episode ended (or the process did): the next one takes anew
    wanted = [p for key, p in members.items() if key not in kept][:PIDS_MAX]
    # Where each waits in the kernel, read before py-spy stops them: read after, a member
    # not yet run again since py-spy let go still shows py-spy's stop (ptrace_stop), and
    # folds apart from its alike peers on a busy machine.
    kernels = {p.pid: kernel_stack(p.pid) for p in wanted}
    python = [p.pid for p in wanted if _is_python(p)]
    fresh = take(python, program=py_spy()) if python else {}
    now = datetime.now(UTC)
    for p in wanted:
        python_stack = fresh.get(p.pid, Taken((), None, now))
        kept[p.key] = Taken(python_stack.lines, python_stack.note, python_stack.at,
                            kernels[p.pid])  # fmt: skip
    stacks: list[StuckStack] = []
    for tree, group in stuck.items():
        folded: dict[tuple, StuckStack] = {}
        for p in group:
            got = kept.get(p.key)
            if got is None or not (got.lines or got.note or got.kernel):
                continue  # nothing could be read: the table's kernel wait says what is known
            entry = folded.setdefault(
                (got.lines, got.note, got.kernel),
                StuckStack(tree=tree, lines=list(got.lines), note=got.note,
                           kernel=list(got.kernel), taken_at=got.at),
            )  # fmt: skip
            entry.pids.append(p.pid)
        stacks += sorted(folded.values(), key=lambda s: -len(s.pids))
    return stacks
