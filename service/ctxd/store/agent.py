"""The store's rows of what the agent did: its actions (a ring per session) and its attempts.

Both are written already redacted by the use cases; the store keeps what it is given. An
attempt is taken as an `AttemptUpdate` and read back as an `Attempt`; its row's encoding (lists
and dicts as JSON, times as ISO text) is this module's.
"""

import json
from dataclasses import fields
from datetime import datetime
from pathlib import Path
from typing import Any

from ctxd.attempts.model import UNCHANGED, Attempt, AttemptUpdate
from ctxd.store import search_index as store_search
from ctxd.store.connection import Connection, iso

# The newest actions kept per session: recent commands and repeated reads come from these.
ACTIONS_KEPT = 200
# What `store_search.index_attempt` reads of an attempt: a change to these re-indexes it.
_INDEXED = frozenset(
    {"argv", "started_at", "ended_at", "port_opened", "cwd", "command", "error", "seen"}
)
# What a later snapshot may change of an attempt; the rest (argv, cwd, env, its start) is
# what the process was when it started, fixed for its life.
_FOLLOWED = (
    "watch_id", "expected_ports", "port_opened", "idle_s", "ended_at", "error", "error_log",
    "exit_status", "logs",
)  # fmt: skip
_JSON = ("argv", "env", "expected_ports", "logs")
IDLE_STEP_S = 5.0
_UPDATE_FIELDS = tuple(f.name for f in fields(AttemptUpdate))


def _given(update: AttemptUpdate) -> dict[str, Any]:
    """The fields an update gives, by column (and `bound_from`), tuples as lists."""
    given: dict[str, Any] = {}
    for name in _UPDATE_FIELDS:
        value = getattr(update, name)
        if value is not UNCHANGED:
            given[name] = list(value) if isinstance(value, tuple) else value
    return given


def _changes(before: dict[str, Any], attempt: dict[str, Any]) -> dict[str, Any]:
    """The followed fields of `attempt` that differ from what is stored (`before`)."""
    changed = {}
    for name in _FOLLOWED:
        if name not in attempt:
            continue
        new, old = attempt[name], before[name]
        if name == "ended_at" and isinstance(new, datetime):
            new = iso(new)
        idle = name == "idle_s" and new is not None and old is not None
        if idle and abs(new - old) < max(IDLE_STEP_S, 0.1 * old):
            continue
        if new != old:
            changed[name] = attempt[name]
    return changed


def _row(sid: str, attempt: dict[str, Any]) -> dict[str, Any]:
    """An attempt's given fields as its row stores them: lists and dicts as JSON, times as ISO
    text."""
    row = {k: v for k, v in attempt.items() if k != "bound_from"}
    row["session"] = sid
    for name in _JSON:
        if name in row:
            row[name] = json.dumps(row[name])
    for name in ("started_at", "ended_at"):
        if isinstance(row.get(name), datetime):
            row[name] = iso(row[name])
    return row


def _attempt(row: dict[str, Any]) -> Attempt:
    """A stored row as its Attempt: its JSON and ISO text decoded."""
    ended = row["ended_at"]
    opened = row["port_opened"]
    return Attempt(
        pid=row["pid"],
        argv=tuple(json.loads(row["argv"] or "[]") or ()),
        started_at=datetime.fromisoformat(row["started_at"]),
        cwd=row["cwd"],
        env=json.loads(row["env"] or "{}") or {},
        expected_ports=tuple(json.loads(row["expected_ports"] or "[]") or ()),
        ended_at=datetime.fromisoformat(ended) if ended else None,
        exit_status=row["exit_status"],
        port_opened=None if opened is None else bool(opened),
        idle_s=row["idle_s"],
        command=row["command"],
        seen=bool(row["seen"]),
        logs=tuple(json.loads(row["logs"] or "[]") or ()),
        error=row["error"],
        error_log=row["error_log"],
        start_key=row["start_key"],
        id=row["id"],
        watch_id=row["watch_id"],
        tool_id=row["tool_id"],
    )


class AgentRows(Connection):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._attempt_writes: dict[str, int] = {}  # see attempts_stamp

    def add_action(self, sid: str, kind: str, at: datetime, body: dict[str, Any]) -> None:
        """Append an action; the oldest beyond ACTIONS_KEPT go, so the ring stays bounded."""
        with self._tx() as db:
            row = {"session": sid, "at": iso(at), "kind": kind, "body": json.dumps(body)}
            actions = db.table("actions").insert(row)
            body_id = actions.last_rowid or 0
            store_search.index_action(db, sid, body_id, kind, row["at"], body)
            db.execute(
                "delete from actions where session = ? and id <= (select id from actions"
                " where session = ? order by id desc limit 1 offset ?)",
                [sid, sid, ACTIONS_KEPT],
            )

    def list_actions(self, sid: str, kind: str | None = None, limit: int = 50) -> list[dict]:
        """The newest actions (of `kind`), oldest first, each its body plus `at`."""
        sql = "select at, body from actions where session = ?"
        params: list[Any] = [sid]
        if kind is not None:
            sql += " and kind = ?"
            params.append(kind)
        rows = self._rows(sql + " order by id desc limit ?", [*params, limit])
        return [{**json.loads(r["body"]), "at": r["at"]} for r in reversed(rows)]

    def save_attempts(self, sid: str, updates: list[AttemptUpdate]) -> None:
        """Insert or update attempts in one transaction (one commit per snapshot, not per
        process); an update may give only some fields.

        A running attempt is seen again at every snapshot: only what a later snapshot may
        change (`_FOLLOWED`) is compared, what did not change is not written, an idle time
        is written once it moved by `IDLE_STEP_S` or a tenth (else an idle crowd of 300
        rewrites 300 rows every snapshot), and a change the search index does not hold is
        one UPDATE.
        """
        attempts = [_given(update) for update in updates]
        with self._tx() as db:
            writes_before = db.conn.total_changes
            for attempt in attempts:
                if bound_from := attempt.get("bound_from"):
                    # an attempt born with its command now has its process: keyed by it
                    db.execute(
                        "update attempts set start_key = ? where session = ? and start_key = ?",
                        [attempt["start_key"], sid, bound_from],
                    )
                    store_search.unindex(db, sid, store_search.ATTEMPT, bound_from)
            stored = self._followed(db, sid, [attempt["start_key"] for attempt in attempts])
            for attempt in attempts:
                before = stored.get(attempt["start_key"])
                if before is not None and "bound_from" not in attempt:
                    changed = _changes(before, attempt)
                    if not changed:
                        continue
                    if not changed.keys() & _INDEXED:
                        row = _row(sid, changed)
                        sets = ", ".join(f"{name} = ?" for name in changed)
                        db.execute(
                            f"update attempts set {sets} where session = ? and start_key = ?",
                            [*(row[name] for name in changed), sid, attempt["start_key"]],
                        )
                        continue
                row = _row(sid, attempt)
                db.table("attempts").upsert(row, pk=("session", "start_key"))
                found = db.execute(
                    "select * from attempts where session = ? and start_key = ?",
                    [sid, row["start_key"]],
                )
                columns = [c[0] for c in found.description]
                now_stored = dict(zip(columns, found.fetchone(), strict=True))
                store_search.index_attempt(db, sid, now_stored)
            if db.conn.total_changes != writes_before:  # see attempts_stamp
                self._attempt_writes[sid] = self._attempt_writes.get(sid, 0) + 1

    @staticmethod
    def _followed(db: Any, sid: str, keys: list[str]) -> dict[str, dict[str, Any]]:
        """{start_key: its stored `_FOLLOWED` fields, decoded} of these attempts."""
        found: dict[str, dict[str, Any]] = {}
        columns = ", ".join(_FOLLOWED)
        for start in range(0, len(keys), 500):  # SQLite's bound-parameter limit
            chunk = keys[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            cursor = db.execute(
                f"select start_key, {columns} from attempts"
                f" where session = ? and start_key in ({marks})",
                [sid, *chunk],
            )
            for key, *values in cursor.fetchall():
                row = dict(zip(_FOLLOWED, values, strict=True))
                row["expected_ports"] = json.loads(row["expected_ports"] or "[]")
                row["logs"] = json.loads(row["logs"] or "[]")
                found[key] = row
        return found

    def attempts_stamp(self, sid: str) -> tuple[int, int]:
        """Moves whenever the session's attempts may have changed: a write through this store,
        or a commit by another connection to the database (SQLite's data_version)."""
        with self._lock:
            changed_elsewhere = self.db.execute("PRAGMA data_version").fetchone()[0]
        return self._attempt_writes.get(sid, 0), changed_elsewhere

    def running_attempts(self, sid: str) -> list[Attempt]:
        """Every attempt not seen to end yet, however many, decoded: those whose process runs
        and those born with their command whose process was not seen yet (`seen` 0)."""
        rows = self._rows(
            "select * from attempts where session = ? and ended_at is null order by id", [sid]
        )
        return [_attempt(r) for r in rows]

    def idle_logs(self, sid: str, paths: list[str]) -> dict[str, bool]:
        """Those of these paths that are logs of attempts none of which is seen running, each
        with whether all those attempts ended (False: one was launched and not seen yet)."""
        if not paths:
            return {}
        marks = ", ".join("?" * len(paths))
        rows = self._rows(
            "select log.value path, max(ended_at is null) open from attempts,"
            f" json_each(attempts.logs) log where session = ? and log.value in ({marks})"
            " group by log.value having max(ended_at is null and seen = 1) = 0",
            [sid, *paths],
        )
        return {r["path"]: not r["open"] for r in rows}

    def unseen_attempts(self, sid: str) -> list[Attempt]:
        """The attempts born with their command whose process no snapshot saw yet, not ended."""
        rows = self._rows(
            "select * from attempts where session = ? and ended_at is null and seen = 0"
            " order by id",
            [sid],
        )
        return [_attempt(r) for r in rows]

    def attempt_keys(self, sid: str, keys: list[str]) -> set[str]:
        """Those of these start keys the session's attempts have."""
        with self._lock:
            return set(self._followed(self.db, sid, keys))

    def last_attempt_id(self, sid: str) -> int:
        """The id of the session's newest attempt row (0: none); ids only grow."""
        rows = self._rows("select max(id) n from attempts where session = ?", [sid])
        return int(rows[0]["n"] or 0)

    def count_attempts(self, sid: str) -> int:
        rows = self._rows("select count(*) n from attempts where session = ?", [sid])
        return int(rows[0]["n"])

    def list_attempts(self, sid: str, limit: int = 20) -> list[Attempt]:
        """The newest attempts, oldest first."""
        rows = self._rows(
            "select * from attempts where session = ? order by id desc limit ?",
            [sid, limit],
        )
        return [_attempt(r) for r in reversed(rows)]
