"""The store's rows of what the agent did: its actions (a ring per session) and its launches.

Both are written already redacted by the use cases; the store keeps what it is given.
"""

import json
from datetime import datetime
from typing import Any

from service import store_search
from service.store_db import Connection, iso

# The newest actions kept per session: recent commands and repeated reads come from these.
ACTIONS_KEPT = 200


class AgentRows(Connection):
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

    def save_launch(self, sid: str, launch: dict[str, Any]) -> None:
        """Insert or update one launch, keyed by its process (pid and start time)."""
        self.save_launches(sid, [launch])

    def save_launches(self, sid: str, launches: list[dict[str, Any]]) -> None:
        """Insert or update launches in one transaction (one commit per snapshot, not per
        process); an update may give only some fields."""
        with self._tx() as db:
            for launch in launches:
                row = {**launch, "session": sid}
                for name in ("argv", "env", "expected_ports"):
                    if name in row:
                        row[name] = json.dumps(row[name])
                for name in ("started_at", "ended_at"):
                    if isinstance(row.get(name), datetime):
                        row[name] = iso(row[name])
                db.table("launches").upsert(row, pk=("session", "start_key"))
                stored = db.execute(
                    "select * from launches where session = ? and start_key = ?",
                    [sid, row["start_key"]],
                )
                columns = [c[0] for c in stored.description]
                found = dict(zip(columns, stored.fetchone(), strict=True))
                store_search.index_launch(db, sid, found)

    def list_launches(self, sid: str, limit: int = 20) -> list[dict[str, Any]]:
        """The newest launches, oldest first."""
        rows = self._rows(
            "select * from launches where session = ? order by started_at desc, id desc limit ?",
            [sid, limit],
        )
        out = []
        for r in reversed(rows):
            r = dict(r)
            r["argv"] = json.loads(r["argv"] or "[]")
            r["env"] = json.loads(r["env"] or "{}")
            r["expected_ports"] = json.loads(r["expected_ports"] or "[]")
            out.append(r)
        return out
