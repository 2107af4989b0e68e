"""Process exits told by the kernel: a pidfd per watched process, one epoll for them all.

The trigger loop probes what sessions watch every `event_probe_s`; an exit, the news that
matters most, need not wait for that probe: the kernel makes a process's pidfd readable when
it ends, and one thread waiting on all of them (no CPU while nothing ends) tells the loop at
once which session to probe. A process in a child pid namespace (a container's) is followed
too, by its pid here. Where no pidfd follows (an old kernel, FOLLOWED_MAX held) nothing
changes: the probe still finds the exit, only later.
"""

import contextlib
import logging
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable

from ctxd.collectors.proc import procevents, proctree

log = logging.getLogger(__name__)

FOLLOWED_MAX = 4096  # pidfds held at most (one descriptor each)
RECENT_MAX = 256  # pids whose pidfd fired lately: their status may come after


class ExitWatch:
    """Calls `on_exit(session)` from its own thread when a followed process ends."""

    def __init__(self, on_exit: Callable[[str], None]) -> None:
        self.on_exit = on_exit
        self._lock = threading.Lock()
        self._fds: dict[int, tuple[int, set[str]]] = {}  # fd -> (pid, sessions)
        self._by_pid: dict[int, int] = {}  # pid -> fd
        self._poll = select.epoll() if hasattr(select, "epoll") else None
        self._stopped = False
        self._thread: threading.Thread | None = None
        # the kernel's process events, where ctxd may listen: exit statuses (procevents.py)
        self._events: socket.socket | None = None
        self._recent: deque[int] = deque(maxlen=RECENT_MAX)

    def follow(self, sid: str, pid: int) -> bool:
        """Tell `sid` when `pid` ends; False where the kernel cannot say (no pidfd)."""
        if self._poll is None or not hasattr(os, "pidfd_open") or self._stopped:
            return False
        with self._lock:
            fd = self._by_pid.get(pid)
            if fd is not None:
                self._fds[fd][1].add(sid)
                return True
            if len(self._fds) >= FOLLOWED_MAX:
                return False
            try:
                fd = os.pidfd_open(pid)
            except OSError:  # gone already, or not ours to see: the probe tells
                return False
            self._fds[fd] = (pid, {sid})
            self._by_pid[pid] = fd
            if not select.select([fd], [], [], 0)[0]:  # alive: what is kept is an earlier's
                procevents.forget(pid)  # (one dead already may be followed again: its own)
            self._poll.register(fd, select.EPOLLIN)
            if self._thread is None:
                # not in the epoll: read when a pidfd fires (its status came first) and at
                # each second's timeout, so a busy machine's exits never wake the thread
                self._events = procevents.listen()
                self._thread = threading.Thread(target=self._run, name="exits", daemon=True)
                self._thread.start()
            return True

    def following(self) -> set[int]:
        with self._lock:
            return set(self._by_pid)

    def _run(self) -> None:
        assert self._poll is not None
        while not self._stopped:
            try:
                ready = self._poll.poll(1.0)  # a second at most: `stop` is seen soon
            except OSError:
                return
            if self._events is not None:  # statuses first: the probe reads them
                with self._lock:
                    followed = set(self._by_pid) | set(self._recent)
                procevents.drain(self._events, followed)
            if ready:
                # what was read of /proc before these exits shows them alive (the events of
                # the machine's other processes leave it be)
                proctree.outdated(time.monotonic())
            ended = time.time()
            for fd, _ in ready:
                with self._lock:
                    pid, sessions = self._fds.pop(fd, (0, set()))
                    if pid:
                        procevents.keep_moment(pid, ended)
                    self._by_pid.pop(pid, None)
                    self._recent.append(pid)
                    with contextlib.suppress(OSError, ValueError):
                        self._poll.unregister(fd)
                    os.close(fd)
                for sid in sessions:
                    try:
                        self.on_exit(sid)
                    except Exception:  # the loop's concern: this thread must go on
                        log.exception("telling %s of the exit of %d failed", sid, pid)

    def stop(self) -> None:
        self._stopped = True
        if self._thread is not None:
            self._thread.join(timeout=3)
        with self._lock:
            for fd in list(self._fds):
                os.close(fd)
            self._fds.clear()
            self._by_pid.clear()
            if self._poll is not None:
                self._poll.close()
            if self._events is not None:
                self._events.close()
