"""Which process holds a file: a log's writer (/proc/PID/fd, fdinfo), a library's mappers (maps),
a wheel's package in a running interpreter's own site-packages.

Watched processes are looked at first; a full walk of /proc (what `lsof` does) follows only
for a log whose writer is not among them, within a time budget.
"""

import contextlib
import itertools
import os
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import psutil

from ctxd import redact
from ctxd.collectors import CollectContext
from ctxd.collectors.proc import procfs, procpackages, procselect, proctree
from ctxd.collectors.proc.argv import is_python
from ctxd.models import ArtifactInfo, LogInfo, ProcessWatch, Watch

O_ACCMODE = 0o3
O_APPEND = 0o2000
WALK_BUDGET_S = 0.3
MAPS_BYTES_MAX = 4 * 1024**2


@dataclass(frozen=True)
class Descriptor:
    """One open descriptor of a process: its file, open flags and offset (fdinfo)."""

    pid: int
    fd: int
    target: str
    flags: int
    pos: int

    @property
    def writes(self) -> bool:
        return self.flags & O_ACCMODE != 0

    @property
    def appends(self) -> bool:
        return bool(self.flags & O_APPEND)


def descriptor(pid: int, fd: int) -> Descriptor | None:
    """Descriptor `fd` of `pid`, or None when it is closed, gone or not permitted."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        info = procfs.read_proc(f"/proc/{pid}/fdinfo/{fd}").decode(errors="replace")
        fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        flags = int(fields.get("flags", "0").strip() or "0", 8)
        pos = int(fields.get("pos", "0").strip() or "0")
    except (OSError, ValueError):
        return None
    return Descriptor(pid, fd, target.removesuffix(" (deleted)"), flags, pos)


def run_table(watches: list[Watch], ctx: CollectContext) -> proctree.RunTable | None:
    """This run's process table, when the session watches processes (else nothing is read)."""
    if any(isinstance(w.spec, ProcessWatch) for w in watches):
        return proctree.of_run(ctx)
    return None


def watched_trees(watches: list[Watch], run: proctree.RunTable | None) -> dict[int, int]:
    """The pids the session's process watches select now, each with its tree's root (a root
    with itself), each tree root first."""
    if run is None:
        return {}
    found: dict[int, int] = {}
    for watch in watches:
        if isinstance(watch.spec, ProcessWatch):
            rows = procselect.candidates(watch.spec, run.table, run.excluded, run.children)
            for pid, root in rows:
                found.setdefault(pid, root)
    return found


def _writer_in(pid: int, wanted: set[str]) -> dict[str, Descriptor]:
    """The descriptors of pid that write one of `wanted`, stdout and stderr first."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return {}
    found: dict[str, Descriptor] = {}
    for name in sorted(names, key=int):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}").removesuffix(" (deleted)")
        except OSError:
            continue
        if target in wanted and target not in found:
            d = descriptor(pid, int(name))
            if d is not None and d.writes:
                found[target] = d
    return found


def writers(paths: set[str], likely: list[int], walk: bool) -> dict[str, Descriptor]:
    """{path: the first descriptor writing it}: `likely` pids first, then (when `walk`)
    every process until all are found or the budget is spent."""
    found: dict[str, Descriptor] = {}
    deadline = time.monotonic() + WALK_BUDGET_S
    others = (int(n) for n in os.listdir("/proc") if n.isdigit()) if walk else iter(())
    seen: set[int] = {os.getpid()}
    for pid in itertools.chain(likely, others):
        if len(found) == len(paths) or time.monotonic() > deadline:
            break
        if pid in seen:
            continue
        seen.add(pid)
        for path, d in _writer_in(pid, paths - set(found)).items():
            found[path] = d
    return found


def streams(pid: int, path: str) -> str:
    """Which of pid's descriptors write `path`, in words: "its stdout and stderr", "fd 5"."""
    names = {1: "stdout", 2: "stderr"}
    hits = []
    for fd in (1, 2):
        d = descriptor(pid, fd)
        if d is not None and d.target == path and d.writes:
            hits.append(names[fd])
    return "its " + " and ".join(hits) if hits else ""


def mapped(path: str, pids: list[int]) -> tuple[list[int], dict[int, str]]:
    """(pids that map `path`, {pid: another file of the same name it maps instead})."""
    name = os.path.basename(path)
    using: list[int] = []
    other: dict[int, str] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", errors="replace") as handle:
                text = handle.read(MAPS_BYTES_MAX)
        except OSError:
            continue
        rows = (line.split(None, 5) for line in text.splitlines())
        files = {r[5].strip().removesuffix(" (deleted)") for r in rows if len(r) == 6}
        if path in files:
            using.append(pid)
        else:
            same = sorted(f for f in files if os.path.basename(f) == name)
            if same:
                other[pid] = same[0]
    return using, other


@dataclass
class WriterMemory:
    """Kept between snapshots, so the walk of every process is the exception."""

    # logs no process was found writing, as they were then: not walked for until changed
    unwritten: dict[str, tuple] = field(default_factory=dict)
    # the last writer of each log (found by a walk too): asked first next time
    last: dict[str, int] = field(default_factory=dict)


def attach_writers(
    items: list[LogInfo], watches: list[Watch], memory: WriterMemory, ctx: CollectContext
) -> None:
    """Fill each log's writer (or, when none, the newest watched root it predates).

    The last writers and the watched processes are asked first; every process only for a
    log none of them writes and that changed since a walk last found no writer: a walk costs
    about a tenth of a second per thousand processes.
    """
    if not items:
        return
    run = run_table(watches, ctx)
    trees = watched_trees(watches, run)
    likely = list(trees)
    states = {i.path: (i.inode, i.size, i.modified_at) for i in items}
    found = writers(set(states), [*memory.last.values(), *likely], walk=False)
    missing = {p for p, state in states.items()
               if p not in found and memory.unwritten.get(p) != state}  # fmt: skip
    if missing:
        found.update(writers(missing, [], walk=True))
    memory.unwritten = {p: states[p] for p in states if p not in found
                        and (p in missing or p in memory.unwritten)}  # fmt: skip
    memory.last = {p: d.pid for p, d in found.items()}
    # a worker started after its launcher is no newer launch (it shares its command line)
    newest = _newest_root([pid for pid, root in trees.items() if pid == root], run)
    for info in items:
        d = found.get(info.path)
        if d is None:
            if newest is not None:
                info.newest_root_pid, info.newest_root_started_at = newest
            continue
        known = _name_and_start(d.pid, run)
        if known is None:
            continue
        name, created = known
        with contextlib.suppress(psutil.Error):  # read now: the table's may predate its exec
            name = psutil.Process(d.pid).name()  # (a `bash -c '… > log &'` that became python3)
        info.writer_pid, info.writer_name = d.pid, redact.text(name)
        info.writer_started_at = datetime.fromtimestamp(created, UTC)
        info.writer_streams = streams(d.pid, info.path) or f"its descriptor {d.fd}"
        info.writer_appends = d.appends
        if not d.appends:
            info.written_since_start = min(d.pos, info.size)


def _name_and_start(pid: int, run: proctree.RunTable | None) -> tuple[str, float] | None:
    """(name, start time) as psutil gives them: from this run's table, else (a process newer
    than the table, found by a walk) from psutil; None when it is gone."""
    entry = run.table.get(pid) if run is not None else None
    started = entry.started(run.boot) if entry is not None and run is not None else None
    if entry is not None and started is not None:
        return entry.full_name, started
    try:
        proc = psutil.Process(pid)
        return proc.name(), proc.create_time()
    except psutil.Error:
        return None


def _newest_root(pids: list[int], run: proctree.RunTable | None) -> tuple[int, datetime] | None:
    """The most recently started of the watched processes (a relaunch makes older logs stale)."""
    newest: tuple[int, float] | None = None
    for pid in pids:
        known = _name_and_start(pid, run)
        if known is not None and (newest is None or known[1] > newest[1]):
            newest = (pid, known[1])
    return (newest[0], datetime.fromtimestamp(newest[1], UTC)) if newest else None


_LIBRARY = re.compile(r"\.so(\.\d+)*$")
USERS_SHOWN = 8


def attach_users(items: list[ArtifactInfo], watches: list[Watch], ctx: CollectContext) -> None:
    """For a watched shared library or wheel, whether the watched processes use it."""
    libraries = [i for i in items if i.type == "file" and _LIBRARY.search(i.path)]
    wheels = [i for i in items if i.dist is not None and i.dist.kind == "wheel"]
    if not libraries and not wheels:
        return
    pids = list(watched_trees(watches, run_table(watches, ctx)))
    if not pids:
        return
    for info in libraries:
        info.in_use = _library_use(info.path, pids)
    roots = _python_roots(pids)
    for info in wheels:
        if info.dist is not None and roots:
            info.in_use = _wheel_use(info.dist.name, info.dist.version, roots)


def _library_use(path: str, pids: list[int]) -> str:
    using, other = mapped(os.path.realpath(path), pids)
    if using:
        shown = ", ".join(map(str, using[:USERS_SHOWN]))
        more = f" and {len(using) - USERS_SHOWN} more" if len(using) > USERS_SHOWN else ""
        return f"mapped by the watched pid{'s' if len(using) > 1 else ''} {shown}{more}"
    if other:
        pid, instead = next(iter(other.items()))
        return redact.text(f"not this file: the watched pid {pid} maps another copy, {instead}")
    return f"not mapped by any of the {len(pids)} watched processes"


def _python_roots(pids: list[int]) -> list[psutil.Process]:
    """The watched Python processes whose parent is not watched (at most four)."""
    chosen = set(pids)
    roots = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.ppid() in chosen or not is_python(proc.exe()):
                continue
        except psutil.Error:
            continue
        roots.append(proc)
        if len(roots) == 4:
            break
    return roots


def _wheel_use(name: str, version: str, roots: list[psutil.Process]) -> str | None:
    """The wheel's version against what the running Python imports from its own site dirs."""
    for proc in roots:
        try:
            with proc.oneshot():
                argv, exe, cwd = proc.cmdline(), proc.exe(), proc.cwd()
                environ = proc.environ()
        except psutil.Error:
            continue
        dirs = procpackages.site_dirs(argv[0] if argv else "", exe, environ, cwd,
                                       root=f"/proc/{proc.pid}/root")  # fmt: skip
        installed = procpackages.package_versions(dirs, [name])[name]
        if installed == "not installed":
            return f"the watched pid {proc.pid} has no {name} in its site-packages"
        verdict = "the same version" if installed == version else f"not this wheel's {version}"
        return f"the watched pid {proc.pid} imports {name} {installed}: {verdict}"
    return None
