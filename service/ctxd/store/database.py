"""The SQLite store: sessions, watches, journal; it stores what it is given.

The only SQL of ctxd lives here and in `store_db.py` (connection), `store_snapshots.py`
(versions) and `store_schema.py` (migrations). Redaction and the rules of agent-written
input are the use cases' (`service/ctxd/usecases/operations.py`).
"""

import json
import sqlite3
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlite_utils.db import Table

from ctxd.errors import LimitReached, NotFound
from ctxd.models import (
    JournalEntry,
    JournalIn,
    Session,
    SessionIn,
    Watch,
    WatchSpec,
)
from ctxd.store import scrub as store_scrub
from ctxd.store import search_index as store_search
from ctxd.store.agent import AgentRows
from ctxd.store.connection import iso, now
from ctxd.store.conversations import ConversationRows
from ctxd.store.versions import SnapshotRows

DEFAULT_QUIET_AFTER_S = 300
# The user's prompts a session keeps, newest: a dump quotes them.
PROMPTS_KEPT = 5


class Store(AgentRows, ConversationRows, SnapshotRows):
    """Sessions, their watches and journal entries, on top of the snapshot rows."""

    # --- secrets learned after they were stored ---------------------------------------------

    def scrub(self, forms: list[str], replace: Callable[[str], str]) -> store_scrub.Scrubbed:
        """Every stored text holding one of `forms` rewritten with `replace` (see `scrub`),
        then the WAL, which held the old pages, emptied."""
        with self._tx() as db:
            done = store_scrub.scrub(db, forms, replace)
        if done.total:
            with self._lock:
                self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return done

    # --- sessions ---------------------------------------------------------------------------

    def put_session(self, sid: str, data: SessionIn) -> tuple[Session, bool]:
        """Create or update a session; returns it and whether it was created."""
        moment = iso(now())
        with self._tx() as db:
            exists = bool(self._rows("select 1 from sessions where id = ?", [sid]))
            fields: dict[str, Any] = data.model_dump(exclude_none=True)
            if "objective" in fields:
                fields["objective_source"] = None  # set by hand from now on
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
        moment = iso(at or now())
        fields: dict[str, str] = {"last_activity_at": moment}
        if message is not None:
            fields.update(last_message=message, last_message_at=moment)
        with self._tx() as db:
            self.get_session(sid)
            db.table("sessions").update(sid, fields)

    def set_objective(self, sid: str, objective: str, source: str | None) -> None:
        """The objective and where it came from (None: set by hand)."""
        with self._tx() as db:
            self.get_session(sid)
            db.table("sessions").update(sid, {"objective": objective, "objective_source": source})

    def last_message(self, sid: str) -> tuple[str | None, datetime | None]:
        rows = self._rows("select last_message, last_message_at from sessions where id = ?", [sid])
        if not rows or rows[0]["last_message"] is None:
            return None, None
        return rows[0]["last_message"], datetime.fromisoformat(rows[0]["last_message_at"])

    def add_prompt(self, sid: str, text: str, at: datetime | None = None) -> None:
        """A user's prompt ("" for a bare "continue"), as given; only the newest PROMPTS_KEPT
        of a session are kept."""
        with self._tx() as db:
            self.get_session(sid)
            db.table("prompts").insert({"session": sid, "at": iso(at or now()), "text": text})
            db.execute(
                "delete from prompts where session = ? and id not in"
                " (select id from prompts where session = ? order by id desc limit ?)",
                [sid, sid, PROMPTS_KEPT],
            )

    def prompts(self, sid: str) -> list[tuple[datetime, str]]:
        """The session's newest prompts (at, text), oldest first."""
        rows = self._rows(
            "select at, text from (select id, at, text from prompts where session = ?"
            " order by id desc limit ?) order by id",
            [sid, PROMPTS_KEPT],
        )
        return [(datetime.fromisoformat(r["at"]), r["text"] or "") for r in rows]

    def set_agent_said(self, sid: str, text: str, at: datetime | None = None) -> None:
        """What the agent said last (its reply that ended a turn), as given."""
        with self._tx() as db:
            self.get_session(sid)
            db.table("sessions").update(
                sid, {"agent_said": text, "agent_said_at": iso(at or now())}
            )

    def agent_said(self, sid: str) -> tuple[datetime, str] | None:
        rows = self._rows("select agent_said, agent_said_at from sessions where id = ?", [sid])
        if not rows or rows[0]["agent_said"] is None:
            return None
        return datetime.fromisoformat(rows[0]["agent_said_at"]), rows[0]["agent_said"]

    # --- watches ----------------------------------------------------------------------------

    def add_watch(self, sid: str, spec: WatchSpec, limit: int, reason: str | None = None) -> Watch:
        """Store a watch (see `add_watch_once`); one with a `reason` was added by ctxd itself."""
        return self.add_watch_once(sid, spec, limit, reason)[0]

    def add_watch_once(
        self, sid: str, spec: WatchSpec, limit: int, reason: str | None = None
    ) -> tuple[Watch, bool]:
        """The session's watch of exactly this spec, and whether it was added now: a second
        identical watch would show every line and warning twice, so the first is returned.
        A person asking for a watch ctxd had added by itself (`reason` None) makes it theirs,
        kept when ctxd retires its own."""
        text = spec.model_dump_json()
        with self._tx() as db:
            self.get_session(sid)
            same = self._rows(
                "select id, auto from watches where session = ? and spec = ? order by id limit 1",
                [sid, text],
            )
            if same:
                wid = same[0]["id"]
                if same[0]["auto"] and reason is None:
                    db.table("watches").update(wid, {"auto": 0, "reason": None})
            else:
                counted = self._rows("select count(*) n from watches where session = ?", [sid])
                if (count := counted[0]["n"]) >= limit:
                    raise LimitReached(
                        f"session '{sid}' already has {count} watches (limit {limit})"
                    )
                row: dict[str, Any] = {"session": sid, "spec": text, "created_at": iso(now())}
                row |= {"auto": int(reason is not None), "reason": reason}
                wid = _new_id(db.table("watches").insert(row))
        return self.get_watch(sid, wid), not same

    def get_watch(self, sid: str, wid: int) -> Watch:
        rows = self._rows("select * from watches where session = ? and id = ?", [sid, wid])
        if not rows:
            raise NotFound(f"no watch {wid} in session '{sid}'")
        return _watch(rows[0])

    def list_watches(self, sid: str) -> list[Watch]:
        self.get_session(sid)
        rows = self._rows("select * from watches where session = ? order by id", [sid])
        return [_watch(r) for r in rows]

    def replace_spec(self, sid: str, wid: int, spec: WatchSpec) -> Watch:
        """A watch made to follow something new (an automatic process watch follows the
        newest attempt's ports and folder); its id, and so its attempts, stay."""
        with self._tx() as db:
            self.get_watch(sid, wid)
            db.table("watches").update(wid, {"spec": spec.model_dump_json()})
        return self.get_watch(sid, wid)

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
            created = iso(now())
            eid = _new_id(journal.insert({"session": sid, "created_at": created, **row}))
            store_search.index_entry(db, sid, {**row, "id": eid, "created_at": created})
        return self.get_entry(sid, eid)

    def update_entry(self, sid: str, eid: int, fields: dict[str, Any]) -> JournalEntry:
        """Set the given columns of an entry (text, outcome, status, concerns)."""
        fields = dict(fields)
        with self._tx() as db:
            self.get_entry(sid, eid)
            if "concerns" in fields:
                fields["concerns"] = json.dumps(fields["concerns"] or [])
            db.table("journal").update(eid, {**fields, "updated_at": iso(now())})
            store_search.index_entry(db, sid, db.table("journal").get(eid))
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

    # --- search -----------------------------------------------------------------------------

    def search(
        self, sid: str | None, match: str, limit: int, offset: int, budget_s: float
    ) -> list[dict]:
        """FTS5 hits (see `store_search.query`); a query still running after `budget_s` is
        interrupted (sqlite3.OperationalError "interrupted"), so none can hold the lock long."""
        if sid is not None:
            self.get_session(sid)
        deadline = time.monotonic() + budget_s
        with self._lock:
            self.db.conn.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
            try:
                return store_search.query(self.db, sid, match, limit, offset)
            finally:
                self.db.conn.set_progress_handler(None, 0)


_SESSION_SQL = (
    "select s.id, s.title, s.objective, s.objective_source, s.quiet_after_s,"
    " s.schedule_every_s, s.cwd, s.discovery,"
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


def _entry(row: dict) -> JournalEntry:
    return JournalEntry.model_validate({**row, "concerns": json.loads(row["concerns"] or "[]")})


def _watch(row: dict) -> Watch:
    return Watch.model_validate(
        {
            "id": row["id"],
            "session": row["session"],
            "created_at": row["created_at"],
            "spec": json.loads(row["spec"]),
            "auto": bool(row.get("auto")),
            "reason": row.get("reason"),
        }
    )
