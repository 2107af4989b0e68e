"""The process table, read once per collect and shared: what each process is, and which changed."""

import contextlib
import os
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import psutil

from ctxd.collectors import CollectContext
from ctxd.collectors.proc import procfs

# A probe may use a table read up to this long ago: the watcher probes every session in one
# tick, and they share one read of /proc. A snapshot reads its own, which probes then share.
PROBE_TABLE_AGE_S = 1.0
# A fork calls exec within milliseconds; until then it shows its parent's command line.
SETTLED_S = 0.25
# A scan at most once a second also reads again the known processes whose pid %
# REFRESH_EVERY is its turn: a wrapper that calls exec after a while (`exec python serve.py`
# at the end of a script) keeps its pid and /proc inode, and is seen as what it became
# within REFRESH_EVERY such scans. More often, a crowd of 5,000 would cost 150 reads a scan.
REFRESH_EVERY = 32
REFRESH_GAP_S = 1.0
_turns = 0
_last_turn = float("-inf")


@dataclass
class Entry:
    """One line of the process table, shared by every watch of one collect."""

    ppid: int
    name: str
    text: str
    program: str
    start_ticks: int = 0  # clock ticks after boot, as /proc/PID/stat says (psutil's too)
    argv: tuple[str, ...] = ()
    # Whether `text` matches a watch's pattern, by pattern: an entry lives as long as its
    # process (see `scan`), so a crowd of host processes is matched once, not every snapshot.
    matched: dict[str, bool] = field(default_factory=dict)
    # Its working directory as last read, and when (time.monotonic()): see `working_dir`.
    cwd: str | None = None
    cwd_read_at: float = float("-inf")
    # Read while younger than SETTLED_S: it may not have called exec yet (a fork of a shell
    # still shows the shell's command line), so it is read again until it is older.
    young: bool = False

    def working_dir(self, pid: int, max_age_s: float) -> str | None:
        """Its working directory, read at most `max_age_s` ago: a scan of 5,000 processes
        for the workspace's ones costs 5,000 readlinks, and a process seldom changes it.
        None when it is gone or not ours to read."""
        now = time.monotonic()
        if now - self.cwd_read_at > max_age_s:
            try:
                self.cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                self.cwd = None
            self.cwd_read_at = now
        return self.cwd

    @property
    def full_name(self) -> str:
        """The name as psutil gives it: the kernel cuts names at 15 characters, so a cut one
        is completed from the program's file name."""
        if len(self.name) >= 15 and self.program.startswith(self.name):
            return self.program
        return self.name

    def started(self, boot: float) -> float | None:
        """Its start time as psutil's create_time() computes it (the same float), or None."""
        return float(self.start_ticks) / procfs.CLOCK_TICKS + boot if self.start_ticks else None


@dataclass(frozen=True)
class RunTable:
    """The process table of one collection run, shared by the collectors that need it."""

    table: dict[int, "Entry"]
    children: dict[int, list[int]]
    excluded: frozenset[int]  # ctxd and its ancestors (see own_family)
    boot: float  # boot time, as psutil's, for Entry.started


def of_run(ctx: CollectContext) -> RunTable:
    """The process table of this collection run: read once, by the first collector asking."""

    def read() -> RunTable:
        age = PROBE_TABLE_AGE_S if ctx.probe else 0.0
        if ctx.table_since is not None:
            age = max(age, time.monotonic() - ctx.table_since)
        table, children = shared(age)
        return RunTable(table, children, own_family(), psutil.boot_time())

    return ctx.once("process table", read)


@dataclass
class _Scanned:
    """What the last scan saw: the listing of /proc it compares the next one with."""

    listing: dict[int, int] = field(default_factory=dict)  # pid -> inode of /proc/<pid>
    table: dict[int, Entry] = field(default_factory=dict)
    children: dict[int, list[int]] = field(default_factory=dict)
    young: set[int] = field(default_factory=set)
    # One more than the scan this one was made from, and the pids whose entries differ.
    generation: int = 0
    changed: frozenset[int] = frozenset()


_last = _Scanned()
_cache_lock = threading.RLock()  # shared() holds it around scan()
# The latest table with its children map, and when it was read (time.monotonic()).
_latest: tuple[float, dict[int, Entry], dict[int, list[int]]] = (float("-inf"), {}, {})


def shared(max_age_s: float) -> tuple[dict[int, Entry], dict[int, list[int]]]:
    """(table, children map) read at most `max_age_s` ago, or read now; both read-only.

    Probes of many sessions in one watcher tick share one read of /proc.
    """
    global _latest
    stamp, table, children = _latest
    if time.monotonic() - stamp <= max_age_s:
        return table, children
    started = time.monotonic()
    with _cache_lock:
        table = scan()
        children = _last.children  # the scan's own, made with the table it returned
    _latest = (started, table, children)
    return table, children


def outdated(before: float) -> None:
    """The shared table (and sockets) is not to be used if read before `before` (monotonic): a
    process ended since, as the kernel said, and a probe must not see it alive."""
    global _latest
    with _cache_lock:
        if _latest[0] < before:
            _latest = (float("-inf"), {}, {})
    procfs.sockets_outdated(before)


_family: tuple[int, frozenset[int]] = (0, frozenset())


def own_family() -> frozenset[int]:
    """ctxd's own pid and its ancestors (the shell, pytest or harness that started it), whose
    command lines echo the patterns being looked for; asked again when the parent changes."""
    global _family
    parent, pids = _family
    if parent == os.getppid() and pids:
        return pids
    parent, found = os.getppid(), {os.getpid()}
    with contextlib.suppress(psutil.Error):
        found.update(p.pid for p in psutil.Process().parents())
    _family = (parent, frozenset(found))
    return _family[1]


def scan() -> dict[int, Entry]:
    """The process table, reading only processes not seen before; read-only.

    A /proc/<pid> directory gets a fresh inode number for every new process, and scandir
    reports it without a system call per entry, so (pid, inode) tells a known process from a
    new one — a reused pid included — and only new ones cost a read of stat and cmdline. The
    listing is compared with the last one as a whole: with 5,000 processes a loop over it in
    Python cost three times the listing itself.
    """
    global _last, _turns, _last_turn
    with _cache_lock:
        with os.scandir("/proc") as entries:
            listing = {int(e.name): e.inode() for e in entries if e.name.isdigit()}
        last, now_ticks = _last, _uptime() * procfs.CLOCK_TICKS
        if listing == last.listing:
            gone: set[int] = set()
            born: set[int] = set()
        else:
            gone = {pid for pid, _ in last.listing.items() - listing.items()}
            born = {pid for pid, _ in listing.items() - last.listing.items()}
        again = set(last.young)  # not settled when read: it may not have called exec yet
        for pid in gone:  # a parent that died leaves its children re-parented
            again.update(last.children.get(pid, ()))
        turned: list[int] = []
        if time.monotonic() - _last_turn >= REFRESH_GAP_S:
            _turns, _last_turn = _turns + 1, time.monotonic()
            turned = [pid for pid in last.table if pid % REFRESH_EVERY == _turns % REFRESH_EVERY]
        if not (gone or born or again or turned):
            return last.table
        table, young = dict(last.table), set()

        def put(pid: int, old: Entry | None) -> None:
            entry = _read(pid, now_ticks)
            if entry is None:  # gone since the listing: the next scan tries it as new
                table.pop(pid, None)
                listing.pop(pid, None)
                return
            if old is not None:
                _carry_over(old, entry)
            table[pid] = entry
            if entry.young:
                young.add(pid)

        for pid in gone:
            table.pop(pid, None)
        for pid in born:
            put(pid, None)
        for pid in (again - born).intersection(table):
            put(pid, table[pid])
        for pid in turned:
            if pid in table and pid not in born and not _same_command(pid, table[pid]):
                put(pid, table[pid])
        changed = frozenset(gone | born | again | set(turned))
        generation = last.generation + 1
        _last = _Scanned(listing, table, children_map(table), young, generation, changed)
        return table


def _same_command(pid: int, entry: Entry) -> bool:
    """Whether a known process still has the command line it was read with (exec changes it):
    one read, where a full read of the process is two."""
    try:
        raw = procfs.read_proc(f"/proc/{pid}/cmdline", 1 << 20)
    except OSError:
        return False
    return _argv(raw) == entry.argv


def _carry_over(old: Entry, new: Entry) -> None:
    """What a process read again keeps: its cwd reading, and its pattern matches while its
    command line is the same."""
    new.cwd, new.cwd_read_at = old.cwd, old.cwd_read_at
    if new.text == old.text:
        new.matched = old.matched


def _uptime() -> float:
    try:
        return float(procfs.read_proc("/proc/uptime").split()[0])
    except (OSError, ValueError, IndexError):
        return float("inf")  # unknown: every process counts as settled, as before


def _read(pid: int, now_ticks: float = float("inf")) -> Entry | None:
    try:
        stat = procfs.read_proc(f"/proc/{pid}/stat")
        raw = procfs.read_proc(f"/proc/{pid}/cmdline", 1 << 20)
    except OSError:
        return None
    close = stat.rfind(b")")
    name = stat[stat.find(b"(") + 1 : close].decode(errors="replace")
    fields = stat[close + 2 :].split()
    ppid = int(fields[1])
    start_ticks = int(fields[19]) if len(fields) > 19 else 0
    argv = _argv(raw)
    # Zombies and kernel threads have no command line; their name is all there is to match.
    text = " ".join(argv) or name
    program = os.path.basename(argv[0]) if argv else ""
    young = now_ticks - start_ticks < SETTLED_S * procfs.CLOCK_TICKS
    return Entry(ppid=ppid, name=name, text=text, program=program, start_ticks=start_ticks,
                 argv=argv, young=young)  # fmt: skip


def _argv(raw: bytes) -> tuple[str, ...]:
    """A command line as the table keeps it (and matches it): its NUL-separated words."""
    return tuple(a.decode(errors="replace") for a in raw.split(b"\0") if a)


def children_map(table: dict[int, Entry]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for pid, entry in table.items():
        children.setdefault(entry.ppid, []).append(pid)
    return children


# The pids for which a test holds in the table of the scan it was last asked of, by key and
# generation (no table is kept for them). The next table is most often the same one (the
# collectors of one run, or nothing changed), or the next scan's with a few processes
# changed: then only those are tested again. A test over 5,000 entries costs 2-7 ms.
_kept: dict[Hashable, tuple[int, float, frozenset[int]]] = {}
_KEPT_MAX = 256


def kept_matches(
    key: Hashable,
    table: dict[int, Entry],
    test: Callable[[int, Entry], bool],
    whole_after_s: float = float("inf"),
) -> frozenset[int]:
    """The pids of `table` for which `test(pid, entry)` holds, tested again only where the
    latest scan changed something, and in whole once the last whole pass is `whole_after_s`
    old (for a test that reads what changes unseen, such as a working directory)."""
    last = _last
    if table is not last.table:  # not the latest scan's (a caller's own table): no memo
        return frozenset(pid for pid, entry in table.items() if test(pid, entry))
    now = time.monotonic()
    seen, whole_at, found = _kept.get(key, (-1, float("-inf"), frozenset()))
    if now - whole_at > whole_after_s:
        seen = -1  # kept too long: tested in whole
    if seen == last.generation:
        return found
    if seen == last.generation - 1:
        changed = last.changed
        found = (found - changed) | {p for p in changed if p in table and test(p, table[p])}
    else:
        found = frozenset(pid for pid, entry in table.items() if test(pid, entry))
        whole_at = now
    if len(_kept) >= _KEPT_MAX:
        _kept.clear()
    _kept[key] = (last.generation, whole_at, found)
    return found
