"""Which process holds a file: a log's writer (/proc/PID/fd, fdinfo), a library's mappers (maps).

Watched processes are looked at first; a full walk of /proc (what `lsof` does) follows only
for a log whose writer is not among them, within a time budget.
"""

import contextlib
import itertools
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import psutil

from service import redact
from service.collectors import _proctree
from service.models import LogInfo, ProcessWatch, Watch

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
        with open(f"/proc/{pid}/fdinfo/{fd}") as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
        flags = int(fields.get("flags", "0").strip() or "0", 8)
        pos = int(fields.get("pos", "0").strip() or "0")
    except (OSError, ValueError):
        return None
    return Descriptor(pid, fd, target.removesuffix(" (deleted)"), flags, pos)


def watched_pids(watches: list[Watch]) -> list[int]:
    """The pids the session's process watches select now, each tree root first."""
    specs = [w.spec for w in watches if isinstance(w.spec, ProcessWatch)]
    if not specs:
        return []
    table = _proctree.scan()
    children = _proctree.children_map(table)
    excluded = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        excluded.update(p.pid for p in psutil.Process().parents())
    found: list[int] = []
    for spec in specs:
        found += [pid for pid, _ in _proctree.candidates(spec, table, excluded, children)]
    return list(dict.fromkeys(found))


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


def attach_writers(items: list[LogInfo], watches: list[Watch]) -> None:
    """Fill each log's writer (or, when none, the newest watched root it predates)."""
    if not items:
        return
    likely = watched_pids(watches)
    found = writers({i.path for i in items}, likely, walk=True)
    newest = _newest_root(likely)
    for info in items:
        d = found.get(info.path)
        if d is None:
            if newest is not None:
                info.newest_root_pid, info.newest_root_started_at = newest
            continue
        try:
            proc = psutil.Process(d.pid)
            name, created = proc.name(), proc.create_time()
        except psutil.Error:
            continue
        info.writer_pid, info.writer_name = d.pid, redact.text(name)
        info.writer_started_at = datetime.fromtimestamp(created, UTC)
        info.writer_streams = streams(d.pid, info.path) or f"its descriptor {d.fd}"
        info.writer_appends = d.appends
        if not d.appends:
            info.written_since_start = min(d.pos, info.size)


def _newest_root(pids: list[int]) -> tuple[int, datetime] | None:
    """The most recently started of the watched processes (a relaunch makes older logs stale)."""
    newest: tuple[int, float] | None = None
    for pid in pids:
        try:
            created = psutil.Process(pid).create_time()
        except psutil.Error:
            continue
        if newest is None or created > newest[1]:
            newest = (pid, created)
    return (newest[0], datetime.fromtimestamp(newest[1], UTC)) if newest else None
