"""The store's schema: its migrations, applied in order when a Store opens the database."""

import zlib

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from ctxd.store import search_index as store_search

migrations = Migrations("ctxd")


@migrations()
def m001_initial(db: Database) -> None:
    db.table("sessions").create(
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
    db.table("watches").create(
        {"id": int, "session": str, "spec": str, "created_at": str},
        pk="id",
        foreign_keys=[("session", "sessions", "id")],
    )
    db.table("watches").create_index(["session"])
    db.table("journal").create(
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
    db.table("journal").create_index(["session"])
    db.table("snapshots").create(
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
    db.table("snapshots").create_index(["session", "version"], unique=True)


@migrations()
def m002_last_message(db: Database) -> None:
    db.table("sessions").add_column("last_message", str)
    db.table("sessions").add_column("last_message_at", str)


@migrations()
def m003_sections_and_journal_updates(db: Database) -> None:
    """Snapshots keep content-addressed, compressed sections: storage grows with change."""
    db.table("blobs").create({"hash": str, "data": bytes}, pk="hash")
    snapshots = db.table("snapshots")
    snapshots.add_column("sections", str)
    snapshots.add_column("markdown_z", bytes)
    snapshots.add_column("content_key", str)
    snapshots.add_column("confirmed_at", str)
    snapshots.add_column("confirmations", int, not_null_default=0)
    db.table("journal").add_column("concerns", str)
    db.table("journal").add_column("updated_at", str)
    db.table("sessions").add_column("cwd", str)
    db.table("sessions").add_column("schedule_every_s", int)


@migrations()
def m004_agent_actions_and_launches(db: Database) -> None:
    """What ctxd learns by itself: the agent's actions, automatic watches, launches."""
    db.table("watches").add_column("auto", int, not_null_default=0)
    db.table("watches").add_column("reason", str)
    db.table("sessions").add_column("objective_source", str)
    db.table("sessions").add_column("discovery", int, not_null_default=1)
    db.table("actions").create(
        {"id": int, "session": str, "at": str, "kind": str, "body": str},
        pk="id",
        foreign_keys=[("session", "sessions", "id")],
    )
    db.table("actions").create_index(["session", "id"])
    db.table("launches").create(
        {
            "id": int,
            "session": str,
            "watch_id": int,
            "start_key": str,
            "pid": int,
            "started_at": str,
            "argv": str,
            "cwd": str,
            "env": str,
            "expected_ports": str,
            "ended_at": str,
            "port_opened": int,
            "idle_s": float,
        },
        pk="id",
        foreign_keys=[("session", "sessions", "id")],
    )
    db.table("launches").create_index(["session", "start_key"], unique=True)


@migrations()
def m005_search(db: Database) -> None:
    """Full-text search over what a session keeps: sqlite-utils' FTS5 over `search_docs`."""
    store_search.create(db)
    store_search.backfill(db, _markdown, attempts_table="launches")  # its name until m013


@migrations()
def m006_peers(db: Database) -> None:
    """Other hosts' ctxd: a watch with `host` set to a peer's name is collected there."""
    db.table("peers").create(
        {"name": str, "url": str, "token_file": str, "created_at": str}, pk="name"
    )


def _markdown(row: dict) -> str:
    if row["markdown_z"] is not None:
        return zlib.decompress(row["markdown_z"]).decode()
    return str(row["markdown"] or "")


@migrations()
def m008_conversations(db: Database) -> None:
    """Which ctxd session each agent-harness conversation (Claude Code `session_id`, opencode
    `sessionID`) is recorded in, when it was last seen or ended, and the harness process
    (pid and start time) it was last seen from."""
    db.table("conversations").create(
        {
            "harness": str,
            "conversation": str,
            "session": str,
            "seen_at": str,
            "ended_at": str,
            "pid": int,
            "pid_started": float,
        },
        pk=("harness", "conversation"),
        foreign_keys=[("session", "sessions", "id")],
    )
    db.table("conversations").create_index(["session", "seen_at"])


@migrations()
def m009_search_reindexes_changed_text_only(db: Database) -> None:
    """A dump block seen again moves its `last_version` without leaving and re-entering the
    full-text index (see store_search.reindex_on_text_change_only)."""
    store_search.reindex_on_text_change_only(db)


@migrations()
def m010_attempts(db: Database) -> None:
    """An attempt is born with the agent's command, before any process is seen: a launch may
    have no process yet (`seen` 0), and keeps the command as written, the harness's tool call,
    the files its output goes to (`logs`, JSON) and the error its own log ended with."""
    launches = db.table("launches")
    for name, kind in (("command", str), ("tool_id", str), ("logs", str), ("error", str)):
        launches.add_column(name, kind)
    launches.add_column("error_log", str)
    launches.add_column("exit_status", int)
    launches.add_column("seen", int, not_null_default=1)


@migrations()
def m011_harness_summary(db: Database) -> None:
    """A harness's own summary of a conversation it compacted (Claude Code's PostCompact
    `compact_summary`), kept with the version taken as it compacted: JSON {harness, text, at}."""
    db.table("snapshots").add_column("harness_summary", str)


@migrations()
def m012_conversation_words(db: Database) -> None:
    """The conversation's own words a dump quotes: the user's newest prompts (a bare
    "continue" as an empty text), and the agent's last reply with when it came."""
    db.table("prompts").create(
        {"id": int, "session": str, "at": str, "text": str},
        pk="id",
        foreign_keys=[("session", "sessions", "id")],
    )
    db.table("prompts").create_index(["session", "id"])
    db.table("sessions").add_column("agent_said", str)
    db.table("sessions").add_column("agent_said_at", str)


@migrations()
def m013_attempts(db: Database) -> None:
    """The `launches` table is `attempts`, the one name the code gives them; its unique index
    on (session, start_key) is made again under the new name. Their rows in the search index
    keep their source and kind, `launch` (`store_search.ATTEMPT`)."""
    db.rename_table("launches", "attempts")
    db.execute("drop index if exists idx_launches_session_start_key")
    db.table("attempts").create_index(["session", "start_key"], unique=True)


@migrations()
def m014_attempts_by_session_and_end(db: Database) -> None:
    """A snapshot asks for a session's attempts not ended yet and for its newest attempt's id;
    with only the (session, start_key) index both read every attempt the session ever had
    (2,000 in a long one, sorted again by id). An index on (session, ended_at) finds the open
    ones, in id order, and one on (session) the newest id and the newest attempts."""
    db.table("attempts").create_index(["session", "ended_at"])
    db.table("attempts").create_index(["session"])


@migrations()
def m015_actions_by_kind(db: Database) -> None:
    """A snapshot asks for the newest actions of one kind (commands, file edits, wakes, the
    session's dormancy); through the (session, id) index each question read back through
    every action kept until enough of that kind came, all of them for a kind with none."""
    db.table("actions").create_index(["session", "kind", "id"])
