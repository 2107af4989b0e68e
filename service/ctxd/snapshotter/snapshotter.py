"""Builds a Snapshot: observe, derive signals and changes, dedup, commit, then write its files."""

import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ctxd import confine, redact
from ctxd.attempts import binding, history
from ctxd.attempts.flags import typed_name
from ctxd.attempts.model import AttemptUpdate
from ctxd.collectors import check_registry, registry
from ctxd.models import (
    JournalEntry,
    Narrative,
    Observations,
    Said,
    Snapshot,
    SnapshotHeader,
    Trigger,
)
from ctxd.peers.fanout import Peers
from ctxd.render import markdown as render
from ctxd.render import reuse
from ctxd.render.dump_files import DumpFiles
from ctxd.settings import Settings
from ctxd.signals import attempts as attempt_signals
from ctxd.signals import derive as signals
from ctxd.snapshotter import agent_context, changes, news
from ctxd.snapshotter.line_waits import line_waits
from ctxd.snapshotter.retirement import Retirement
from ctxd.snapshotter.runner import CollectorRunner
from ctxd.store.connection import now
from ctxd.store.database import Store

log = logging.getLogger(__name__)

COMMANDS_READ = 50  # the newest commands a version reads: its recent commands, its news

_NARRATIVE_LISTS = {
    "attempt": "attempts",
    "finding": "findings",
    "hypothesis": "findings",
    "decision": "decisions",
    "next": "next_steps",
    "question": "questions",
    "note": "notes",
}

# a collector and its Observations field must agree: fail at start-up, not in a snapshot
check_registry(registry())


class Snapshotter:
    """Assembles, dedups and commits snapshots; one lock per session keeps versions in order.

    The collectors run in a `CollectorRunner`, the Markdown files live in `DumpFiles`.
    """

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        # looked up at each run, so a test can swap the registry of this module
        self.runner = CollectorRunner(settings, lambda: registry(), peers=Peers(settings, store))
        self.files = DumpFiles(settings, store)
        self.retirement = Retirement(settings.auto_retire_s)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._size_cache: tuple[float, int] = (0.0, 0)
        # Milliseconds of each phase of the latest snapshot of a session (`make bench
        # --profile`); the collectors' own share is in `runner.last_timings`.
        self.last_phases: dict[str, dict[str, float]] = {}
        # The newest committed snapshot of each session, as stored: the next snapshot compares
        # with it without reading and decoding it back (versions are never reassigned).
        self._committed: dict[str, Snapshot] = {}
        # What a snapshot asks besides its collectors, while they run (a workspace's git)
        self._beside = ThreadPoolExecutor(max_workers=2, thread_name_prefix="beside")
        # The attempts' news as versions are stored, for the waiters that wake an agent
        self.news = news.NewsBoard()

    def close(self) -> None:
        self.runner.close()
        self._beside.shutdown(wait=False, cancel_futures=True)

    def _lock(self, sid: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(sid, threading.Lock())

    def assemble(
        self,
        sid: str,
        trigger: Trigger,
        note: str | None = None,
        purpose: str = "snapshot",
        cut: binding.Cutoff | None = None,
    ) -> "Assembled":
        """Observe and describe the session now, as the version after the latest stored one
        (`cut`: what it judges the attempts by, taken now when not given; its process table
        is one read since). Reads only: what storing it must write besides is in the
        answer, for `take` to apply after its commit."""
        started = time.perf_counter()
        cut = cut or binding.cutoff(self.store, sid)
        clock = _Clock(self.last_phases.setdefault(sid, {}))
        clock.into.clear()
        session = self.store.get_session(sid)
        git = self._beside.submit(agent_context.workspace_git, session)
        latest = self.store.latest_version(sid)
        previous = self._previous(sid, latest)
        before = previous.observations if previous else None
        watches = self.store.list_watches(sid)
        clock.lap("read previous")
        observations = self.runner.observe(
            sid, watches, before, purpose=purpose, table_since=cut.at
        )
        clock.lap("collect + redact")
        name_log_writers(observations)
        narrative = build_narrative(session.objective, self.store.list_entries(sid))
        files = binding.LogFiles(tuple(confine.roots(self.settings)), self.settings.limits)
        pending = binding.observed(self.store, sid, watches, observations, files, cut)
        every_log, ended = history.attempt_logs(self.store, sid, pending)
        retiring = self.retirement.review(watches, observations) if purpose == "snapshot" else []
        # the newest commands, read once: the narrative's and the stored version's news
        commands = self.store.list_actions(sid, "command", limit=COMMANDS_READ)
        agent_context.enrich(
            narrative, self.store, session, watches, git.result(), pending, commands
        )
        message, _ = self.store.last_message(sid)
        narrative.latest_message = redact.text(message) if message else None
        narrative.user_messages = [
            Said(at=at, text=redact.text(t)) for at, t in self.store.prompts(sid)
        ]
        said = self.store.agent_said(sid)
        narrative.agent_said = Said(at=said[0], text=redact.text(said[1])) if said else None
        clock.lap("narrative + attempts")
        taken = now()  # the one instant every age of this version is measured at
        snapshot = Snapshot(
            header=SnapshotHeader(
                session=sid,
                version=latest + 1,
                taken_at=taken,
                trigger=str(trigger),
                previous_version=previous.header.version if previous else None,
                previous_taken_at=previous.header.taken_at if previous else None,
                host=observations.host.hostname or socket.gethostname(),
                note=redact.text(note) if note else None,
                data_dir_bytes=self.data_dir_bytes(),
            ),
            title=session.title,
            narrative=narrative,
            signals=attempt_signals.restate(
                signals.derive(observations, before, ended, at=taken),
                narrative.history,
                observations,
                every_log,
                ended,
                at=taken,
            ),
            observations=observations,
        )
        clock.lap("signals")
        snapshot.changes = changes.compare(previous, snapshot)
        clock.lap("changes")
        snapshot.header.duration_ms = (time.perf_counter() - started) * 1000
        return Assembled(snapshot, pending, retiring, commands)

    def take(
        self,
        sid: str,
        trigger: Trigger = Trigger.MANUAL,
        note: str | None = None,
        force: bool = False,
        cut: binding.Cutoff | None = None,
    ) -> Snapshot:
        """Store version N+1, or, when nothing changed (and not `force`), confirm version N.

        Returns after the commit, which is the truth: the latest dump in memory follows it
        at once, and a failure to write the Markdown files afterwards is logged, not raised
        (`files_behind` lists such versions; their files are written again later).
        """
        with self._lock(sid):
            assembled = self.assemble(sid, trigger, note, cut=cut)
            snapshot = assembled.snapshot
            clock = _Clock(self.last_phases[sid])
            key = changes.content_key(snapshot)
            latest = snapshot.header.previous_version
            if latest and not force and key == self.store.content_key(sid, latest):
                confirmed = self._confirm(sid, latest, snapshot.header.taken_at)
                self._after_commit(sid, assembled)
                return confirmed
            clock.lap("content key")

            rendered: list[str] = []

            def build(version: int) -> tuple[Snapshot, str]:
                snapshot.header.version = version
                rendered.append(self.render(snapshot))
                clock.lap("render")
                return snapshot, rendered[-1]

            previous = self._previous(sid, latest) if latest else None
            self.store.add_snapshot(sid, build, key)
            self._committed[sid] = snapshot
            self._publish(sid, previous, snapshot, assembled.commands)
            self._after_commit(sid, assembled)
            clock.lap("store + commit")
            # the committed text, as rendered: no need to read it back and decompress it
            self.write_files(sid, snapshot.header.version, rendered[-1], latest=True)
            clock.lap("Markdown files")
            return snapshot

    def _publish(
        self, sid: str, previous: Snapshot | None, snapshot: Snapshot, actions: list[dict]
    ) -> None:
        """The attempts' news of a stored version, for the agent's waiter (`news.py`), judged
        by the commands it was assembled from (`actions`)."""
        try:
            commands = [
                (datetime.fromisoformat(a["at"]), str(a.get("command", ""))) for a in actions
            ]
            waits = line_waits(actions)  # the log lines the agent waits for
            self.news.expect(sid, waits)
            found = news.outcomes(previous, snapshot, commands, waits)
            self.news.publish(sid, found, snapshot.header.version)
        except Exception:  # the news is a courtesy: the version is stored whatever happens
            log.exception("the news of %s v%d was not published", sid, snapshot.header.version)

    def _after_commit(self, sid: str, assembled: "Assembled") -> None:
        """What a stored (or confirmed) snapshot writes besides itself: the attempts it saw,
        the automatic watches it found gone too long."""
        binding.save(self.store, sid, assembled.attempts)
        self.retirement.retire(self.store, sid, assembled.retiring)

    def _confirm(self, sid: str, version: int, at: datetime) -> Snapshot:
        self.store.confirm_snapshot(sid, version, at)
        stored = self._committed[sid] = self.store.get_snapshot(sid, version)
        markdown = self.render(stored)
        self.store.set_markdown(sid, version, markdown)
        self.write_files(sid, version, markdown, latest=True)
        return stored

    def latest(self, sid: str) -> Snapshot | None:
        """The session's newest stored version (None: none yet), kept in memory once read."""
        found = self._previous(sid, self.store.latest_version(sid))
        if found is not None:
            self._committed.setdefault(sid, found)
            if self._committed[sid].header.version < found.header.version:
                self._committed[sid] = found
        return found

    def _previous(self, sid: str, latest: int) -> Snapshot | None:
        """Version `latest` of the session: the one committed here, or read from the store
        (after a restart, or when another process wrote it)."""
        if not latest:
            return None
        kept = self._committed.get(sid)
        if kept is not None and kept.header.version == latest:
            return kept
        return self.store.get_snapshot(sid, latest)

    def preview(self, sid: str) -> tuple[Snapshot, str]:
        """A fresh dump that is not stored: what a snapshot would say now."""
        # its own collector memory: a look at the live state must not consume the news
        # (new log errors, growth) that the next stored snapshot has to report
        snapshot = self.assemble(sid, Trigger.PREVIEW, purpose="preview").snapshot
        return snapshot, self.render(snapshot)

    def render(
        self,
        snapshot: Snapshot,
        *,
        for_model: bool = False,
        left_out: dict[str, str] | None = None,
        served_at: datetime | None = None,
        handover: list[str] | None = None,
        reused: reuse.Sections | None = None,
    ) -> str:
        """The dump's Markdown (see `render.render_dump` for what the options change)."""
        header = snapshot.header
        where = self.files.locate(header.session, header.version)
        return render.render_dump(
            snapshot,
            where,
            for_model=for_model,
            left_out=left_out,
            served_at=served_at,
            handover=handover,
            reused=reused,
        )

    def data_dir_bytes(self) -> int:
        """Database plus Markdown files; cached for a minute, as walking the folder costs."""
        stamp, size = self._size_cache
        if time.monotonic() - stamp > 60:
            size = self.store.size_bytes() + self.files.markdown_bytes()
            self._size_cache = (time.monotonic(), size)
        return size

    def prune(self, keep_days: int) -> int:
        """Thin out old versions in the database, then remove their Markdown files."""
        removed = self.store.prune(keep_days)
        for sid, version in removed:
            self.files.remove(sid, version)
        self._size_cache = (0.0, 0)
        return len(removed)

    def session_dir(self, sid: str) -> Path:
        return self.files.session_dir(sid)

    def write_files(self, sid: str, version: int, markdown: str, *, latest: bool) -> bool:
        """False when the files could not be written (logged; see DumpFiles.write)."""
        return self.files.write(sid, version, markdown, latest=latest)

    def files_behind(self, sid: str) -> list[int]:
        """Committed versions whose Markdown files are not on disk yet."""
        return self.files.files_behind(sid)

    def latest_in_memory(self, sid: str) -> str | None:
        """The newest stored dump of a session, if written or checked since start-up."""
        return self.files.latest_in_memory(sid)

    def rebuild_files(self) -> int:
        """Rewrite any Markdown file missing on disk from the database (the truth)."""
        return self.files.rebuild()


@dataclass
class Assembled:
    """A snapshot assembled, and what storing it writes besides (nothing, for a preview)."""

    snapshot: Snapshot
    attempts: list[AttemptUpdate]  # attempt updates to save (`binding.observed`)
    retiring: list[int]  # automatic watches to retire
    commands: list[dict]  # the newest command actions it was assembled from


class _Clock:
    """Laps of one snapshot's phases into `into`, in milliseconds (cheap: one perf_counter)."""

    def __init__(self, into: dict[str, float]) -> None:
        self.into = into
        self.started = time.perf_counter()

    def lap(self, phase: str) -> None:
        moment = time.perf_counter()
        self.into[phase] = (moment - self.started) * 1000
        self.started = moment


def build_narrative(objective: str, entries: list[JournalEntry]) -> Narrative:
    """The journal as current state: the latest objective and fact values win."""
    narrative = Narrative(objective=objective)
    for entry in entries:
        entry = redact.scrub(entry)
        narrative.last_entry_id = max(narrative.last_entry_id, entry.id)
        if entry.kind == "objective":
            narrative.objective = entry.text
        elif entry.kind == "fact" and entry.key:
            narrative.facts[entry.key] = entry.text
        else:
            getattr(narrative, _NARRATIVE_LISTS[entry.kind]).append(entry)
    narrative.objective = redact.text(narrative.objective)
    return narrative


def name_log_writers(seen: Observations) -> None:
    """A log's writer by the name the process table gives it: torchrun's main thread calls
    itself `pt_elastic`, and its log read "Written by pid N pt_elastic" beside a table
    calling the same pid `torchrun`."""
    named = {(p.host, p.pid): typed_name(p.argv) for p in seen.processes.items if p.argv}
    for log in seen.logs.items:
        name = named.get((log.host, log.writer_pid or 0))  # a peer's log: that peer's process
        if name is not None:
            log.writer_name = name
