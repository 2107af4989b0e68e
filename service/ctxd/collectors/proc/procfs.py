"""Reads /proc for what psutil does cheaply not: stat lines, descriptors, sockets, wait points."""

import contextlib
import functools
import itertools
import os
import platform
import re
import socket
import struct
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from stat import S_ISFIFO
from typing import NamedTuple

import psutil

from ctxd.collectors import CollectContext

PROC = Path("/proc")
_LISTEN = "0A"
_SOCKET = re.compile(r"^socket:\[(\d+)\]$")


class Listening(dict[int, int]):
    """{socket inode: port} of listening TCP sockets, and `bound`: {inode: the address it is
    bound to, as a person writes it ("0.0.0.0", "::", "127.0.0.1")}."""

    def __init__(self) -> None:
        super().__init__()
        self.bound: dict[int, str] = {}

    def add(self, inode: int, port: int, address: bytes) -> None:
        self[inode] = port
        with contextlib.suppress(ValueError):
            family = socket.AF_INET if len(address) == 4 else socket.AF_INET6
            self.bound[inode] = socket.inet_ntop(family, address)

    def update_from(self, other: "Listening") -> None:
        self.update(other)
        self.bound.update(other.bound)


def parse_net_tcp(text: str) -> Listening:
    """The LISTEN rows of a /proc/net/tcp or tcp6 table (its addresses: 32-bit words in the
    host's order, hex)."""
    found = Listening()
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != _LISTEN:
            continue
        try:
            address, _, port = fields[1].rpartition(":")
            raw = bytes.fromhex(address)
            if sys.byteorder == "little":
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.add(int(fields[9]), int(port, 16), raw)
        except ValueError:
            continue
    return found


PROBE_SOCKETS_AGE_S = 1.0  # the probes of one watcher tick share one read of the LISTEN sockets
# The latest read of the LISTEN sockets, and when it was made (time.monotonic()).
_listening: tuple[float, Listening] = (float("-inf"), Listening())


def listening_of_run(ctx: CollectContext) -> Listening:
    """`listening_inodes()` of this collection run: asked once, shared by its collectors; a
    probe's is a read at most PROBE_SOCKETS_AGE_S old, so the sessions of one watcher tick,
    whatever they watch, cost one look at the machine's sockets. Read-only."""

    return ctx.once(
        "listening sockets", lambda: listening_shared(PROBE_SOCKETS_AGE_S if ctx.probe else 0.0)
    )


def listening_shared(max_age_s: float) -> Listening:
    """`listening_inodes()` read at most `max_age_s` ago, or read now; read-only."""
    global _listening
    stamp, table = _listening
    if time.monotonic() - stamp <= max_age_s:
        return table
    started = time.monotonic()
    table = listening_inodes()
    _listening = (started, table)
    return table


def sockets_outdated(before: float) -> None:
    """The shared read of the LISTEN sockets is not to be used if made before `before`: a
    process ended since, as the kernel said, and its port may have closed with it."""
    global _listening
    if _listening[0] < before:
        _listening = (float("-inf"), Listening())


def listening_inodes(proc: Path = PROC) -> Listening:
    """Every listening TCP socket in ctxd's network namespace, by inode.

    Asked of the kernel over netlink (sock_diag, what `ss` uses) for LISTEN sockets only:
    reading /proc/net/tcp walks every bucket of the connection hash, ~5 ms a table even
    when it lists a few sockets. /proc/net is the fallback where netlink is refused.
    """
    if proc == PROC:
        try:
            found = _diag_listening(socket.AF_INET)
            found.update_from(_diag_listening(socket.AF_INET6))
            return found
        except OSError:
            pass
    found = Listening()
    for table in ("tcp", "tcp6"):
        try:
            found.update_from(parse_net_tcp((proc / "net" / table).read_text()))
        except OSError:
            continue
    return found


_SOCK_DIAG, _BY_FAMILY, _DUMP_REQUEST, _DONE, _ERROR = 4, 20, 0x301, 3, 2
_TCP_LISTEN = 10
_NLMSG = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
# inet_diag_msg: family, state, timer, retrans, then the socket id (source port first,
# network order, at offset 4; the source address, 16 bytes, at 8) ... and the inode at 68
_DIAG_PORT, _DIAG_INODE = struct.Struct(">H"), struct.Struct("=I")


def _diag_listening(family: int) -> Listening:
    """The LISTEN TCP sockets of one address family, from sock_diag."""
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 1 << _TCP_LISTEN)
    request += bytes(48)  # inet_diag_sockid: any address, any port
    message = _NLMSG.pack(_NLMSG.size + len(request), _BY_FAMILY, _DUMP_REQUEST, 1, 0) + request
    found = Listening()
    size = 4 if family == socket.AF_INET else 16
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _SOCK_DIAG) as sock:
        sock.settimeout(1.0)
        sock.sendto(message, (0, 0))
        while True:
            data = sock.recv(1 << 16)
            offset = 0
            while offset + _NLMSG.size <= len(data):
                length, kind = _NLMSG.unpack_from(data, offset)[:2]
                if kind == _DONE:
                    return found
                if kind == _ERROR or length < _NLMSG.size:
                    raise OSError("sock_diag refused the request")
                body = offset + _NLMSG.size
                if length >= _NLMSG.size + 72 and data[body + 1] == _TCP_LISTEN:
                    port = _DIAG_PORT.unpack_from(data, body + 4)[0]
                    address = data[body + 8 : body + 8 + size]  # the source address
                    found.add(_DIAG_INODE.unpack_from(data, body + 68)[0], port, address)
                offset += (length + 3) & ~3
            if not data:
                raise OSError("sock_diag closed before the end of the dump")


def descriptors(pid: int, proc: Path = PROC) -> tuple[int, set[int]]:
    """(number of open descriptors, inodes of its sockets); raises PermissionError, OSError."""
    folder = f"{proc}/{pid}/fd"  # strings, not Paths: this runs for every watched process
    names = os.listdir(folder)
    sockets: set[int] = set()
    for name in names:
        try:
            match = _SOCKET.match(os.readlink(f"{folder}/{name}"))
        except OSError:
            continue  # closed between listdir and readlink
        if match:
            sockets.add(int(match.group(1)))
    return len(names), sockets


_PAGE = os.sysconf("SC_PAGE_SIZE")


def read_proc(path: str, limit: int = 1 << 16) -> bytes:
    """A /proc file's bytes (up to `limit`) without a file object: open() builds three Python
    objects a call, and a watched crowd of 300 processes reads five files each. Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, limit)
        # less than a page is all of it; a long command line may come a page at a time
        while len(data) >= 4096 and len(data) < limit:
            more = os.read(fd, limit - len(data))
            if not more:
                break
            data += more
        return data
    finally:
        os.close(fd)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@functools.cache
def boot_skew() -> float:
    """The fraction of a second the kernel's boot time as /proc/stat gives it (whole seconds:
    what psutil's create_time adds a process's start ticks to) lies before the true boot, so
    that a process's start read from it is up to a second early beside a clock reading (a
    prompt's, a command's). Keys keep psutil's time; what a dump shows adds this. 0 where it
    cannot be known (a time namespace, a clock stepped since boot reads outside [0, 1))."""
    try:
        skew = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME) - psutil.boot_time()
    except (OSError, AttributeError):
        return 0.0
    return skew if 0.0 <= skew < 1.0 else 0.0


def true_start(started_at: datetime, host: str | None = None) -> datetime:
    """A process's start as a clock would have read it (see boot_skew); a peer's as it came."""
    return started_at if host else started_at + timedelta(seconds=boot_skew())


_ASLEEP = frozenset("SDTt")


class Stat(NamedTuple):
    """What one read of /proc/PID/stat gives a watched row."""

    name: str  # as the kernel keeps it: cut at 15 characters
    letter: str  # its state: R, S, D, Z, ...
    ppid: int
    threads: int
    cpu_ticks: int  # user and system time, in clock ticks (psutil's cpu_times, times CLK_TCK)
    start_ticks: int  # clock ticks after boot (psutil's create_time, less the boot time)


def stat_fields(pid: int, proc: Path = PROC) -> Stat:
    """One read of /proc/PID/stat.

    psutil's name, status, ppid, num_threads and cpu_times take four reads and a second handle
    (ppid checks the pid was not reused); a watched row asks for them at every snapshot.
    Raises OSError.
    """
    data = read_proc(f"{proc}/{pid}/stat")
    close = data.rfind(b")")  # the name may hold spaces and parentheses
    fields = data[close + 2 :].split()
    name = os.fsdecode(data[data.find(b"(") + 1 : close])
    ticks = int(fields[11]) + int(fields[12])
    return Stat(name, fields[0].decode(), int(fields[1]), int(fields[17]), ticks, int(fields[19]))


def sleeps_alone(stat: Stat) -> bool:
    """Asleep with one thread: then `runs` tells whether it ran since (it counts the first
    thread only), and a process that has not run has changed nothing only it can change."""
    return stat.threads == 1 and stat.letter in _ASLEEP


def runs(pid: int, proc: Path = PROC) -> bytes | None:
    """The kernel's count of a task's runs, /proc/PID/schedstat (time run, time waited, times
    run): the same line twice means it did not run between them. None when it is gone."""
    try:
        return read_proc(f"{proc}/{pid}/schedstat")
    except OSError:
        return None


def memory(pid: int, proc: Path = PROC) -> tuple[int, int]:
    """(rss, vms) in bytes from /proc/PID/statm, as psutil's memory_info (stat's rss field is
    another count, off by a few pages); raises OSError."""
    pages = read_proc(f"{proc}/{pid}/statm").split()
    return int(pages[1]) * _PAGE, int(pages[0]) * _PAGE


def io_bytes(pid: int, proc: Path = PROC) -> tuple[int, int]:
    """(read_bytes, write_bytes) from /proc/PID/io, as psutil's io_counters; raises OSError
    (PermissionError without ptrace rights over the process)."""
    found = {}
    for line in read_proc(f"{proc}/{pid}/io").splitlines():
        name, _, value = line.partition(b":")
        found[name] = value
    return int(found[b"read_bytes"]), int(found[b"write_bytes"])


def cmdline(pid: int, proc: Path = PROC) -> list[str]:
    """The command line as psutil parses it (a retitled process may use spaces); raises OSError."""
    data = os.fsdecode(read_proc(f"{proc}/{pid}/cmdline", 1 << 20))
    if not data:
        return []
    sep = "\x00" if data.endswith("\x00") else " "
    data = data.removesuffix(sep)
    argv = data.split(sep)
    return data.split(" ") if sep == "\x00" and len(argv) == 1 and " " in data else argv


def exe(pid: int, proc: Path = PROC) -> str | None:
    """The executable as it is now: psutil keeps the one it first read for a handle's whole
    life, so a `bash -c 'exec python3 …'` stayed `/usr/bin/bash`. None where there is none to
    read (a zombie, a kernel thread); raises PermissionError where it is refused and
    psutil.NoSuchProcess when the process is gone."""
    try:
        path = os.readlink(f"{proc}/{pid}/exe")
    except FileNotFoundError:
        if os.path.exists(f"{proc}/{pid}"):
            return None
        raise psutil.NoSuchProcess(pid) from None
    # a replaced binary reads "PATH (deleted)": the path is still what was run
    return path.removesuffix(" (deleted)") if not os.path.exists(path) else path


# The calls a blocked server or worker waits in, by their x86_64 numbers (/proc/PID/syscall).
_SYSCALLS_X86_64 = {
    0: "read", 1: "write", 2: "open", 7: "poll", 17: "pread64", 23: "select", 34: "pause",
    35: "nanosleep", 42: "connect", 43: "accept", 44: "sendto", 45: "recvfrom", 46: "sendmsg",
    47: "recvmsg", 61: "wait4", 72: "fcntl", 73: "flock", 128: "rt_sigtimedwait",
    130: "rt_sigsuspend", 202: "futex", 230: "clock_nanosleep", 232: "epoll_wait",
    257: "openat", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait", 288: "accept4",
    437: "openat2", 441: "epoll_pwait2",
}  # fmt: skip
_X86_64 = platform.machine() == "x86_64"  # asked once: platform.machine() costs ~20 us a call


# The blocking calls whose first argument is a descriptor (what it reads, writes, locks or
# accepts on), and those that open a path (its pointer: open's first argument, openat's second).
_ON_DESCRIPTOR = {0, 1, 17, 19, 20, 42, 43, 44, 45, 46, 47, 72, 73, 288}
_OPENS_PATH = {2: 1, 257: 2, 437: 2}
PATH_READ_MAX = 4096


def waiting(pid: int, proc: Path = PROC) -> tuple[str | None, str | None]:
    """(`waiting_point`, `blocked_on`) of a sleeping process, its /proc/PID/syscall read once
    for both: a crowd of sleeping workers is read at every snapshot."""
    fields = _syscall(pid, proc)
    point = _point(pid, fields, proc)
    return point, (_target(pid, fields, proc) if point else None)


def fifo_written_at(waiting: str | None, path: str | None) -> datetime | None:
    """When the FIFO a process waits to open (`waiting` names the kernel's FIFO open) was last
    written, or made where nothing wrote it since: its mtime. A FIFO older than the run that
    opens it was left by an earlier one. Stat'ed only for that wait: the open already found
    the file, so its metadata is at hand (another path, on a stalled mount, could block)."""
    if not path or not waiting or not ("wait_for_partner" in waiting or "fifo" in waiting):
        return None
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return datetime.fromtimestamp(st.st_mtime, UTC) if S_ISFIFO(st.st_mode) else None


def blocked_on(pid: int, proc: Path = PROC) -> str | None:
    """What a process blocked in a call waits on, when the call names it: the file or socket
    its descriptor is (`read` on `pipe:[81234]`), or the path it is opening (`openat` of
    `/data/shard-3.bin`, a FIFO: it waits for a writer; on a stalled mount, for the server),
    read from /proc/PID/syscall and, for a path, the process's own memory (root's, or the
    owner's with ptrace rights); the kernel stack says what kind of wait it is (`fifo_open`).
    None when it names nothing or cannot be read."""
    return _target(pid, _syscall(pid, proc), proc)


def waiting_point(pid: int, proc: Path = PROC) -> str | None:
    """Where a sleeping process waits, the kernel's view: "futex_do_wait (futex)".

    /proc/PID/wchan names the kernel function; /proc/PID/syscall (readable with ptrace
    rights) the call it sits in. None when it runs or nothing can be read. The call is read
    first: the kernel answers it only once the process is off its CPU, and wchan says "0" for
    one caught still going to sleep (a worker then folded apart from its alike peers).
    """
    return _point(pid, _syscall(pid, proc), proc)


def _syscall(pid: int, proc: Path) -> list[str]:
    """/proc/PID/syscall's fields (the call's number, its arguments, …); [] when unread."""
    try:
        return read_proc(f"{proc}/{pid}/syscall").decode(errors="replace").split()
    except OSError:
        return []


def _point(pid: int, fields: list[str], proc: Path) -> str | None:
    call = ""
    if fields and fields[0].isdigit():
        number = int(fields[0])
        known = _SYSCALLS_X86_64.get(number) if _X86_64 else None
        call = known or f"syscall {number}"
    try:
        wchan = read_proc(f"{proc}/{pid}/wchan").decode(errors="replace").strip()
    except OSError:
        wchan = ""
    if wchan in ("", "0"):
        return call or None
    return f"{wchan} ({call})" if call else wchan


def _target(pid: int, fields: list[str], proc: Path) -> str | None:
    if not _X86_64:
        return None
    try:
        number, args = int(fields[0]), [int(a, 16) for a in fields[1:7]]
        if number in _ON_DESCRIPTOR:
            return os.readlink(f"{proc}/{pid}/fd/{args[0]}")
        if number not in _OPENS_PATH:
            return None
        with open(f"{proc}/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(args[_OPENS_PATH[number] - 1])
            raw = mem.read(PATH_READ_MAX).split(b"\0", 1)[0]
    except (OSError, ValueError, IndexError, OverflowError):
        return None
    path = raw.decode(errors="replace")
    if path and not path.startswith("/"):  # never stat'ed: on a stalled mount, that blocks too
        with contextlib.suppress(OSError):
            path = os.path.normpath(os.path.join(os.readlink(f"{proc}/{pid}/cwd"), path))
    return path or None


def socket_owner(
    inodes: set[int], likely: list[int], budget_s: float = 0.5, proc: Path = PROC, walk: bool = True
) -> int | None:
    """The pid holding one of these socket inodes: the likely pids first, then (when `walk`)
    every process.

    The full walk is what `ss -p` does; it stops at the first hit or when the budget is spent.
    """
    deadline = time.monotonic() + budget_s
    others = (int(name) for name in os.listdir(proc) if name.isdigit()) if walk else iter(())
    seen: set[int] = set()
    for pid in itertools.chain(likely, others):
        if pid in seen:
            continue
        seen.add(pid)
        if time.monotonic() > deadline:
            return None
        try:
            if descriptors(pid, proc)[1] & inodes:
                return pid
        except OSError:
            continue
    return None
