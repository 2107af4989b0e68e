"""The store's connection: one SQLite connection, one lock, the schema applied on open."""

import logging
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sqlite_utils import Database

from ctxd.errors import NotFound
from ctxd.store.schema import migrations
from ctxd.store.sql import select_rows

log = logging.getLogger("ctxd")
WAL_CHECKPOINT_PAGES = 32
WAL_SIZE_LIMIT = 64 * 1024


def now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.isoformat()


class Connection:
    """One connection, one writer: every call holds the lock, so versions never race."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        # True when the data directory cannot be written: what is stored is served, and every
        # write fails as "readonly" (a 503 saying nothing was saved).
        self.read_only = False
        try:
            self.db = self._open_writable(path)
        except (sqlite3.Error, OSError):
            if not path.exists() or os.access(path.parent, os.W_OK):
                raise
            self.db = Database(_open_read_only(path))
            self.read_only = True
            log.warning(
                "the data directory %s is read-only: serving what is stored, read-only; "
                "writes are refused (503) until it is writable and ctxd restarts",
                path.parent,
            )

    def _open_writable(self, path: Path) -> Database:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
        try:
            db = Database(conn)
            db.enable_wal()
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA busy_timeout=30000")
            # The WAL is checkpointed into the database every WAL_CHECKPOINT_PAGES pages (a snapshot
            # or two), and cut back to WAL_SIZE_LIMIT when it starts over: it counts in the
            # data dir's size. A commit is durable in the WAL (synchronous=FULL) before any
            # checkpoint, so how often one runs never decides what survives a crash.
            db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            db.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
            with self._lock:
                migrations.apply(db)
        except BaseException:
            conn.close()
            raise
        return db

    def close(self) -> None:
        with self._lock:
            self.db.close()

    @contextmanager
    def _tx(self) -> Iterator[Database]:
        with self._lock, self.db.atomic():
            yield self.db

    def _rows(self, sql: str, params: tuple | list = ()) -> list[dict]:
        with self._lock:
            return select_rows(self.db, sql, params)

    def _require_session(self, sid: str) -> None:
        if not self._rows("select 1 from sessions where id = ?", [sid]):
            raise NotFound(f"no session '{sid}'")


def _open_read_only(path: Path) -> sqlite3.Connection:
    """The database in a directory that cannot be written. Without a -wal file nothing is
    pending, and `immutable` lets SQLite read it without creating the -shm file it cannot
    create; with one (after a crash), a plain read-only open needs its -shm to be there."""
    wal = path.with_name(path.name + "-wal")
    query = "?mode=ro" if wal.exists() and wal.stat().st_size else "?mode=ro&immutable=1"
    conn = sqlite3.connect(path.resolve().as_uri() + query, uri=True, check_same_thread=False)
    conn.execute("select count(*) from sqlite_master").fetchone()  # fails here, not later
    return conn
