"""The SQLite store: the only module that knows SQL; schema migrations, sessions, versions."""

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

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

DEFAULT_QUIET_AFTER_S = 300

migrations = Migrations("ctxd")


@migrations()
def m001_initial(db: Database) -> None:
    db["sessions"].create(  # type: ignore[union-attr]
        {
            "id": str,
            "title": str,
            "objective": str,
            "quiet_after_s": int,
            "created_at": str,
            "last_activity_at": str,
        },
        pk="id",
    )
    db["watches"].create(  # type: ignore[union-attr]
        {"id": int, "session": str, "spec": str, "created_at": str},
        pk="id",
        foreign_keys=[("session", "sessions", "id")],
    )
    db["watches"].create_index(["session"])  # type: ignore[union-attr]
    db["journal"].create(  # type: ignore[union-attr]
        {
            "id": int,
            "session": str,
            "kind": str,
            "text": str,
            "outcome": str,
            "status": str,
            "key": str,
            "created_at": str,
        },
        pk="id",
        foreign_keys=[("session", "sessions", "id")],
    )
    db["journal"].create_index(["session"])  # type: ignore[union-attr]
    db["snapshots"].create(  # type: ignore[union-attr]
        {
            "id": int,
            "session": str,
            "version": int,
            "taken_at": str,
            "trigger": str,
            "signals": int,
            "changes": int,
            "body": str,
            "markdown": str,
        },
        pk="id",
        foreign_keys=[("session", "sessions", "id")],
    )
    db["snapshots"].create_index(["session", "version"], unique=True)  # type: ignore[union-attr]


@migrations()
def m002_last_message(db: Database) -> None:
    db["sessions"].add_column("last_message", str)  # type: ignore[union-attr]
    db["sessions"].add_column("last_message_at", str)  # type: ignore[union-attr]


class NotFound(LookupError):
    """A session, watch, entry or version that does not exist."""


def now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat()


class Store:
    """One connection, one writer: every call holds the lock, so versions never race."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
        self.db = Database(conn)
        self.db.enable_wal()
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.execute("PRAGMA busy_timeout=30000")
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
            fields = {k: v for k, v in data.model_dump(exclude_none=True).items()}
            if exists:
                if fields:
                    db["sessions"].update(sid, fields)  # type: ignore[union-attr]
            else:
                db["sessions"].insert(  # type: ignore[union-attr]
                    {
                        "id": sid,
                        "title": fields.get("title", ""),
                        "objective": fields.get("objective", ""),
                        "quiet_after_s": fields.get("quiet_after_s", DEFAULT_QUIET_AFTER_S),
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

    def list_sessions(self) -> list[Session]:
        rows = self._rows(_SESSION_SQL + " order by s.last_activity_at desc")
        return [Session.model_validate(r) for r in rows]

    def touch(self, sid: str, message: str | None = None) -> None:
        """Record activity (and the latest user message, if one came)."""
        moment = _iso(now())
        fields: dict[str, str] = {"last_activity_at": moment}
        if message is not None:
            fields.update(last_message=message, last_message_at=moment)
        with self._tx() as db:
            self.get_session(sid)
            db["sessions"].update(sid, fields)  # type: ignore[union-attr]

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
                raise OverflowError(f"session '{sid}' already has {count} watches (limit {limit})")
            table = db["watches"]
            table.insert(  # type: ignore[union-attr]
                {"session": sid, "spec": spec.model_dump_json(), "created_at": _iso(now())}
            )
            wid = int(table.last_pk)  # type: ignore[union-attr,arg-type]
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
            db["watches"].delete(wid)  # type: ignore[union-attr]

    # --- journal ----------------------------------------------------------------------------

    def add_entry(self, sid: str, entry: JournalIn) -> JournalEntry:
        with self._tx() as db:
            self.get_session(sid)
            table = db["journal"]
            table.insert(  # type: ignore[union-attr]
                {"session": sid, "created_at": _iso(now()), **entry.model_dump()}
            )
            eid = table.last_pk  # type: ignore[union-attr]
        return JournalEntry.model_validate(
            self._rows("select * from journal where id = ?", [eid])[0]
        )

    def list_entries(self, sid: str) -> list[JournalEntry]:
        self.get_session(sid)
        rows = self._rows("select * from journal where session = ? order by id", [sid])
        return [JournalEntry.model_validate(r) for r in rows]

    # --- snapshots --------------------------------------------------------------------------

    def add_snapshot(self, sid: str, build: Callable[[int], tuple[Snapshot, str]]) -> Snapshot:
        """Assign the next version, let `build` fill it in, and commit both together.

        The version is chosen inside the write transaction, so two concurrent requests
        can never get the same number, and a failed build leaves no gap.
        """
        with self._tx() as db:
            self.get_session(sid)
            version = self.latest_version(sid) + 1
            snapshot, markdown = build(version)
            db["snapshots"].insert(  # type: ignore[union-attr]
                {
                    "session": sid,
                    "version": version,
                    "taken_at": _iso(snapshot.header.taken_at),
                    "trigger": snapshot.header.trigger,
                    "signals": len(snapshot.signals),
                    "changes": len(snapshot.changes),
                    "body": snapshot.model_dump_json(),
                    "markdown": markdown,
                }
            )
        return snapshot

    def latest_version(self, sid: str) -> int:
        rows = self._rows("select max(version) v from snapshots where session = ?", [sid])
        return rows[0]["v"] or 0

    def get_snapshot(self, sid: str, version: int) -> Snapshot:
        return Snapshot.model_validate_json(self._snapshot_column(sid, version, "body"))

    def get_markdown(self, sid: str, version: int) -> str:
        return self._snapshot_column(sid, version, "markdown")

    def _snapshot_column(self, sid: str, version: int, column: str) -> str:
        rows = self._rows(
            f"select {column} from snapshots where session = ? and version = ?", [sid, version]
        )
        if not rows:
            self.get_session(sid)
            raise NotFound(f"no version {version} in session '{sid}'")
        return rows[0][column]

    def list_snapshots(self, sid: str) -> list[SnapshotSummary]:
        self.get_session(sid)
        rows = self._rows(
            "select session, version, taken_at, trigger, signals, changes from snapshots"
            " where session = ? order by version desc",
            [sid],
        )
        return [SnapshotSummary.model_validate(r) for r in rows]

    def iter_markdown(self) -> Iterator[tuple[str, int, str, bool]]:
        """Every stored dump as (session, version, markdown, is_latest), for rebuilding files."""
        rows = self._rows(
            "select s.session, s.version, s.markdown,"
            " s.version = (select max(version) from snapshots where session = s.session) latest"
            " from snapshots s order by s.session, s.version"
        )
        for r in rows:
            yield r["session"], r["version"], r["markdown"], bool(r["latest"])


_SESSION_SQL = (
    "select s.id, s.title, s.objective, s.quiet_after_s, s.created_at, s.last_activity_at,"
    " (select count(*) from snapshots where session = s.id) versions from sessions s"
)


def _watch(row: dict) -> Watch:
    return Watch.model_validate(
        {
            "id": row["id"],
            "session": row["session"],
            "created_at": row["created_at"],
            "spec": json.loads(row["spec"]),
        }
    )
