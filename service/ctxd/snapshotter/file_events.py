"""File changes told by the kernel: one notifier over every live session's logs and artifacts.

The trigger loop probes what sessions watch every `event_probe_s`; a log that prints its error
or a build that lands need not wait for that probe. One thread holds one notifier (watchfiles,
inotify underneath) over the logs and artifact paths of every session that is not dormant,
each path watched alone, not its tree (a checkout's whole tree would exhaust the kernel's
watches): a log file, the folder a log will appear in, an artifact file or the folder a build
writes into. A change tells the loop which sessions to look at again at once. Whatever the
kernel does not tell (a file replaced on another mount, a change deep in a tree, a path
beyond the cap) is still found by the slow probe, only later.
"""

import logging
import os
import threading
from collections.abc import Callable, Iterable

import watchfiles

from ctxd.models import ArtifactWatch, LogWatch, Observations, Watch

log = logging.getLogger(__name__)

FOLLOWED_MAX = 4096  # paths watched at most (one kernel watch each)
STEP_MS = 250  # how often the notifier's thread looks at what the kernel told; ~2 steps late
NEVER_MS = 24 * 3600 * 1000  # no timeout of its own: it ends when the paths change


def watched_paths(watches: list[Watch], probe: Observations) -> set[str]:
    """The paths whose change is news for these watches: every log file and artifact the
    probe found, and each log or artifact path asked for (its folder where it does not exist
    yet, or is a glob), on this machine only."""
    local = [(w.id, w.spec) for w in watches if isinstance(w.spec, (LogWatch, ArtifactWatch))]
    local = [(i, spec) for i, spec in local if spec.host is None]
    ids = {i for i, _ in local}
    paths = {i.path for i in probe.logs.items if i.watch_id in ids}
    paths |= {i.path for i in probe.artifacts.items if i.watch_id in ids}
    for _, spec in local:
        path = spec.path
        if any(c in path for c in "*?[") or not os.path.exists(path):
            path = os.path.dirname(path.split("*")[0].split("?")[0].split("[")[0])
        paths.add(path)
    return {p for p in paths if os.path.isabs(p) and p != "/"}


class FileEvents:
    """Calls `on_change(session)` from its own thread when a path the session follows changes."""

    def __init__(self, on_change: Callable[[str], None]) -> None:
        self.on_change = on_change
        self._lock = threading.Lock()
        self._followed: dict[str, frozenset[str]] = {}  # session -> its paths
        self._union: frozenset[str] = frozenset()  # every session's paths together
        self._watching: frozenset[str] = frozenset()  # what the notifier holds now
        self._restart = threading.Event()  # set: the notifier ends, the thread starts anew
        self._stopped = False
        self._thread: threading.Thread | None = None

    def follow(self, sid: str, paths: Iterable[str]) -> None:
        """`sid` follows exactly these paths from now on (none: it follows nothing)."""
        wanted = frozenset(paths)
        with self._lock:
            if self._stopped or self._followed.get(sid, frozenset()) == wanted:
                return
            if wanted:
                self._followed[sid] = wanted
            else:
                self._followed.pop(sid, None)
            self._changed()

    def retain(self, sids: set[str]) -> None:
        """Sessions not in `sids` (dormant, deleted) follow nothing any more."""
        with self._lock:
            gone = [sid for sid in self._followed if sid not in sids]
            for sid in gone:
                del self._followed[sid]
            if gone:
                self._changed()

    def watching(self) -> frozenset[str]:
        with self._lock:
            return self._watching

    def _changed(self) -> None:
        """With the lock held: the notifier is started, or restarted, if the union moved."""
        union = frozenset().union(*self._followed.values())
        if union == self._union:
            return
        self._union = union
        self._restart.set()
        if self._thread is None and union:
            self._thread = threading.Thread(target=self._run, name="file-events", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stopped:
            with self._lock:
                self._restart.clear()
                paths = sorted(p for p in self._union if os.path.exists(p))[:FOLLOWED_MAX]
                self._watching = frozenset(paths)
            if not paths:
                self._restart.wait()
                continue
            try:
                self._notify(paths, self._restart)
            except Exception as exc:  # a path gone between the look and the watch: anew
                log.info("file events: %s: %s", type(exc).__name__, exc)
                self._restart.wait(1.0)

    def _notify(self, paths: list[str], restart: threading.Event) -> None:
        for changes in watchfiles.watch(
            *paths,
            watch_filter=None,
            debounce=STEP_MS * 4,
            step=STEP_MS,
            stop_event=restart,
            rust_timeout=NEVER_MS,
            raise_interrupt=False,
            recursive=False,
            ignore_permission_denied=True,
        ):
            told: set[str] = set()
            with self._lock:
                for change, path in changes:
                    for sid, followed in self._followed.items():
                        if path in followed or os.path.dirname(path) in followed:
                            told.add(sid)
                    if change == watchfiles.Change.deleted and path in self._watching:
                        restart.set()  # its kernel watch went with it: watch it anew
            for sid in told:
                try:
                    self.on_change(sid)
                except Exception:  # the loop's concern: this thread must go on
                    log.exception("telling %s of a file change failed", sid)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._restart.set()
        if self._thread is not None:
            self._thread.join(timeout=3)
