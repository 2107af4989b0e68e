"""Filesystem events per watched tree (watchfiles): did anything under it change since a walk?"""

import logging
import threading
from collections.abc import Generator

import watchfiles

log = logging.getLogger(__name__)

# How long one question waits for events already on their way: the notifier's own thread
# has read the kernel's events within microseconds, so a millisecond is plenty.
ASK_TIMEOUT_MS = 1


def _events(root: str) -> Generator[set, None, None]:
    """watchfiles' public generator, made to answer at once: what arrived, or an empty set.

    No filter: any change under an artifact tree (even in .git or __pycache__) is a change.
    Not raise_interrupt: this runs in collector threads, where no Ctrl-C belongs.
    """
    return watchfiles.watch(
        root,
        watch_filter=None,
        debounce=1,
        step=1,
        rust_timeout=ASK_TIMEOUT_MS,
        yield_on_timeout=True,
        raise_interrupt=False,
        ignore_permission_denied=True,
    )


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
        self._notify: Generator[set, None, None] | None = _events(root)
        try:
            next(self._notify)  # starts the notifier (its first answer: what came in 1 ms)
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
                changes = next(self._notify)
            except Exception as exc:  # e.g. the root was removed: fall back to walking
                log.info("stopped watching %s: %s", self.root, type(exc).__name__)
                self._notify = None
                return None
            if changes:
                self.generation += 1
            return self.generation

    def stop(self) -> None:
        with self._lock:
            if self._notify is not None:
                self._notify.close()
            self._notify = None
