"""The SQLite store: the only module that knows SQL; it stores what it is given.

Redaction and the rules of agent-written input are the use cases' (`service/usecases.py`);
the schema's migrations are in `store_schema.py`.
"""

import hashlib
import json
import sqlite3
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlite_utils import Database
from sqlite_utils.db import Table

from service.errors import LimitReached, NotFound
from service.models import (
    JournalEntry,
    JournalIn,
    Session,
    SessionIn,
    Snapshot,
    SnapshotSummary,
    Watch,
    WatchSpec,
)
from service.store_schema import migrations

DEFAULT_QUIET_AFTER_S = 300


def now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat()


class Store:
    """One connection, one writer: every call holds the lock, so versions never race."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
        self.db = Database(conn)
        self.db.enable_wal()
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.execute("PRAGMA busy_timeout=30000")
        # Without a limit the WAL file keeps its high-water size (4 MB+) after checkpoints.
        self.db.execute("PRAGMA journal_size_limit=1048576")
        self.db.execute("PRAGMA wal_autocheckpoint=256")
        self._lock = threading.RLock()
        with self._lock:
            migrations.apply(self.db)

    def close(self) -> None:
        with self._lock:
            self.db.close()

    @contextmanager
    def _tx(self) -> Iterator[Database]:
        with self._lock, self.db.atomic():
            yield self.db

    def _rows(self, sql: str, params: tuple | list = ()) -> list[dict]:
        with self._lock:
            return list(self.db.query(sql, params))

    # --- sessions ---------------------------------------------------------------------------

    def put_session(self, sid: str, data: SessionIn) -> tuple[Session, bool]:
        """Create or update a session; returns it and whether it was created."""
        moment = _iso(now())
        with self._tx() as db:
            exists = bool(self._rows("select 1 from sessions where id = ?", [sid]))
            fields = data.model_dump(exclude_none=True)
            if exists:
                if fields:
                    db.table("sessions").update(sid, fields)
            else:
                db.table("sessions").insert(
                    {
                        "title": "",
                        "objective": "",
                        "quiet_after_s": DEFAULT_QUIET_AFTER_S,
                        **fields,
                        "id": sid,
                        "created_at": moment,
                        "last_activity_at": moment,
                    }
                )
        return self.get_session(sid), not exists

    def get_session(self, sid: str) -> Session:
        rows = self._rows(_SESSION_SQL + " where s.id = ?", [sid])
        if not rows:
            raise NotFound(f"no session '{sid}'")
        return Session.model_validate(rows[0])

    def list_sessions(self, cwd: str | None = None) -> list[Session]:
        """All sessions, newest activity first; with `cwd`, those scoped to it or a parent."""
        rows = self._rows(_SESSION_SQL + " order by s.last_activity_at desc")
        sessions = [Session.model_validate(r) for r in rows]
        if cwd is None:
            return sessions
        target = Path(cwd)
        scoped = [s for s in sessions if s.cwd and _within(target, Path(s.cwd))]
        return sorted(scoped, key=lambda s: len(s.cwd or ""), reverse=True)

    def touch(self, sid: str, message: str | None = None, at: datetime | None = None) -> None:
        """Record activity (and the latest user message, if one came)."""
        moment = _iso(at or now())
        fields: dict[str, str] = {"last_activity_at": moment}
        if message is not None:
            fields.update(last_message=message, last_message_at=moment)
        with self._tx() as db:
            self.get_session(sid)
            db.table("sessions").update(sid, fields)

    def last_message(self, sid: str) -> tuple[str | None, datetime | None]:
        rows = self._rows("select last_message, last_message_at from sessions where id = ?", [sid])
        if not rows or rows[0]["last_message"] is None:
            return None, None
        return rows[0]["last_message"], datetime.fromisoformat(rows[0]["last_message_at"])

    # --- watches ----------------------------------------------------------------------------

    def add_watch(self, sid: str, spec: WatchSpec, limit: int) -> Watch:
        with self._tx() as db:
            self.get_session(sid)
            count = self._rows("select count(*) n from watches where session = ?", [sid])[0]["n"]
            if count >= limit:
                raise LimitReached(f"session '{sid}' already has {count} watches (limit {limit})")
            row = {"session": sid, "spec": spec.model_dump_json(), "created_at": _iso(now())}
            wid = _new_id(db.table("watches").insert(row))
        return self.get_watch(sid, wid)

    def get_watch(self, sid: str, wid: int) -> Watch:
        rows = self._rows("select * from watches where session = ? and id = ?", [sid, wid])
        if not rows:
            raise NotFound(f"no watch {wid} in session '{sid}'")
        return _watch(rows[0])

    def list_watches(self, sid: str) -> list[Watch]:
        self.get_session(sid)
        rows = self._rows("select * from watches where session = ? order by id", [sid])
        return [_watch(r) for r in rows]

    def delete_watch(self, sid: str, wid: int) -> None:
        with self._tx() as db:
            self.get_watch(sid, wid)
            db.table("watches").delete(wid)

    # --- journal ----------------------------------------------------------------------------

    def add_entry(self, sid: str, entry: JournalIn) -> JournalEntry:
        with self._tx() as db:
            self.get_session(sid)
            row = entry.model_dump()
            row["concerns"] = json.dumps(row["concerns"])
            journal = db.table("journal")
            eid = _new_id(journal.insert({"session": sid, "created_at": _iso(now()), **row}))
        return self.get_entry(sid, eid)

    def update_entry(self, sid: str, eid: int, fields: dict[str, Any]) -> JournalEntry:
        """Set the given columns of an entry (text, outcome, status, concerns)."""
        fields = dict(fields)
        with self._tx() as db:
            self.get_entry(sid, eid)
            if "concerns" in fields:
                fields["concerns"] = json.dumps(fields["concerns"] or [])
            db.table("journal").update(eid, {**fields, "updated_at": _iso(now())})
        return self.get_entry(sid, eid)

    def get_entry(self, sid: str, eid: int) -> JournalEntry:
        rows = self._rows("select * from journal where session = ? and id = ?", [sid, eid])
        if not rows:
            self.get_session(sid)
            raise NotFound(f"no journal entry {eid} in session '{sid}'")
        return _entry(rows[0])

    def list_entries(self, sid: str) -> list[JournalEntry]:
        self.get_session(sid)
        rows = self._rows("select * from journal where session = ? order by id", [sid])
        return [_entry(r) for r in rows]

    # --- snapshots --------------------------------------------------------------------------

    def add_snapshot(
        self, sid: str, build: Callable[[int], tuple[Snapshot, str]], content_key: str = ""
    ) -> Snapshot:
        """Assign the next version, let `build` fill it in, and commit both together.

        The version is chosen inside the write transaction, so two concurrent requests
        can never get the same number, and a failed build leaves no gap.
        """
        with self._tx() as db:
            self.get_session(sid)
            # read and written under one lock and transaction: the number cannot race
            version = self.latest_version(sid) + 1
            snapshot, markdown = build(version)
            db.table("snapshots").insert(
                {
                    "session": sid,
                    "version": version,
                    "taken_at": _iso(snapshot.header.taken_at),
                    "trigger": snapshot.header.trigger,
                    "signals": len(snapshot.signals),
                    "changes": len(snapshot.changes),
                    "sections": json.dumps(self._put_sections(db, snapshot)),
                    "markdown_z": zlib.compress(markdown.encode(), 6),
                    "content_key": content_key,
                }
            )
        return snapshot

    def _put_sections(self, db: Database, snapshot: Snapshot) -> dict[str, str]:
        """Store each part once by its hash: an unchanged log tail costs nothing the 2nd time."""
        data = snapshot.model_dump(mode="json")
        parts = {k: v for k, v in data.items() if k != "observations"}
        parts.update({f"observations.{k}": v for k, v in data["observations"].items()})
        refs = {}
        for name, value in parts.items():
            raw = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
            digest = hashlib.sha256(raw).hexdigest()[:32]
            db.execute(
                "insert or ignore into blobs (hash, data) values (?, ?)",
                [digest, zlib.compress(raw, 6)],
            )
            refs[name] = digest
        return refs

    def confirm_snapshot(self, sid: str, version: int, at: datetime) -> None:
        """A trigger found nothing new: the latest version is still true as of `at`."""
        with self._tx() as db:
            db.execute(
                "update snapshots set confirmed_at = ?, confirmations = confirmations + 1"
                " where session = ? and version = ?",
                [_iso(at), sid, version],
            )

    def set_markdown(self, sid: str, version: int, markdown: str) -> None:
        with self._tx() as db:
            db.execute(
                "update snapshots set markdown_z = ? where session = ? and version = ?",
                [zlib.compress(markdown.encode(), 6), sid, version],
            )

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
            refs = json.loads(row["sections"])
            if parts is not None:
                refs = {k: v for k, v in refs.items() if k == "header" or k in parts}
            snapshot = Snapshot.model_validate(self._load_sections(refs))
        if row["confirmed_at"]:
            snapshot.header.confirmed_at = datetime.fromisoformat(row["confirmed_at"])
            snapshot.header.confirmations = row["confirmations"]
        return snapshot

    def _load_sections(self, refs: dict[str, str]) -> dict:
        hashes = sorted(set(refs.values()))
        marks = ",".join("?" * len(hashes))
        rows = self._rows(f"select hash, data from blobs where hash in ({marks})", hashes)
        blobs = {r["hash"]: json.loads(zlib.decompress(r["data"])) for r in rows}
        data: dict = {"observations": {}}
        for name, digest in refs.items():
            if name.startswith("observations."):
                data["observations"][name.split(".", 1)[1]] = blobs[digest]
            else:
                data[name] = blobs[digest]
        return data

    def get_markdown(self, sid: str, version: int) -> str:
        row = self._snapshot_row(sid, version, "markdown, markdown_z")
        if row["markdown_z"] is not None:
            return zlib.decompress(row["markdown_z"]).decode()
        return str(row["markdown"])

    def _snapshot_row(self, sid: str, version: int, columns: str) -> dict:
        rows = self._rows(
            f"select {columns} from snapshots where session = ? and version = ?", [sid, version]
        )
        if not rows:
            self.get_session(sid)
            raise NotFound(f"no version {version} in session '{sid}'")
        return rows[0]

    def list_snapshots(self, sid: str) -> list[SnapshotSummary]:
        self.get_session(sid)
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
            for sid, version in doomed:
                db.execute(
                    "delete from snapshots where session = ? and version = ?", [sid, version]
                )
            db.execute(
                "delete from blobs where hash not in (select value from snapshots,"
                " json_each(snapshots.sections) where snapshots.sections is not null)"
            )
        return doomed

    def size_bytes(self) -> int:
        """The database with its WAL: what the data dir's truth costs on disk."""
        return sum(p.stat().st_size for p in _db_files(self.path))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_SESSION_SQL = (
    "select s.id, s.title, s.objective, s.quiet_after_s, s.schedule_every_s, s.cwd,"
    " s.created_at, s.last_activity_at,"
    " (select count(*) from snapshots where session = s.id) versions from sessions s"
)


def _new_id(table: Table) -> int:
    """The integer primary key of the row `table` just inserted (its rowid)."""
    if table.last_rowid is None:
        raise sqlite3.DatabaseError(f"insert into {table.name} returned no row id")
    return table.last_rowid


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _db_files(path: Path) -> list[Path]:
    candidates = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    return [p for p in candidates if p.exists()]


def _entry(row: dict) -> JournalEntry:
    return JournalEntry.model_validate({**row, "concerns": json.loads(row["concerns"] or "[]")})


def _watch(row: dict) -> Watch:
    return Watch.model_validate(
        {
            "id": row["id"],
            "session": row["session"],
            "created_at": row["created_at"],
            "spec": json.loads(row["spec"]),
        }
    )
