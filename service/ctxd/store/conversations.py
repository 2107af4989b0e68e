"""The store's rows of agent-harness conversations: which ctxd session each one is recorded
in (`harness_sessions.py` decides; the store keeps what it is given)."""

from datetime import datetime
from typing import Any

from ctxd.store.connection import Connection, iso


class ConversationRows(Connection):
    def see_conversation(
        self, harness: str, conversation: str, at: datetime, *, sid: str | None = None,
        process: tuple[int, float] | None = None, ended: bool = False,
    ) -> None:  # fmt: skip
        """Record that `conversation` was seen at `at` (from the harness `process`: pid and
        start time), ended or not; with `sid`, it is recorded in that session from now on."""
        row: dict[str, Any] = {
            "harness": harness,
            "conversation": conversation,
            "seen_at": iso(at),
            "ended_at": iso(at) if ended else None,
        }
        if sid is not None:
            row["session"] = sid
        if process is not None:
            row["pid"], row["pid_started"] = process
        with self._tx() as db:
            db.table("conversations").upsert(row, pk=("harness", "conversation"))

    def conversation(self, harness: str, conversation: str) -> dict[str, Any] | None:
        rows = self._rows(
            "select * from conversations where harness = ? and conversation = ?",
            [harness, conversation],
        )
        return rows[0] if rows else None

    def conversations_of(self, sid: str) -> list[dict[str, Any]]:
        """The conversations recorded in `sid`, the one seen last first."""
        sql = "select * from conversations where session = ? order by seen_at desc"
        return self._rows(sql, [sid])

    def conversation_of_process(
        self, harness: str, pid: int, pid_started: float
    ) -> dict[str, Any] | None:
        """The conversation the harness process was seen in last, if any."""
        rows = self._rows(
            "select * from conversations where harness = ? and pid = ? and pid_started = ?"
            " order by seen_at desc limit 1",
            [harness, pid, pid_started],
        )
        return rows[0] if rows else None
