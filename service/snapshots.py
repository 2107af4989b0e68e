"""Builds a Snapshot: run collectors, redact, derive signals and changes, store, write files."""

import logging
import os
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime
from pathlib import Path
from typing import Any

from service import changes, redact, render, signals
from service.collectors import CollectContext, registry
from service.models import (
    JournalEntry,
    Narrative,
    Observations,
    Snapshot,
    SnapshotHeader,
    Unavailable,
)
from service.settings import Settings
from service.store import Store, now

log = logging.getLogger(__name__)

_NARRATIVE_LISTS = {
    "attempt": "attempts",
    "finding": "findings",
    "hypothesis": "findings",
    "decision": "decisions",
    "next": "next_steps",
    "question": "questions",
    "note": "notes",
}


class Snapshotter:
    """Owns what outlives one snapshot: collector memory per session and the per-session lock."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self._memory: dict[str, dict[str, Any]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="collector")
        self._size_cache: tuple[float, int] = (0.0, 0)
        self._inflight: dict[tuple[str, str], Future] = {}
        # The newest dump of each session, as written: resume reads it without any I/O.
        self._latest: dict[str, str] = {}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _lock(self, sid: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(sid, threading.Lock())

    def observe(
        self,
        sid: str,
        previous: Observations | None = None,
        purpose: str = "snapshot",
        only: frozenset[str] | None = None,
    ) -> Observations:
        """Run every collector over the session's watches; a failure is a section, not a raise.

        Collector memory (read offsets, CPU baselines) is kept per purpose, so the watcher's
        cheap probes never consume what the next real snapshot should report.
        """
        watches = self.store.list_watches(sid)
        key = f"{purpose}:{sid}"
        memory = self._memory.setdefault(key, {})
        ctx = CollectContext(
            settings=self.settings, previous=previous, memory=memory, probe=purpose == "probe"
        )
        chosen = [c for c in registry() if only is None or c.NAME in only]
        # All collectors start at once: most of their time is spent in system calls, so the
        # snapshot costs about the slowest of them, not their sum. Each has its own deadline.
        deadline = time.monotonic() + self.settings.limits.collector_timeout_s
        sections = {}
        for name, future in [(c.NAME, self._submit(key, c, watches, ctx)) for c in chosen]:
            sections[name] = (
                self._result(name, future, deadline) if future is not None else _busy(name)
            )
        observations = Observations.model_validate(sections)
        # A probe is compared and dropped, never kept or shown; what it reports goes through
        # the redactor as the event snapshot's note.
        return observations if ctx.probe else redact.scrub(observations)

    def _submit(
        self, key: str, collector: Any, watches: list, ctx: CollectContext
    ) -> Future | None:
        """Start a collector, unless its previous run for the same memory is still going: a
        timed-out collector cannot be stopped, and two runs must not share one memory."""
        with self._guard:
            running = self._inflight.get((key, collector.NAME))
            if running is not None and not running.done():
                return None
            future = self._pool.submit(collector.collect, watches, ctx)
            self._inflight[(key, collector.NAME)] = future
            return future

    def _result(self, name: str, future: Future, deadline: float) -> Any:
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            reason = f"timed out after {self.settings.limits.collector_timeout_s:g} s"
        except Exception as exc:  # a collector bug must not cost the whole dump
            log.exception("collector %s failed", name)
            reason = f"collector failed: {type(exc).__name__}"
        return {"unavailable": [Unavailable(target=name, reason=reason)]}

    def assemble(
        self, sid: str, trigger: str, note: str | None = None, purpose: str = "snapshot"
    ) -> Snapshot:
        """Observe and describe the session now, as the version after the latest stored one."""
        started = time.perf_counter()
        session = self.store.get_session(sid)
        latest = self.store.latest_version(sid)
        previous = self.store.get_snapshot(sid, latest) if latest else None
        before = previous.observations if previous else None
        observations = self.observe(sid, before, purpose=purpose)
        narrative = build_narrative(session.objective, self.store.list_entries(sid))
        message, _ = self.store.last_message(sid)
        narrative.latest_message = redact.text(message) if message else None
        snapshot = Snapshot(
            header=SnapshotHeader(
                session=sid,
                version=latest + 1,
                taken_at=now(),
                trigger=trigger,
                previous_version=previous.header.version if previous else None,
                previous_taken_at=previous.header.taken_at if previous else None,
                host=observations.host.hostname or socket.gethostname(),
                note=redact.text(note) if note else None,
                data_dir_bytes=self.data_dir_bytes(),
            ),
            title=session.title,
            narrative=narrative,
            signals=signals.derive(observations, before),
            observations=observations,
        )
        snapshot.changes = changes.compare(previous, snapshot)
        snapshot.header.duration_ms = (time.perf_counter() - started) * 1000
        return snapshot

    def take(
        self, sid: str, trigger: str = "manual", note: str | None = None, force: bool = False
    ) -> Snapshot:
        """Store version N+1, or, when nothing changed (and not `force`), confirm version N.

        Returns only after the commit, and after the Markdown files are written.
        """
        with self._lock(sid):
            snapshot = self.assemble(sid, trigger, note)
            key = changes.content_key(snapshot)
            latest = snapshot.header.previous_version
            if latest and not force and key == self.store.content_key(sid, latest):
                return self._confirm(sid, latest, snapshot.header.taken_at)

            rendered: list[str] = []

            def build(version: int) -> tuple[Snapshot, str]:
                snapshot.header.version = version
                rendered.append(self.render(snapshot))
                return snapshot, rendered[-1]

            self.store.add_snapshot(sid, build, key)
            # the committed text, as rendered: no need to read it back and decompress it
            self.write_files(sid, snapshot.header.version, rendered[-1], latest=True)
            return snapshot

    def _confirm(self, sid: str, version: int, at: datetime) -> Snapshot:
        self.store.confirm_snapshot(sid, version, at)
        stored = self.store.get_snapshot(sid, version)
        markdown = self.render(stored)
        self.store.set_markdown(sid, version, markdown)
        self.write_files(sid, version, markdown, latest=True)
        return stored

    def preview(self, sid: str) -> tuple[Snapshot, str]:
        """A fresh dump that is not stored: what a snapshot would say now."""
        # its own collector memory: a look at the live state must not consume the news
        # (new log errors, growth) that the next stored snapshot has to report
        snapshot = self.assemble(sid, trigger="preview", purpose="preview")
        return snapshot, self.render(snapshot)

    def render(self, snapshot: Snapshot) -> str:
        sid, version = snapshot.header.session, snapshot.header.version
        base = self.settings.base_url
        location = (
            f"- Markdown: `{(self.session_dir(sid) / version_file(version)).resolve()}`\n"
            f"- JSON: {base}/api/sessions/{sid}/snapshots/{version}\n"
            f"- Resume: {base}/api/sessions/{sid}/resume"
        )
        return render.render_dump(snapshot, location=location)

    def data_dir_bytes(self) -> int:
        """Database plus Markdown files; cached for a minute, as walking the folder costs."""
        stamp, size = self._size_cache
        if time.monotonic() - stamp > 60:
            size = self.store.size_bytes() + sum(
                p.stat().st_size for p in self.settings.data_dir.glob("*/*.md") if p.is_file()
            )
            self._size_cache = (time.monotonic(), size)
        return size

    def prune(self, keep_days: int) -> int:
        """Thin out old versions in the database, then remove their Markdown files."""
        removed = self.store.prune(keep_days)
        for sid, version in removed:
            (self.session_dir(sid) / version_file(version)).unlink(missing_ok=True)
        self._size_cache = (0.0, 0)
        return len(removed)

    def session_dir(self, sid: str) -> Path:
        return self.settings.data_dir / sid

    def write_files(self, sid: str, version: int, markdown: str, *, latest: bool) -> None:
        folder = self.session_dir(sid)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / version_file(version), markdown)
        if latest:
            link_atomic(folder / version_file(version), folder / "latest.md")
            self._latest[sid] = markdown

    def latest_in_memory(self, sid: str) -> str | None:
        """The newest stored dump of a session, if written or checked since start-up."""
        return self._latest.get(sid)

    def rebuild_files(self) -> int:
        """Rewrite any Markdown file missing on disk from the database (the truth)."""
        written = 0
        for sid, version, is_latest in self.store.iter_versions():
            folder = self.session_dir(sid)
            missing = not (folder / version_file(version)).exists()
            if not (missing or is_latest):
                continue
            markdown = self.store.get_markdown(sid, version)
            if is_latest:
                self._latest[sid] = markdown
            stale_latest = is_latest and _differs(folder / "latest.md", markdown)
            if missing or stale_latest:
                folder.mkdir(parents=True, exist_ok=True)
                if missing:
                    write_atomic(folder / version_file(version), markdown)
                if stale_latest:
                    link_atomic(folder / version_file(version), folder / "latest.md")
                written += 1
        return written


def _busy(name: str) -> dict[str, list[Unavailable]]:
    reason = "still busy: its previous run has not finished (a hung filesystem or probe?)"
    return {"unavailable": [Unavailable(target=name, reason=reason)]}


def version_file(version: int) -> str:
    return f"v{version:04d}.md"


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


def write_atomic(path: Path, text: str) -> None:
    """Temp file in the same folder, fsync, rename: a reader sees the old file or the new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def link_atomic(target: Path, link: Path) -> None:
    """`link` becomes another name of `target`'s content, atomically: no second copy to sync."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        os.link(target, tmp)
        os.replace(tmp, link)
    except OSError:  # a filesystem without hard links gets a copy
        write_atomic(link, target.read_text(encoding="utf-8"))
    finally:
        tmp.unlink(missing_ok=True)


def _differs(path: Path, text: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") != text
    except OSError:
        return True
