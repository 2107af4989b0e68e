"""Automatic watches whose target stays gone retire themselves; their launches stay in the
history. Only ctxd's own watches retire: what the agent added by hand stays until removed."""

import logging
import threading
import time

from ctxd.models import Observations, Watch
from ctxd.store.database import Store

log = logging.getLogger("ctxd")
RETIRING_KINDS = ("process", "log", "artifact")


class Retirement:
    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self._gone_since: dict[int, float] = {}
        self._lock = threading.Lock()

    def review(self, store: Store, sid: str, watches: list[Watch], seen: Observations) -> None:
        """Note which automatic watches found their target; retire those gone too long."""
        present = {p.watch_id for p in seen.processes.items}
        present |= {entry.watch_id for entry in seen.logs.items}
        present |= {a.watch_id for a in seen.artifacts.items}
        now = time.monotonic()
        for watch in watches:
            if not watch.auto or watch.spec.kind not in RETIRING_KINDS:
                continue
            with self._lock:
                if watch.id in present:
                    self._gone_since.pop(watch.id, None)
                    continue
                since = self._gone_since.setdefault(watch.id, now)
            if now - since >= self.after_s:
                store.delete_watch(sid, watch.id)
                with self._lock:
                    self._gone_since.pop(watch.id, None)
                log.info("retired automatic watch %d of %s: its target is gone", watch.id, sid)
