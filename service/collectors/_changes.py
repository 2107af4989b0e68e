"""A watchfiles notifier per watched tree: says whether anything under it changed since a walk."""

import logging
import threading

from watchfiles._rust_notify import RustNotify

log = logging.getLogger(__name__)

# How long one question waits for events already on their way: the notifier's own thread
# has read the kernel's events within microseconds, so a millisecond is plenty.
ASK_TIMEOUT_MS = 1


class TreeWatcher:
    """Accumulates filesystem events under `root` in watchfiles' own (Rust) thread.

    Nothing runs in Python between questions, so an idle watcher costs no CPU.
    `settled_generation()` drains what arrived since the last question and moves the
    generation on if anything did; a caller that saw the same generation before its last
    walk knows nothing under the tree changed since.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self.generation = 0
        self._lock = threading.Lock()
        self._notify: RustNotify | None
        try:
            self._notify = RustNotify([root], False, False, 50, True, True)
        except Exception as exc:  # a tree that cannot be watched is walked every time
            log.info("not watching %s: %s", root, type(exc).__name__)
            self._notify = None

    @property
    def ready(self) -> bool:
        return self._notify is not None

    def settled_generation(self) -> int | None:
        """The generation once every event before this call is counted; None if unusable."""
        with self._lock:
            if self._notify is None:
                return None
            try:
                changes = self._notify.watch(1, 1, ASK_TIMEOUT_MS, None)
            except Exception as exc:  # e.g. the root was removed: fall back to walking
                log.info("stopped watching %s: %s", self.root, type(exc).__name__)
                self._notify = None
                return None
            if isinstance(changes, set) and changes:
                self.generation += 1
            return self.generation

    def stop(self) -> None:
        with self._lock:
            if self._notify is not None:
                self._notify.close()
            self._notify = None
