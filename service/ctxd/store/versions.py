"""The store's snapshot rows: versions, content-addressed sections, Markdown, pruning."""

import json
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlite_utils import Database

from ctxd.errors import NotFound
from ctxd.models import Snapshot, SnapshotSummary
from ctxd.store import search_index as store_search
from ctxd.store import sections as store_sections
from ctxd.store.connection import Connection, iso, now
from ctxd.store.sql import insert_rows


class SnapshotRows(Connection):
    """Snapshots of sessions, each a version; the store's sessions part builds on this."""

    # --- snapshots --------------------------------------------------------------------------

    def add_snapshot(
        self, sid: str, build: Callable[[int], tuple[Snapshot, str]], content_key: str = ""
    ) -> Snapshot:
        """Assign the next version, let `build` fill it in, and commit both together.

        The version is chosen inside the write transaction, so two concurrent requests
        can never get the same number, and a failed build leaves no gap.
        """
        with self._tx() as db:
            self._require_session(sid)
            # read and written under one lock and transaction: the number cannot race
            version = self.latest_version(sid) + 1
            snapshot, markdown = build(version)
            row = {
                "session": sid,
                "version": version,
                "taken_at": iso(snapshot.header.taken_at),
                "trigger": snapshot.header.trigger,
                "signals": len(snapshot.signals),
                "changes": len(snapshot.changes),
                "sections": self._put_sections(db, sid, version, snapshot),
                "markdown_z": self._encode_markdown(sid, version, markdown),
                "content_key": content_key,
            }
            insert_rows(db, "snapshots", [row])
            store_search.index_dump(db, sid, version, iso(snapshot.header.taken_at), markdown)
        return snapshot

    def _put_sections(self, db: Database, sid: str, version: int, snapshot: Snapshot) -> str:
        """Store each section once by its hash (see store_sections); returns the version's
        `sections` column."""
        previous = store_sections.references(db, sid, version - 1)
        parts = store_sections.parts_of(snapshot)
        refs = store_sections.put(db, parts, previous)
        return store_sections.pack(db, sid, version, refs)

    def confirm_snapshot(self, sid: str, version: int, at: datetime) -> None:
        """A trigger found nothing new: the latest version is still true as of `at`."""
        with self._tx() as db:
            db.execute(
                "update snapshots set confirmed_at = ?, confirmations = confirmations + 1"
                " where session = ? and version = ?",
                [iso(at), sid, version],
            )

    def set_markdown(self, sid: str, version: int, markdown: str) -> None:
        """The latest version's dump, rewritten (a confirmation); no later version leans on it."""
        with self._tx() as db:
            db.execute(
                "update snapshots set markdown_z = ? where session = ? and version = ?",
                [self._encode_markdown(sid, version, markdown), sid, version],
            )
            at = self._snapshot_row(sid, version, "taken_at")["taken_at"]
            store_search.index_dump(db, sid, version, at, markdown)

    def set_harness_summary(self, sid: str, version: int, summary: dict[str, str]) -> None:
        """A harness's own summary of the conversation it compacted ({harness, text, at}),
        kept with the version taken as it compacted, beside ctxd's dump of it."""
        self._snapshot_row(sid, version, "version")  # NotFound for a version not there
        with self._tx() as db:
            db.execute(
                "update snapshots set harness_summary = ? where session = ? and version = ?",
                [json.dumps(summary), sid, version],
            )

    def harness_summary(self, sid: str, version: int) -> dict[str, str] | None:
        """The harness's summary kept with this version ({harness, text, at}), or None."""
        raw = self._snapshot_row(sid, version, "harness_summary")["harness_summary"]
        return json.loads(raw) if raw else None

    def content_key(self, sid: str, version: int) -> str:
        return self._snapshot_row(sid, version, "content_key")["content_key"] or ""

    def last_snapshot_at(self, sid: str) -> datetime:
        """When a snapshot of the session was last taken or confirmed (the epoch if never)."""
        rows = self._rows(
            "select max(max(taken_at, coalesce(confirmed_at, ''))) t from snapshots"
            " where session = ?",
            [sid],
        )
        return datetime.fromisoformat(rows[0]["t"]) if rows[0]["t"] else _EPOCH

    def latest_version(self, sid: str) -> int:
        rows = self._rows("select max(version) v from snapshots where session = ?", [sid])
        return rows[0]["v"] or 0

    def get_snapshot(self, sid: str, version: int, parts: frozenset[str] | None = None) -> Snapshot:
        """One version; with `parts` (e.g. "signals", "observations.processes") only those
        sections are read, and the others keep their empty defaults."""
        row = self._snapshot_row(sid, version, "body, sections, confirmed_at, confirmations")
        if row["sections"] is None:  # written before sections existed
            snapshot = Snapshot.model_validate_json(row["body"])
        else:
            with self._lock:
                refs = store_sections.unpack(self.db, sid, json.loads(row["sections"]))
                if parts is not None:
                    refs = {k: v for k, v in refs.items() if k == "header" or k in parts}
                snapshot = Snapshot.model_validate(store_sections.load(self.db, refs))
        if row["confirmed_at"]:
            snapshot.header.confirmed_at = datetime.fromisoformat(row["confirmed_at"])
            snapshot.header.confirmations = row["confirmations"]
        return snapshot

    def get_markdown(self, sid: str, version: int) -> str:
        row = self._snapshot_row(sid, version, "markdown, markdown_z")
        data = row["markdown_z"]
        if data is None:
            return str(row["markdown"])
        with self._lock:
            return markdown_of(self.db, sid, data)

    # A dump is stored whole (zlib) every KEYFRAME_EVERY versions; the others as zlib with the
    # keyframe's dump as preset dictionary: a version that adds a log line costs a few hundred
    # bytes, not a compressed dump, and any version reads back with two decompressions.

    def _encode_markdown(self, sid: str, version: int, markdown: str) -> bytes:
        rows = self._rows(
            "select version, markdown_z from snapshots where session = ? and version < ?"
            " order by version desc limit 1",
            [sid, version],
        )
        raw = markdown.encode()
        if not rows or rows[0]["markdown_z"] is None:
            return zlib.compress(raw, 6)
        previous = rows[0]
        base = _delta_base(previous["markdown_z"]) or previous["version"]
        if version - base >= KEYFRAME_EVERY:
            return zlib.compress(raw, 6)
        if base == previous["version"]:
            key_z = previous["markdown_z"]
        else:
            key_z = self._snapshot_row(sid, base, "markdown_z")["markdown_z"]
        return _delta(raw, zlib.decompress(key_z), base)

    def _snapshot_row(self, sid: str, version: int, columns: str) -> dict:
        rows = self._rows(
            f"select {columns} from snapshots where session = ? and version = ?", [sid, version]
        )
        if not rows:
            self._require_session(sid)
            raise NotFound(f"no version {version} in session '{sid}'")
        return rows[0]

    def list_snapshots(self, sid: str) -> list[SnapshotSummary]:
        self._require_session(sid)
        rows = self._rows(
            "select session, version, taken_at, trigger, signals, changes, confirmed_at"
            " from snapshots where session = ? order by version desc",
            [sid],
        )
        return [SnapshotSummary.model_validate(r) for r in rows]

    def iter_versions(self) -> Iterator[tuple[str, int, bool]]:
        """Every stored version as (session, version, is_latest), for rebuilding files."""
        rows = self._rows(
            "select s.session, s.version,"
            " s.version = (select max(version) from snapshots where session = s.session) latest"
            " from snapshots s order by s.session, s.version"
        )
        for r in rows:
            yield r["session"], r["version"], bool(r["latest"])

    def prune(self, keep_days: int, at: datetime | None = None) -> list[tuple[str, int]]:
        """Thin out versions older than `keep_days`: keep one a day (the day's last), and the
        first and last of each session. Returns the (session, version) pairs removed."""
        cutoff = (at or now()) - timedelta(days=keep_days)
        rows = self._rows(
            "select session, version, taken_at from snapshots order by session, version"
        )
        by_session: dict[str, list[dict]] = {}
        for r in rows:
            by_session.setdefault(r["session"], []).append(r)
        doomed = []
        for sid, versions in by_session.items():
            keep = {versions[0]["version"], versions[-1]["version"]}
            last_of_day: dict[str, int] = {}
            for r in versions:
                last_of_day[r["taken_at"][:10]] = r["version"]
            keep |= set(last_of_day.values())
            doomed += [
                (sid, r["version"])
                for r in versions
                if r["version"] not in keep and datetime.fromisoformat(r["taken_at"]) < cutoff
            ]
        with self._tx() as db:
            self._rekey(doomed)
            for sid, version in doomed:
                db.execute(
                    "delete from snapshots where session = ? and version = ?", [sid, version]
                )
            store_sections.collect_garbage(db)
            store_search.after_prune(db)
        return doomed

    def _rekey(self, doomed: list[tuple[str, int]]) -> None:
        """Versions that stay but lean on a keyframe about to go are stored whole first."""
        gone = set(doomed)
        store_sections.rekey(self.db, gone)
        for sid in {sid for sid, _ in doomed}:
            rows = self._rows(
                "select version, markdown_z from snapshots where session = ?"
                " and substr(markdown_z, 1, 2) = ?",
                [sid, DELTA],
            )
            for row in rows:
                base = _delta_base(row["markdown_z"])
                if (sid, row["version"]) not in gone and (sid, base) in gone:
                    whole = zlib.compress(self.get_markdown(sid, row["version"]).encode(), 6)
                    self.db.execute(
                        "update snapshots set markdown_z = ? where session = ? and version = ?",
                        [whole, sid, row["version"]],
                    )

    def size_bytes(self) -> int:
        """The database with its WAL: what the data dir's truth costs on disk."""
        return sum(p.stat().st_size for p in _db_files(self.path))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
KEYFRAME_EVERY = 32
DELTA = b"\x00d"  # never the start of a zlib stream (0x78 ...)


def markdown_of(db: Database, sid: str, data: bytes) -> str:
    """A stored dump as text: whole, or a delta of its session's keyframe version's dump."""
    base = _delta_base(data)
    if base is None:
        return zlib.decompress(data).decode()
    key = db.execute(
        "select markdown_z from snapshots where session = ? and version = ?", [sid, base]
    ).fetchone()
    if key is None or key[0] is None:
        raise NotFound(f"the dump version {base} of session '{sid}' is gone")
    return _undelta(data, zlib.decompress(key[0])).decode()


def _delta(raw: bytes, key: bytes, base: int) -> bytes:
    packer = zlib.compressobj(6, zdict=key[-32768:])  # zlib looks back 32 KB at most
    return DELTA + base.to_bytes(4, "big") + packer.compress(raw) + packer.flush()


def _delta_base(data: bytes) -> int | None:
    """The keyframe version a stored dump leans on; None when it is stored whole."""
    return int.from_bytes(data[2:6], "big") if data[:2] == DELTA else None


def _undelta(data: bytes, key: bytes) -> bytes:
    unpacker = zlib.decompressobj(zdict=key[-32768:])
    return unpacker.decompress(data[6:]) + unpacker.flush()


def _db_files(path: Path) -> list[Path]:
    candidates = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    return [p for p in candidates if p.exists()]
