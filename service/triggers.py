"""Background triggers: quiet sessions, events in what is watched, schedules and retention."""

import asyncio
import logging
import threading
import time
from datetime import UTC, datetime, timedelta

from service import happened
from service.errors import NotFound
from service.models import Observations, Session
from service.snapshots import Snapshotter
from service.store import now

log = logging.getLogger(__name__)

# The collectors whose news is an event; host, GPU and command probes are too costly to poll.
EVENT_SOURCES = frozenset({"processes", "ports", "logs", "artifacts", "slurm"})
PRUNE_EVERY = timedelta(hours=6)


class Activity:
    """Last activity per session, in memory, so that every request counts without a write."""

    def __init__(self) -> None:
        self._seen: dict[str, datetime] = {}
        self._lock = threading.Lock()

    def mark(self, sid: str) -> None:
        with self._lock:
            self._seen[sid] = now()

    def last(self, session: Session) -> datetime:
        with self._lock:
            seen = self._seen.get(session.id)
        return max(seen, session.last_activity_at) if seen else session.last_activity_at


def detect_events(before: Observations | None, after: Observations) -> list[tuple[str, str]]:
    """Pure: what in `after` is news worth a snapshot at once, as (trigger word, text)."""
    return happened.events(before, after)


class Watcher:
    """Looks at every session each `trigger_interval_s` and takes the snapshots it owes."""

    def __init__(self, snapshotter: Snapshotter, activity: Activity) -> None:
        self.snap = snapshotter
        self.activity = activity
        self.settings = snapshotter.settings
        self._probes: dict[str, Observations] = {}
        self._last_event: dict[str, float] = {}
        self._next_probe: dict[str, float] = {}
        self._next_slurm_probe: dict[str, float] = {}
        self._pending: dict[str, list[tuple[str, str]]] = {}
        self._last_schedule: dict[str, datetime] = {}
        self._last_prune = datetime.min.replace(tzinfo=UTC)
        self._busy = threading.Lock()
        self._stopped = False

    async def run(self) -> None:
        while not self._stopped:
            try:
                await asyncio.to_thread(self.tick)
            except Exception:  # the loop must outlive any one bad tick
                log.exception("trigger tick failed")
            await asyncio.sleep(self.settings.trigger_interval_s)

    def stop(self) -> None:
        """No tick starts after this returns, and none is still running."""
        self._stopped = True
        with self._busy:
            pass

    def tick(self) -> None:
        with self._busy:
            if not self._stopped:
                self._tick()

    def _tick(self) -> None:
        for session in self.snap.store.list_sessions():
            try:
                self.flush_activity(session)
                self.check_events(session)
                self.check_quiet(session)
                self.check_schedule(session)
            except NotFound:
                continue  # deleted while we looked
        if now() - self._last_prune > PRUNE_EVERY:
            self._last_prune = now()
            removed = self.snap.prune(self.settings.keep_days)
            if removed:
                log.info("retention: thinned out %d old versions", removed)

    def flush_activity(self, session: Session) -> None:
        last = self.activity.last(session)
        if last - session.last_activity_at > timedelta(seconds=1):
            self.snap.store.touch(session.id, at=last)

    def check_quiet(self, session: Session) -> None:
        """One snapshot after `quiet_after_s` of silence; none again until activity resumes."""
        last = self.activity.last(session)
        if now() - last < timedelta(seconds=session.quiet_after_s):
            return
        if self.snap.store.last_snapshot_at(session.id) >= last:
            return
        self.snap.take(session.id, trigger="quiet")

    def check_schedule(self, session: Session) -> None:
        every = session.schedule_every_s
        if not every:
            return
        previous = self._last_schedule.get(session.id)
        if previous is not None and now() - previous < timedelta(seconds=every):
            return
        active = self.activity.last(session) > (previous or session.created_at)
        if active:
            self._last_schedule[session.id] = now()
            if previous is not None:
                self.snap.take(session.id, trigger="schedule")
        elif previous is None:
            self._last_schedule[session.id] = now()

    def _event_sources(self, sid: str) -> frozenset[str]:
        """EVENT_SOURCES, with Slurm only every `slurm_probe_s`: each look at it asks the
        controller, a shared service, and a job's end may be noticed a minute late."""
        if time.monotonic() < self._next_slurm_probe.get(sid, 0.0):
            return EVENT_SOURCES - {"slurm"}
        self._next_slurm_probe[sid] = time.monotonic() + self.settings.slurm_probe_s
        return EVENT_SOURCES

    def check_events(self, session: Session) -> None:
        """Probe what is watched; news (an exit, an error, a port, a rebuild) is kept at once."""
        pending = self._pending.setdefault(session.id, [])
        if time.monotonic() >= self._next_probe.get(session.id, 0.0):
            self._next_probe[session.id] = time.monotonic() + self.settings.event_probe_s
            if self.snap.store.list_watches(session.id):
                previous = self._probes.get(session.id)
                sources = self._event_sources(session.id)
                probe = self.snap.observe(
                    session.id, previous=previous, purpose="probe", only=sources
                )
                if "slurm" not in sources and previous is not None:
                    # not asked this time: the last answer stands, so a job's end is still
                    # seen against the state it had when the controller was last asked
                    probe = probe.model_copy(update={"slurm": previous.slurm})
                news = detect_events(previous, probe)
                self._probes[session.id] = probe
                pending += [e for e in news if e not in pending]
        if not pending:
            return
        since = time.monotonic() - self._last_event.get(session.id, float("-inf"))
        if since < self.settings.event_min_gap_s:
            return  # debounced: the pending events go into the next allowed snapshot
        codes = list(dict.fromkeys(code for code, _ in pending))
        note = "; ".join(text for _, text in pending[:20])
        self._pending[session.id] = []
        self._last_event[session.id] = time.monotonic()
        self.snap.take(session.id, trigger="event:" + ",".join(codes), note=note)
