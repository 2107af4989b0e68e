"""Automatic watches whose target stays gone retire themselves; their attempts stay in the
history. Only ctxd's own watches retire: what the agent added by hand stays until removed."""

import logging
import threading
import time

from ctxd.collectors import kinds
from ctxd.models import Observations, Watch
from ctxd.store.database import Store

log = logging.getLogger("ctxd")
RETIRING_KINDS = frozenset(kind for kind, c in kinds().items() if c.RETIRES)


class Retirement:
    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self._gone_since: dict[int, float] = {}
        self._lock = threading.Lock()

    def review(self, watches: list[Watch], seen: Observations) -> list[int]:
        """Note which automatic watches found their target; the ids of those gone too long
        (retired by `retire` once the snapshot that saw it is stored)."""
        present = {p.watch_id for p in seen.processes.items}
        present |= {entry.watch_id for entry in seen.logs.items}
        present |= {a.watch_id for a in seen.artifacts.items}
        now = time.monotonic()
        due = []
        for watch in watches:
            if not watch.auto or watch.spec.kind not in RETIRING_KINDS:
                continue
            with self._lock:
                if watch.id in present:
                    self._gone_since.pop(watch.id, None)
                    continue
                since = self._gone_since.setdefault(watch.id, now)
            if now - since >= self.after_s:
                due.append(watch.id)
        return due

    def retire(self, store: Store, sid: str, watch_ids: list[int]) -> None:
        for watch_id in watch_ids:
            store.delete_watch(sid, watch_id)
            with self._lock:
                self._gone_since.pop(watch_id, None)
            log.info("retired automatic watch %d of %s: its target is gone", watch_id, sid)
