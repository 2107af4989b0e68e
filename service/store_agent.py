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
# What `store_search.index_launch` reads of a launch: a change to these re-indexes it.
_INDEXED = frozenset({"argv", "started_at", "ended_at", "port_opened", "cwd"})


def _launch_row(sid: str, launch: dict[str, Any]) -> dict[str, Any]:
    """A launch as its row is stored: lists and dicts as JSON, times as ISO text."""
    row = {**launch, "session": sid}
    for name in ("argv", "env", "expected_ports"):
        if name in row:
            row[name] = json.dumps(row[name])
    for name in ("started_at", "ended_at"):
        if isinstance(row.get(name), datetime):
            row[name] = iso(row[name])
    return row


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
        process); an update may give only some fields.

        A running launch is seen again at every snapshot: what did not change is not written,
        and a change of what the search index does not hold (its idle time) is one UPDATE.
        """
        with self._tx() as db:
            stored = {
                r["start_key"]: r
                for r in self._rows("select * from launches where session = ?", [sid])
            }
            for launch in launches:
                row = _launch_row(sid, launch)
                before = stored.get(row["start_key"])
                changed = {k: v for k, v in row.items() if before is None or before.get(k) != v}
                if before is not None and not changed:
                    continue
                if before is not None and not changed.keys() & _INDEXED:
                    sets = ", ".join(f"{name} = ?" for name in changed)
                    db.execute(
                        f"update launches set {sets} where session = ? and start_key = ?",
                        [*changed.values(), sid, row["start_key"]],
                    )
                    continue
                db.table("launches").upsert(row, pk=("session", "start_key"))
                found = db.execute(
                    "select * from launches where session = ? and start_key = ?",
                    [sid, row["start_key"]],
                )
                columns = [c[0] for c in found.description]
                now_stored = dict(zip(columns, found.fetchone(), strict=True))
                store_search.index_launch(db, sid, now_stored)

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
