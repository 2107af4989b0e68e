"""Background triggers: quiet sessions, events in what is watched, schedules and retention."""

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ctxd.collectors import ports
from ctxd.errors import NotFound
from ctxd.models import Observations, Session, Snapshot, Trigger, Watch
from ctxd.snapshotter import happened, news
from ctxd.snapshotter.exits import ExitWatch
from ctxd.snapshotter.file_events import FileEvents, watched_paths
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.connection import now

log = logging.getLogger(__name__)

# The collectors whose news is an event; host, GPU and command probes are too costly to poll.
EVENT_SOURCES = frozenset({"processes", "ports", "logs", "artifacts", "slurm"})
# What a file change told by the kernel is looked at with, at once: the rest waits its probe.
FILE_SOURCES = frozenset({"logs", "artifacts"})
FILE_LOOK_GAP_S = 1.0  # a log written without pause is looked at once a second at most
# While a live session waits for a local port, the loop looks at the machine's LISTEN table
# (one read for all) this often: no kernel event says a port opened.
PORT_LOOK_S = 1.0
# A settled session (no attempt starting, nobody waiting, every process of it followed by a
# pidfd, nothing on another host) is probed every this many event periods: what it waits for
# comes from the kernel (exits, file changes) or the LISTEN table's look (ports) meanwhile.
LOOSE_PERIODS = 4
PRUNE_EVERY = timedelta(hours=6)


class Activity:
    """Last activity per session, in memory, so that every request counts without a write."""

    def __init__(self) -> None:
        self._seen: dict[str, datetime] = {}
        self._lock = threading.Lock()
        self.marks = 0  # how many marks so far: what the loop kept stands while it stays

    def mark(self, sid: str) -> None:
        with self._lock:
            self._seen[sid] = now()
            self.marks += 1

    def last(self, session: Session) -> datetime:
        with self._lock:
            seen = self._seen.get(session.id)
        return max(seen, session.last_activity_at) if seen else session.last_activity_at

    def all(self) -> dict[str, datetime]:
        """Every session's last activity seen here, as of now (one copy, one lock)."""
        with self._lock:
            return dict(self._seen)


@dataclass
class SharedProbe:
    """The latest probe of one set of watches, and when that set is due to be probed again."""

    probe: Observations
    next_at: float  # time.monotonic()
    taken: int = 0  # its number in the order of probes and exit notices


def watch_set(watches: list[Watch]) -> str:
    """What a probe of `watches` depends on: their specs, in any order. Two sessions with the
    same watch set (several agents on one checkout) see the same things, so one probe serves
    both; ids differ, but events compare by process key, port and path, never by watch id."""
    return "\n".join(sorted(w.spec.model_dump_json() for w in watches))


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
        self._shared: dict[str, SharedProbe] = {}
        self._pending: dict[str, list[tuple[str, str]]] = {}
        self._last_schedule: dict[str, datetime] = {}
        self._last_prune = datetime.min.replace(tzinfo=UTC)
        self._dormant: dict[str, datetime] = {}  # session -> since when it is not probed
        self._dormant_changes = 0  # sessions gone dormant or woken so far
        # the sessions a full tick looks at, and the (store, activity, dormancy) it was for
        self._looked: tuple[tuple, list[Session]] = ((), [])
        self._sessions_read: tuple[tuple[int, int], list[Session]] = ((-1, -1), [])
        self._quiet_told: dict[str, set[int]] = {}  # session -> attempts told still starting
        # exits the kernel told (a pidfd per watched process): probed at the next tick
        self.exits = ExitWatch(self._exited)
        self._probe_anew: dict[str, int] = {}  # session -> an exit or a port opening, numbered
        # file changes the kernel told (logs, artifacts): those files looked at at once
        self.files = FileEvents(self._file_changed)
        self._changed_in: dict[str, int] = {}  # session -> the kernel's change notice, numbered
        self._files_looked: dict[str, float] = {}  # session -> when its files were last looked at
        self._order = itertools.count(1)  # numbers probes and notices: which came first
        self._nudge: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._busy = threading.Lock()
        self._stopped = False
        self._port_waiters: set[str] = set()  # live sessions waiting on a local port
        self._awake: dict[str, Session] = {}  # the sessions the last full tick probed

    async def run(self) -> None:
        """A full tick every `trigger_interval_s`; between, as the kernel tells of an exit or a
        file change, or every PORT_LOOK_S while a session waits on a port, a tick of only the
        sessions concerned (a thousand dormant ones cost nothing then)."""
        self._loop, self._nudge = asyncio.get_running_loop(), asyncio.Event()
        every = self.settings.trigger_interval_s
        last_full = float("-inf")
        while not self._stopped:
            self._nudge.clear()
            full = time.monotonic() - last_full >= every
            if full:
                last_full = time.monotonic()
            try:
                await asyncio.to_thread(self.tick if full else self.tick_told)
            except Exception:  # the loop must outlive any one bad tick
                log.exception("trigger tick failed")
            wait = max(0.0, every - (time.monotonic() - last_full))
            if self._port_waiters:
                wait = min(wait, PORT_LOOK_S)
            with contextlib.suppress(TimeoutError):  # what the kernel tells comes early
                await asyncio.wait_for(self._nudge.wait(), wait)

    def stop(self) -> None:
        """No tick starts after this returns, and none is still running."""
        self._stopped = True
        with self._busy:
            pass
        self.exits.stop()
        self.files.stop()

    def _exited(self, sid: str) -> None:
        """From the exits thread: a process `sid` watches ended; probe it at once."""
        self._probe_anew[sid] = next(self._order)
        self._wake_loop()

    def _file_changed(self, sid: str) -> None:
        """From the file events thread: a log or artifact `sid` watches changed; look at once."""
        self._changed_in.setdefault(sid, next(self._order))
        self._wake_loop()

    def _wake_loop(self) -> None:
        if self._loop is not None and self._nudge is not None:
            self._loop.call_soon_threadsafe(self._nudge.set)

    def tick(self) -> None:
        with self._busy:
            if not self._stopped:
                self._tick()

    def tick_told(self) -> None:
        """Between full ticks: only the live sessions the kernel told of (an exit, a file
        change) or that wait on a local port."""
        with self._busy:
            if self._stopped:
                return
            for sid in set(self._probe_anew) | set(self._changed_in) | set(self._port_waiters):
                session = self._awake.get(sid)
                if session is None:
                    continue  # dormant or new: the next full tick sees it
                try:
                    self.check_ports(sid)
                    self.check_events(session)
                except NotFound:
                    continue

    def _tick(self) -> None:
        awake: dict[str, Session] = {}
        self._port_waiters = set()
        for session in self._to_look_at():
            try:
                self.flush_activity(session)
                if self.dormant(session):
                    continue  # nothing alive, nobody around: no probe, no snapshot
                awake[session.id] = session
                self.check_ports(session.id)
                self.check_events(session)
                self.check_waited(session)
                self.check_quiet(session)
                self.check_schedule(session)
            except NotFound:
                continue  # deleted while we looked
        self._awake = awake
        self.files.retain(set(awake))  # a dormant or deleted session's files: no kernel watch
        self._forget_unused_probes()
        if now() - self._last_prune > PRUNE_EVERY:
            self._last_prune = now()
            removed = self.snap.prune(self.settings.keep_days)
            if removed:
                log.info("retention: thinned out %d old versions", removed)

    def _sessions(self) -> list[Session]:
        """Every session, in a steady order (the first session of a watch set probes it for
        all, see `probe`): read again only once the store changed, so a thousand sessions
        that sleep cost no read a tick."""
        stamp = self.snap.store.stamp()
        if stamp != self._sessions_read[0]:
            listed = sorted(self.snap.store.list_sessions(), key=lambda s: s.id)
            self._sessions_read = (stamp, listed)
        return self._sessions_read[1]

    def _to_look_at(self) -> list[Session]:
        """Every session but the dormant ones with no activity since: listed again only once
        the store, the activity or a dormancy changed, so a thousand sessions asleep cost no
        step of a tick (not even a dict lookup each)."""
        sessions = self._sessions()
        mark = (self._sessions_read[0], self.activity.marks, self._dormant_changes)
        if mark != self._looked[0]:
            seen = self.activity.all()

            def asleep(session: Session) -> bool:
                since = self._dormant.get(session.id)
                if since is None:
                    return False
                return max(seen.get(session.id, since), session.last_activity_at) <= since

            self._looked = (mark, [s for s in sessions if not asleep(s)])
        return self._looked[1]

    def flush_activity(self, session: Session) -> None:
        last = self.activity.last(session)
        if last - session.last_activity_at > timedelta(seconds=1):
            self.snap.store.touch(session.id, at=last)

    def dormant(self, session: Session) -> bool:
        """Whether the session sleeps: no activity for `dormant_after_s` and, in its newest
        version, no watched process alive and no attempt live. Decided once (one read of its
        newest version), then kept until activity comes: a dormant session costs a dict
        lookup a tick. Its going dormant is kept as an action, which its next dump tells."""
        last = self.activity.last(session)
        since = self._dormant.get(session.id)
        if since is not None:
            if last <= since:
                return True
            del self._dormant[session.id]  # activity: awake, and probed from this tick on
            self._dormant_changes += 1
            return False
        if now() - last < timedelta(seconds=self.settings.dormant_after_s):
            return False
        latest = self.snap.latest(session.id)
        # what is alive: the newest look, its last probe or else its newest version (a session
        # never snapshot but probed, whose process runs, is not dormant)
        seen = self._probes.get(session.id) or (latest.observations if latest else None)
        if (seen is not None and seen.processes.items) or (latest and news.pending(latest)):
            return False
        self._dormant[session.id] = now()
        self._dormant_changes += 1
        self._probes.pop(session.id, None)
        self.snap.store.add_action(session.id, "dormant", now(), {"idle_since": last.isoformat()})
        return True

    def check_waited(self, session: Session) -> None:
        """An agent waits on this session's news (a waiter long-polls) and an attempt is still
        starting: look again every quarter of the stuck threshold (at least every event probe),
        so that it is called stuck soon after it is. One look per session, whatever the number
        of waiters; none for a session nobody waits on."""
        if not self.snap.news.waited(session.id):
            return
        latest = self.snap.latest(session.id)
        self._quiet_news(session, latest)
        every = max(self.settings.event_probe_s, self.settings.stuck_after_s / 4)
        if now() - self.snap.store.last_snapshot_at(session.id) < timedelta(seconds=every):
            return
        if news.pending(latest):
            self.snap.take(session.id, Trigger.SCHEDULE, note="an agent waits on its attempts")

    def _quiet_news(self, session: Session, latest: Snapshot | None) -> None:
        """The quiet rule, for an agent that waits: idle for `quiet_after_s` with an attempt
        still starting (neither up nor stuck nor dead) in its `latest` version, it is told so
        once per attempt."""
        if now() - self.activity.last(session) < timedelta(seconds=session.quiet_after_s):
            return
        told = self._quiet_told.setdefault(session.id, set())
        quiet = [o for o in news.still_pending(latest, now()) if o.number not in told]
        told.update(o.number for o in quiet)
        self.snap.news.publish(session.id, quiet)

    def check_quiet(self, session: Session) -> None:
        """One snapshot after `quiet_after_s` of silence; none again until activity resumes."""
        last = self.activity.last(session)
        if now() - last < timedelta(seconds=session.quiet_after_s):
            return
        if self.snap.store.last_snapshot_at(session.id) >= last:
            return
        self.snap.take(session.id, Trigger.QUIET)

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
                self.snap.take(session.id, Trigger.SCHEDULE)
        elif previous is None:
            self._last_schedule[session.id] = now()

    def _event_sources(self, key: str) -> frozenset[str]:
        """EVENT_SOURCES, with Slurm only every `slurm_probe_s`: each look at it asks the
        controller, a shared service, and a job's end may be noticed a minute late."""
        if time.monotonic() < self._next_slurm_probe.get(key, 0.0):
            return EVENT_SOURCES - {"slurm"}
        self._next_slurm_probe[key] = time.monotonic() + self.settings.slurm_probe_s
        return EVENT_SOURCES

    def probe(self, sid: str, watches: list[Watch]) -> Observations:
        """The probe of the session's watch set: the one another session with the same set
        took this period, or a new one (taken with this session's collector memory).

        A session that uses another's probe is due again when that set is, so the sessions
        of one set fall into step and one probe per period serves them all.
        """
        key = watch_set(watches)
        shared = self._shared.get(key)
        if shared is not None and time.monotonic() < shared.next_at:
            self._next_probe[sid] = shared.next_at
            return shared.probe
        every = self.settings.event_probe_s * self._pace(sid, watches)
        next_at = self._next_probe[sid] = time.monotonic() + every
        previous = self._probes.get(sid)
        sources = self._event_sources(key)
        probe = self.snap.runner.observe(
            sid, watches, previous=previous, purpose="probe", only=sources
        )
        if "slurm" not in sources and previous is not None:
            # not asked this time: the last answer stands, so a job's end is still
            # seen against the state it had when the controller was last asked
            probe = probe.model_copy(update={"slurm": previous.slurm})
        self._shared[key] = SharedProbe(probe, next_at, next(self._order))
        return probe

    def _pace(self, sid: str, watches: list[Watch]) -> int:
        """Event periods until the session's next probe: one while something may happen that
        nothing tells (an attempt starting, whose stuck verdict needs looks; an agent waiting;
        a process no pidfd follows; a watch on another host), LOOSE_PERIODS once settled."""
        previous = self._probes.get(sid)
        if previous is None or self.snap.news.waited(sid):
            return 1
        for w in watches:
            host = w.spec.host
            if host is not None and not (w.spec.kind == "port" and ports.is_local(host)):
                return 1
        followed = self.exits.following()
        if any(p.pid not in followed for p in previous.processes.items if p.state != "zombie"):
            return 1
        if news.pending(self.snap.latest(sid)):
            return 1
        return LOOSE_PERIODS

    def _forget_unused_probes(self) -> None:
        """Drop the probes of watch sets no session has asked for over a whole period."""
        stale = time.monotonic() - self.settings.event_probe_s
        for key in [k for k, shared in self._shared.items() if shared.next_at < stale]:
            del self._shared[key]
            self._next_slurm_probe.pop(key, None)

    def check_ports(self, sid: str) -> None:
        """A local port its last probe saw closed listens now (the LISTEN table, read once a
        tick for every session): probe it at once, not at the next period."""
        probe = self._probes.get(sid)
        if probe is None or not any(not p.listening for p in probe.ports.items):
            self._port_waiters.discard(sid)
            return
        self._port_waiters.add(sid)
        if ports.opened(probe.ports, PORT_LOOK_S / 2):
            self._probe_anew.setdefault(sid, next(self._order))

    def _look_at_files(self, sid: str, changed: int, pending: list[tuple[str, str]]) -> None:
        """Logs and artifacts read again at once, after the kernel told one changed; the rest
        of the last probe stands (processes and ports wait for their own period). A log
        written without pause is read once every FILE_LOOK_GAP_S, the notice kept meanwhile."""
        previous = self._probes.get(sid)
        if previous is None:
            return  # never probed: its first probe is due anyway
        if time.monotonic() - self._files_looked.get(sid, float("-inf")) < FILE_LOOK_GAP_S:
            self._changed_in.setdefault(sid, changed)  # at the next tick
            return
        self._files_looked[sid] = time.monotonic()
        watches = self.snap.store.list_watches(sid)
        key = watch_set(watches)
        shared = self._shared.get(key)
        if shared is not None and shared.taken < changed:  # taken before the change
            del self._shared[key]
        files = self.snap.runner.observe(
            sid, watches, previous=previous, purpose="probe", only=FILE_SOURCES
        )
        probe = previous.model_copy(update={name: getattr(files, name) for name in FILE_SOURCES})
        self._probes[sid] = probe
        found = detect_events(previous, probe) + self.snap.news.printed(sid, previous, probe)
        pending += [e for e in found if e not in pending]

    def check_events(self, session: Session) -> None:
        """Probe what is watched; news (an exit, an error, a port, a rebuild) is kept at once."""
        pending = self._pending.setdefault(session.id, [])
        told = self._probe_anew.pop(session.id, None)
        if told is not None:  # one of its processes ended, or a port opened: probe it again
            self._next_probe[session.id] = 0.0
        changed = self._changed_in.pop(session.id, None)
        if time.monotonic() < self._next_probe.get(session.id, 0.0):
            if changed is not None:  # the kernel said a file it watches changed
                self._look_at_files(session.id, changed, pending)
        else:
            watches = self.snap.store.list_watches(session.id)
            key = watch_set(watches)
            shared = self._shared.get(key)
            notice = max((n for n in (told, changed) if n is not None), default=None)
            if notice is not None and shared is not None and shared.taken < notice:
                del self._shared[key]  # taken before the exit or change: one new probe for all
            if not watches:
                self._next_probe[session.id] = time.monotonic() + self.settings.event_probe_s
            else:
                previous = self._probes.get(session.id)
                probe = self.probe(session.id, watches)
                for p in probe.processes.items:  # every one: a worker's death is news too
                    if p.host is None and p.state != "zombie":
                        self.exits.follow(session.id, p.pid)
                self.files.follow(session.id, watched_paths(watches, probe))
                if probe is not previous:  # a probe already compared brings no news
                    found = detect_events(previous, probe)
                    found += self.snap.news.printed(session.id, previous, probe)
                    self._probes[session.id] = probe
                    pending += [e for e in found if e not in pending]
        if not pending:
            return
        since = time.monotonic() - self._last_event.get(session.id, float("-inf"))
        if since < self.settings.event_min_gap_s:
            return  # debounced: the pending events go into the next allowed snapshot
        codes = list(dict.fromkeys(code for code, _ in pending))
        note = "; ".join(text for _, text in pending[:20])
        self._pending[session.id] = []
        self._last_event[session.id] = time.monotonic()
        self.snap.take(session.id, Trigger.event(codes), note=note)
