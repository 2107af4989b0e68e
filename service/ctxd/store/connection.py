"""The store's connection: one SQLite connection, one lock, the schema applied on open.

A write is acknowledged only when it is in the database file the data directory names: one
removed or replaced while ctxd runs (`rm -rf` of the data dir) would take every later commit
with it, so each write transaction checks, just before its commit, that the file it writes is
still the one at that path, and is refused (rolled back) when not. SQLite reports many OS
errors as "disk I/O error"; a write that fails so is explained by one probe write in the data
directory (read-only file system, no space left, removed), so the reply can say which.
"""

import contextlib
import errno
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
# SQLite's primary result codes whose OS error it does not tell: "disk I/O error", "unable to
# open database file".
_HIDES_OS_ERROR = {10, 14}  # SQLITE_IOERR, SQLITE_CANTOPEN


class StorageFault(sqlite3.OperationalError):
    """A write the data directory could not take, rolled back, with the OS error behind it in
    `errno`: ENOENT when the database file was removed or replaced while ctxd ran, else what a
    probe write in the data directory met (EROFS, ENOSPC, EIO, ...)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.errno = code


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
        self._opened_read_only = False
        # The database file's (device, inode) as opened for writing; None when read-only.
        self._identity: tuple[int, int] | None = None
        self._moved_reported = False
        try:
            self.db = self._open_writable(path)
            self._identity = _identity(path)
        except (sqlite3.Error, OSError):
            if not path.exists() or os.access(path.parent, os.W_OK):
                raise
            self.db = Database(_open_read_only(path))
            self._opened_read_only = True
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

    @property
    def read_only(self) -> bool:
        """Whether writes are refused: the data directory was read-only at start-up, or its
        database file was removed or replaced since (what this connection holds is served)."""
        return self._opened_read_only or self._moved()

    def close(self) -> None:
        with self._lock:
            self.db.close()

    @contextmanager
    def _tx(self) -> Iterator[Database]:
        with self._lock:
            try:
                with self.db.atomic():
                    yield self.db
                    self._check_in_place()  # raised here, the transaction is rolled back
            except sqlite3.OperationalError as exc:
                if type(exc) is not sqlite3.OperationalError or not _hides_os_error(exc):
                    raise
                code = _probe_write(self.path.parent)
                if code is None:
                    raise
                raise StorageFault(f"{exc} ({os.strerror(code).lower()})", code) from exc

    def _moved(self) -> bool:
        if self._identity is None:
            return False
        try:
            return _identity(self.path) != self._identity
        except OSError:  # not removed, only not looked into now (a folder's permissions)
            return False

    def _check_in_place(self) -> None:
        """Refuse the write about to be committed when the database file at `path` is no longer
        the one this connection writes: the commit would go to a file nobody finds again."""
        if not self._moved():
            return
        if not self._moved_reported:
            self._moved_reported = True
            log.error(
                "the database %s was removed or replaced while ctxd ran: writes are refused "
                "(503) and what this process still holds is served read-only; restart ctxd "
                "once the data directory is where it should be",
                self.path,
            )
        raise StorageFault("the database file was removed or replaced while ctxd ran", errno.ENOENT)

    @contextmanager
    def held(self) -> Iterator[None]:
        """No other thread reads or writes the store meanwhile: for a read and the write it
        decides (a check-then-write that must not interleave with another's)."""
        with self._lock:
            yield

    def stamp(self) -> tuple[int, int]:
        """Moves whenever anything stored may have changed: a write through this connection
        (its count of changed rows) or a commit by another (SQLite's data_version)."""
        with self._lock:
            elsewhere = self.db.execute("PRAGMA data_version").fetchone()[0]
            return self.db.conn.total_changes, elsewhere

    def _rows(self, sql: str, params: tuple | list = ()) -> list[dict]:
        with self._lock:
            return select_rows(self.db, sql, params)

    def _require_session(self, sid: str) -> None:
        if not self._rows("select 1 from sessions where id = ?", [sid]):
            raise NotFound(f"no session '{sid}'")


def _identity(path: Path) -> tuple[int, int] | None:
    """The (device, inode) of the file at `path`; None when nothing is there."""
    try:
        found = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return found.st_dev, found.st_ino


def _hides_os_error(exc: sqlite3.Error) -> bool:
    return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _HIDES_OS_ERROR


def _probe_write(folder: Path) -> int | None:
    """The errno a small write and sync in `folder` meets now (EROFS, ENOSPC, ENOENT, ...);
    None when it succeeds. Only run after a write failed, to name the reason."""
    probe = folder / f".ctxd-probe.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        return exc.errno
    try:
        os.write(fd, b"\0")
        os.fsync(fd)
    except OSError as exc:
        return exc.errno
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return None


def _open_read_only(path: Path) -> sqlite3.Connection:
    """The database in a directory that cannot be written. Without a -wal file nothing is
    pending, and `immutable` lets SQLite read it without creating the -shm file it cannot
    create; with one (after a crash), a plain read-only open needs its -shm to be there."""
    wal = path.with_name(path.name + "-wal")
    query = "?mode=ro" if wal.exists() and wal.stat().st_size else "?mode=ro&immutable=1"
    conn = sqlite3.connect(path.resolve().as_uri() + query, uri=True, check_same_thread=False)
    conn.execute("select count(*) from sqlite_master").fetchone()  # fails here, not later
    return conn
