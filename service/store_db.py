"""The store's connection: one SQLite connection, one lock, the schema applied on open."""

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sqlite_utils import Database

from service.errors import NotFound
from service.store_schema import migrations


def now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.isoformat()


class Connection:
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

    def _require_session(self, sid: str) -> None:
        if not self._rows("select 1 from sessions where id = ?", [sid]):
            raise NotFound(f"no session '{sid}'")
