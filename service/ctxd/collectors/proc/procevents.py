"""Exits as the kernel tells them: their statuses from its process events connector
(netlink), their moments from the pidfds the exits thread follows.

A pidfd says that a process ended, not how: only its parent may wait for it, and a launch
the agent sent to the background is not ctxd's child. The kernel's process events connector
(NETLINK_CONNECTOR, CN_IDX_PROC) reports every exit on the machine with its wait status, to
a listener with CAP_NET_ADMIN (root, or a service given that capability). Where ctxd may
listen, the exits thread reads it beside the pidfds and keeps the status of the processes it
follows, which the processes collector then gives an exit ("exited with status 3", "killed
by signal 9"); where it may not (most accounts), nothing changes: the exit is still told, its
status is "unknown". The moment a followed process's pidfd turned readable is kept too: an
attempt ends then, not when the next snapshot noticed (torchrun that died at 08:54:10 read
"died after 13 s" beside the relaunch it preceded).
"""

import contextlib
import ctypes
import errno
import os
import socket
import struct
import threading
from collections import OrderedDict

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
PROC_EVENT_EXIT = 0x80000000
_NLMSG = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_CN_MSG = struct.Struct("=IIIIHH")  # idx, val, seq, ack, len, flags
_EVENT = struct.Struct("=IIQ")  # what, cpu, timestamp (ns)
_EXIT = struct.Struct("=iiII")  # pid, tgid, exit_code (a wait status), exit_signal
KEPT_MAX = 4096  # statuses kept, the newest
SO_ATTACH_FILTER = 26
SO_RCVBUFFORCE = 33  # Linux: SO_RCVBUF past rmem_max, for CAP_NET_ADMIN
RECEIVE_BYTES = 1 << 20  # the socket's buffer: a second of a busy machine's exits, and more


def _exits_only() -> bytes:
    """A classic BPF program the kernel runs on each event before it is queued: a process's
    exit (pid == tgid) passes, every other event (forks, execs, threads' exits) is dropped
    without waking the listener. Netlink's fields are in host order, BPF loads big-endian:
    `what` is compared byte-swapped; pid and tgid are compared to each other."""
    what = _NLMSG.size + _CN_MSG.size
    pid = what + _EVENT.size
    exit_swapped = int.from_bytes(PROC_EVENT_EXIT.to_bytes(4, "little"), "big")
    program = [
        (0x20, 0, 0, what),  # A = what
        (0x15, 0, 6, exit_swapped),  # not an exit: drop
        (0x20, 0, 0, pid + 4),  # A = tgid
        (0x02, 0, 0, 0),  # M[0] = A
        (0x20, 0, 0, pid),  # A = pid
        (0x61, 0, 0, 0),  # X = M[0]
        (0x1D, 0, 1, 0),  # pid == tgid: keep, else drop
        (0x06, 0, 0, 0xFFFFFFFF),
        (0x06, 0, 0, 0),
    ]
    return b"".join(struct.pack("=HBBI", *op) for op in program)


_lock = threading.Lock()
_statuses: OrderedDict[int, int] = OrderedDict()  # pid -> its wait status
_moments: OrderedDict[int, float] = OrderedDict()  # pid -> when its pidfd said it ended


def listen() -> socket.socket | None:
    """A socket subscribed to the kernel's process events, non-blocking; None where the
    kernel refuses it (no CAP_NET_ADMIN, no connector, another network namespace)."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
    except (OSError, AttributeError):
        return None
    try:
        code = ctypes.create_string_buffer(_exits_only())
        fprog = struct.pack("HL", len(code.raw) // 8, ctypes.addressof(code))
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        with contextlib.suppress(OSError):  # a larger buffer where allowed (root)
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BYTES)
        sock.bind((os.getpid(), CN_IDX_PROC))
        op = struct.pack("=I", PROC_CN_MCAST_LISTEN)
        cn = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(op), 0) + op
        sock.send(_NLMSG.pack(_NLMSG.size + len(cn), 3, 0, 0, os.getpid()) + cn)  # NLMSG_DONE
        sock.setblocking(False)
        return sock
    except OSError:
        sock.close()
        return None


def exits_in(data: bytes) -> list[tuple[int, int]]:
    """(pid, wait status) of each process (thread group leader) exit in one datagram."""
    found = []
    offset = 0
    while offset + _NLMSG.size <= len(data):
        length = _NLMSG.unpack_from(data, offset)[0]
        if length < _NLMSG.size:
            break
        body = offset + _NLMSG.size + _CN_MSG.size
        if body + _EVENT.size + _EXIT.size <= offset + length:
            what = _EVENT.unpack_from(data, body)[0]
            if what == PROC_EVENT_EXIT:
                pid, tgid, status, _ = _EXIT.unpack_from(data, body + _EVENT.size)
                if pid == tgid:  # the process, not one of its threads
                    found.append((pid, status))
        offset += (length + 3) & ~3
    return found


def drain(sock: socket.socket, followed: set[int]) -> list[int]:
    """Read what the kernel sent; keep the statuses of `followed` pids; return those pids.
    Where the buffer overflowed (ENOBUFS), what was lost is lost: the rest is still read."""
    told = []
    with contextlib.suppress(BlockingIOError, InterruptedError):
        while True:
            try:
                data = sock.recv(1 << 16)
            except OSError as error:
                if error.errno == errno.ENOBUFS:
                    continue
                raise
            if not data:
                break
            for pid, status in exits_in(data):
                if pid in followed:
                    keep(pid, status)
                    told.append(pid)
    return told


def keep(pid: int, status: int) -> None:
    with _lock:
        _kept(_statuses, pid, status)


def keep_moment(pid: int, at: float) -> None:
    """`pid` ended at `at` (wall clock), as its pidfd told: the first pidfd to tell it (one
    opened on it once it was dead tells only that it is)."""
    with _lock:
        if pid not in _moments:
            _kept(_moments, pid, at)


def _kept(table: OrderedDict, pid: int, value: float) -> None:
    table[pid] = value
    table.move_to_end(pid)
    while len(table) > KEPT_MAX:
        table.popitem(last=False)


def exited_at(pid: int) -> float | None:
    """When `pid` ended (wall clock) as its pidfd told; None when no pidfd followed it."""
    with _lock:
        return _moments.get(pid)


def exit_status(pid: int) -> int | None:
    """The exit of `pid` as the kernel told it: its code, or minus the signal that killed
    it; None when the kernel told nothing (no connector, or not a followed process)."""
    with _lock:
        status = _statuses.get(pid)
    if status is None:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else None


def forget(pid: int) -> None:
    """A new process with this pid: the status kept is an older one's."""
    with _lock:
        _statuses.pop(pid, None)
        _moments.pop(pid, None)
