"""Python's garbage collector in a server: full collections off the request path.

A full (oldest-generation) collection walks every tracked object, tens of milliseconds with
the process table, collector memory and models a server keeps; left automatic, it lands in
whichever request happened to allocate last, one snapshot in forty. Here the young
generations collect as usual (cheap, and they free most cycles), while full collections run
on a timer in a thread of their own, when nothing is waiting on them.
"""

import gc
import threading
import time

FULL_EVERY_S = 30.0
# gc.set_threshold's third value: how many young (generation 1) collections before a full one.
# Large enough never to be reached between two timed full collections of a busy server.
NEVER = 1_000_000
FULL_AFTER_MIDDLE = 10

_started = threading.Lock()
_thread: threading.Thread | None = None


def install(every_s: float = FULL_EVERY_S) -> None:
    """Move full collections to a daemon thread running every `every_s`; idempotent."""
    global _thread
    with _started:
        if _thread is not None:
            return
        young, middle, _ = gc.get_threshold()
        gc.collect()
        gc.freeze()  # what start-up built (modules, models, templates) lives as long as we do
        gc.set_threshold(young, middle, NEVER)
        _thread = threading.Thread(target=_collect_forever, args=(every_s,), daemon=True,
                                   name="ctxd-gc")  # fmt: skip
        _thread.start()


def _collect_forever(every_s: float) -> None:
    while True:
        time.sleep(every_s)
        # as CPython's own rule (ten middle collections since the last full one): an idle
        # server allocates little, and a full collection of it costs tens of milliseconds
        if gc.get_count()[2] >= FULL_AFTER_MIDDLE:
            gc.collect()
