"""Stacks of a stuck tree's members, Python (py-spy dump) and kernel (/proc/PID/stack): taken
once per stuck episode, kept, and folded across members that wait in the same place.

A tree counts as stuck here as the stuck signal sees it from the processes collector: every
member idle past the threshold, and an expected port of its watch not listening, or a log
silent past the threshold in the previous snapshot. Python stacks are taken for its Python
members at once, within one time budget, kept per process while the episode lasts (not taken again
each snapshot), and members that wait in the same stack fold into one entry.

py-spy's JSON dump names each frame's file both shortened (as its text dump prints, and as
the lines kept here show it) and in full: the full name tells the job's own code from the
interpreter's and the libraries' (site-packages, lib/pythonX.Y), and the text of the line
each own frame is at is read from that file (under the watch roots, at most SOURCE_READ_MAX
bytes, redacted) so that where a rank waits can be shown without opening the file.
"""

import contextlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ctxd import confine, redact
from ctxd.collectors import _fs
from ctxd.collectors.proc.argv import is_python
from ctxd.models import Observations, ProcessInfo, ProcessWatch, StuckStack
from ctxd.named_files import read_at_most
from ctxd.settings import Settings

BUDGET_S = 3.0
PIDS_MAX = 32
THREADS_MAX = 8
FRAMES_MAX = 24
KERNEL_FRAMES_MAX = 16
_KERNEL_FRAME = re.compile(r"^\[<[0-9a-f]+>\] ([A-Za-z0-9_.]+)")
_SYSCALL_ENTRY = ("do_syscall_64", "entry_SYSCALL")  # every syscall's: they tell nothing
_THREAD = re.compile(r'^Thread (?:0x)?[0-9a-fA-F]+ \((\w+)\)(?:: "(.*)")?$')
# Files of the interpreter and of installed libraries, by their full name: not the job's code.
_NOT_OWN = re.compile(r"(^<|/site-packages/|/dist-packages/|/lib/python[\d.]*/|/lib/pypy)")
# Where a multiprocessing child begins: the job's frames outside it (`w.start()`) are those
# the child was forked in, its parent's, not where it waits.
# py-spy names a method with its class: `BaseProcess._bootstrap`.
_BOOTSTRAP = re.compile(r"^(?:\w+\.)?_bootstrap .*/multiprocessing/process\.py$")
SOURCE_READ_MAX = 32768  # bytes read of one source file: a line past them is not shown
SOURCE_LINE_MAX = 200  # characters kept of one source line
SOURCE_FILES_MAX = 16  # source files read per collection


@dataclass(frozen=True)
class Taken:
    """One process's stack (lines) or why there is none (note), and when it was taken."""

    lines: tuple[str, ...]
    note: str | None
    at: datetime
    kernel: tuple[str, ...] = ()
    # the job's own frames: "file:line" as in `lines` -> the frame's full file name
    own: tuple[tuple[str, str], ...] = ()
    # "file:line" -> the text of that line (redacted), for the own frames whose file was read
    source: dict[str, str] = field(default_factory=dict)


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


def parse_json(text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """py-spy's JSON dump as `parse` makes its text dump (the same lines), and the job's own
    frames among them: ("file:line" as the lines show it, the file's full name), innermost
    first. ValueError when the text is not such a dump."""
    threads = json.loads(text)
    if not isinstance(threads, list):
        raise ValueError("not a list of threads")
    lines: list[str] = []
    own: list[tuple[str, str]] = []
    for number, thread in enumerate(threads, 1):
        if number > THREADS_MAX:
            lines.append("(more threads left out)")
            break
        status = "idle" if not thread.get("active") else "active"
        name = thread.get("thread_name")
        lines.append(f'thread "{name}" ({status})' if name else f"thread ({status})")
        forked = False  # past a forked child's start: the outer frames are its parent's
        for depth, frame in enumerate(thread.get("frames") or [], 1):
            if forked:  # read as its own, `w.start()` would say the child waits where it began
                lines.append("  (the frames it was forked in, its parent's, left out)")
                break
            if depth > FRAMES_MAX:
                lines.append("  (outer frames left out)")
                break
            full = str(frame.get("filename") or "")
            short = str(frame.get("short_filename") or full)
            at = f"{short}:{frame.get('line')}"
            lines.append(f"  {frame.get('name')} ({at})")
            if own_file(full) and not forked:
                own.append((redact.text(at), full))
            forked = forked or _BOOTSTRAP.search(f"{frame.get('name')} {full}") is not None
    return lines, own


def own_file(full: str) -> bool:
    """Whether a frame's full file name is the job's own code, not the interpreter's nor an
    installed library's."""
    return bool(full) and not _NOT_OWN.search(full)


def source_lines(
    own: Iterable[tuple[str, str]], cwd: str | None, roots: Iterable[Path], budget: list[int]
) -> dict[str, str]:
    """{"file:line": text} of the own frames whose file could be read: a relative name is
    the process's working directory's, the file must lie under `roots` (not /proc, /sys,
    /dev), only its first SOURCE_READ_MAX bytes are read, and the text is redacted. A file
    missing, unreadable, outside or too short is left out. `budget` counts the files left
    to read in this collection."""
    texts: dict[str, str] = {}
    files: dict[str, list[str] | None] = {}
    for at, full in own:
        number = at.rpartition(":")[2]
        if at in texts or not number.isdigit() or int(number) < 1:
            continue
        path = full if os.path.isabs(full) else os.path.join(cwd or "", full)
        if not os.path.isabs(path):
            continue  # a relative name and no known working directory
        if path not in files:
            if budget[0] <= 0:
                continue
            budget[0] -= 1
            files[path] = _read_source(path, roots)
        lines = files[path]
        if lines is not None and int(number) <= len(lines):
            line = _without_comment(lines[int(number) - 1]).strip()
            if line:
                texts[at] = redact.cut(redact.text(line), SOURCE_LINE_MAX)
    return texts


def _without_comment(line: str) -> str:
    """A source line without its trailing `# comment` (kept whole where it does not tokenize
    alone: inside a bracket or a string that spans lines)."""
    if "#" not in line:
        return line
    try:
        for token in tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline):
            if token.type == tokenize.COMMENT:
                return line.strip()[: token.start[1]]
    except (tokenize.TokenError, SyntaxError):
        pass
    return line


def _read_source(path: str, roots: Iterable[Path]) -> list[str] | None:
    """The complete lines of the first SOURCE_READ_MAX bytes of a confined file, or None."""
    try:
        fd, _ = _fs.open_confined(path, roots)
    except (OSError, _fs.NotRegular):
        return None
    try:
        data = read_at_most(fd, SOURCE_READ_MAX)
    except OSError:
        return None
    finally:
        os.close(fd)
    if b"\0" in data:
        return None  # not text
    lines = data.decode(errors="replace").splitlines()
    if len(data) == SOURCE_READ_MAX and not data.endswith(b"\n"):
        lines = lines[:-1]  # cut inside its last line
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
                [program, "dump", "--json", "--pid", str(pid)], stdin=subprocess.DEVNULL,
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
        lines, own = _lines(text) if proc.returncode == 0 else ([], [])
        note = None if lines else why_not(text, proc.returncode)
        taken[pid] = Taken(tuple(redact.lines(lines)), note and redact.text(note), now,
                           own=tuple(own))  # fmt: skip
    return taken


def _lines(text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The lines of a dump, JSON (with its own frames) or, from a py-spy without --json, text."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return parse_json(text)
    return parse(text), []


def _default_roots() -> list[Path]:
    """The watch roots as the environment sets them; none (nothing is read) if it cannot."""
    try:
        return confine.roots(Settings())
    except Exception:
        return []


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
    roots: Iterable[Path] | None = None,
) -> list[StuckStack]:
    """The folded stacks of every stuck tree; `kept` (per process key) is the memory of this
    episode: a process's stacks are taken once, and forgotten when it is no longer stuck.
    `roots`: where the job's source files may be read (the watch roots; None: the settings'
    from the environment)."""
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
    if roots is None and any(t.own for t in fresh.values()):
        roots = _default_roots()
    budget = [SOURCE_FILES_MAX]
    for p in wanted:
        python_stack = fresh.get(p.pid, Taken((), None, now))
        source = (
            source_lines(python_stack.own, p.cwd, roots or (), budget) if python_stack.own else {}
        )
        kept[p.key] = Taken(python_stack.lines, python_stack.note, python_stack.at,
                            kernels[p.pid], python_stack.own, source)  # fmt: skip
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
            for at, _ in got.own:  # own frames, with their text where it could be read
                entry.source.setdefault(at, got.source.get(at, ""))
                if got.source.get(at):
                    entry.source[at] = got.source[at]
        stacks += sorted(folded.values(), key=lambda s: -len(s.pids))
    return stacks
