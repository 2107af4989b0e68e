"""Builds a Snapshot: run collectors, redact, derive signals and changes, store, write files."""

import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
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
    Watch,
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

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _lock(self, sid: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(sid, threading.Lock())

    def observe(self, sid: str, previous: Observations | None = None) -> Observations:
        """Run every collector over the session's watches; a failure is a section, not a raise."""
        watches = self.store.list_watches(sid)
        ctx = CollectContext(
            settings=self.settings, previous=previous, memory=self._memory.setdefault(sid, {})
        )
        sections: dict[str, Any] = {}
        for collector in registry():
            sections[collector.NAME] = self._run(collector, watches, ctx)
        return redact.scrub(Observations.model_validate(sections))

    def _run(self, collector: Any, watches: list[Watch], ctx: CollectContext) -> Any:
        timeout = self.settings.limits.collector_timeout_s
        future = self._pool.submit(collector.collect, watches, ctx)
        try:
            return future.result(timeout=timeout)
        except FutureTimeout:
            reason = f"timed out after {timeout:g} s"
        except Exception as exc:  # a collector bug must not cost the whole dump
            log.exception("collector %s failed", collector.NAME)
            reason = f"collector failed: {type(exc).__name__}"
        failed = {"target": collector.NAME, "reason": reason}
        return {"unavailable": [Unavailable(**failed)]}

    def take(self, sid: str, trigger: str = "manual", note: str | None = None) -> Snapshot:
        """Take, store and write version N+1; returns only after the commit."""
        with self._lock(sid):
            started = time.perf_counter()
            session = self.store.get_session(sid)
            latest = self.store.latest_version(sid)
            previous = self.store.get_snapshot(sid, latest) if latest else None
            observations = self.observe(sid, previous.observations if previous else None)
            narrative = build_narrative(session.objective, self.store.list_entries(sid))
            message, _ = self.store.last_message(sid)

            def build(version: int) -> tuple[Snapshot, str]:
                snapshot = Snapshot(
                    header=SnapshotHeader(
                        session=sid,
                        version=version,
                        taken_at=now(),
                        trigger=trigger,
                        previous_version=previous.header.version if previous else None,
                        previous_taken_at=previous.header.taken_at if previous else None,
                        host=observations.host.hostname or socket.gethostname(),
                        note=redact.text(note) if note else None,
                    ),
                    title=session.title,
                    narrative=narrative,
                    signals=signals.derive(
                        observations, previous.observations if previous else None
                    ),
                    observations=observations,
                )
                snapshot.changes = changes.compare(previous, snapshot)
                snapshot.header.duration_ms = (time.perf_counter() - started) * 1000
                return snapshot, self.render(snapshot, message)

            snapshot = self.store.add_snapshot(sid, build)
            markdown = self.store.get_markdown(sid, snapshot.header.version)
            self.write_files(sid, snapshot.header.version, markdown, latest=True)
            return snapshot

    def preview(self, sid: str, trigger: str = "preview") -> tuple[Snapshot, str]:
        """A fresh dump that is not stored (for `resume?fresh=true` without a new version)."""
        session = self.store.get_session(sid)
        latest = self.store.latest_version(sid)
        previous = self.store.get_snapshot(sid, latest) if latest else None
        observations = self.observe(sid, previous.observations if previous else None)
        snapshot = Snapshot(
            header=SnapshotHeader(
                session=sid,
                version=latest + 1,
                taken_at=now(),
                trigger=trigger,
                host=observations.host.hostname,
            ),
            title=session.title,
            narrative=build_narrative(session.objective, self.store.list_entries(sid)),
            signals=signals.derive(observations, previous.observations if previous else None),
            observations=observations,
        )
        return snapshot, self.render(snapshot, self.store.last_message(sid)[0])

    def render(self, snapshot: Snapshot, message: str | None) -> str:
        sid, version = snapshot.header.session, snapshot.header.version
        location = (
            f"- Markdown: `{self.session_dir(sid).name}/{version_file(version)}` in the data dir\n"
            f"- JSON: `{self.settings.base_url}/api/sessions/{sid}/snapshots/{version}`\n"
            f"- Resume: `{self.settings.base_url}/api/sessions/{sid}/resume`"
        )
        return render.render_dump(
            snapshot, location=location, latest_message=redact.text(message) if message else None
        )

    def session_dir(self, sid: str) -> Path:
        return self.settings.data_dir / sid

    def write_files(self, sid: str, version: int, markdown: str, *, latest: bool) -> None:
        folder = self.session_dir(sid)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / version_file(version), markdown)
        if latest:
            write_atomic(folder / "latest.md", markdown)

    def rebuild_files(self) -> int:
        """Rewrite any Markdown file missing on disk from the database (the truth)."""
        written = 0
        for sid, version, markdown, is_latest in self.store.iter_markdown():
            folder = self.session_dir(sid)
            missing = not (folder / version_file(version)).exists()
            stale_latest = is_latest and _differs(folder / "latest.md", markdown)
            if missing or stale_latest:
                folder.mkdir(parents=True, exist_ok=True)
                if missing:
                    write_atomic(folder / version_file(version), markdown)
                if stale_latest:
                    write_atomic(folder / "latest.md", markdown)
                written += 1
        return written


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


def _differs(path: Path, text: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") != text
    except OSError:
        return True
