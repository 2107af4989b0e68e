"""Which ctxd session an agent-harness conversation is recorded in: keyed by the harness's
own session id (Claude Code `session_id`, opencode `sessionID`) within the checkout, so
several agents in one repository do not share one record.

- A conversation seen before stays in its session while it works in that checkout (one
  that moves to another checkout is placed there anew).
- A new one continues the checkout's latest session (the one `resolve.py` finds) unless
  another conversation is recording there right now and this is a fresh start: then it gets
  a session of its own, named after the checkout plus a short hash of its id.
- `/clear`, a resume, a compaction or a fork continue the latest session even so (the
  conversation they come from is that one), and so does a fresh start after a crash (the
  old conversation is not live any more): that start gets a one-line pointer to it.
- Live: not ended (`SessionEnd`) and its harness process (pid and start time, which the
  hook or plugin sends) still running; without a process known, seen within
  CTXD_CONVERSATION_LIVE_S.
- A new conversation of a harness process seen before (/clear, opencode's /new) continues
  the session that process recorded in.
- Sub-agents report under their parent's id (Claude Code does so; the opencode plugin maps
  a child session to its parent), so they land in the parent's session.
"""

import hashlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any, Protocol

import psutil

from ctxd.fmt import human_duration
from ctxd.harness.adapter import RESUME_SOURCES
from ctxd.harness.resolve import ResolveIn
from ctxd.models import Session, SessionIn
from ctxd.models.sessions import is_system_folder
from ctxd.settings import Settings
from ctxd.store.connection import now
from ctxd.store.database import Store


class Sessions(Protocol):
    """What placing a conversation needs of the use cases (`UseCases` is one)."""

    store: Store
    settings: Settings

    def resolve_session(self, ask: ResolveIn) -> Session: ...

    def get_session(self, sid: str) -> Session: ...

    def put_session(self, sid: str, data: SessionIn) -> tuple[Session, bool]: ...


@dataclass
class Placed:
    sid: str
    pointer: str | None = None  # one line for the person


def place(use: Sessions, ask: ResolveIn, ended: bool, source: str, pid: int | None) -> Placed:
    """The session of this event's conversation, bound on first sight (`use`: the use cases;
    `ended`: the event ends the conversation; `source`: how a conversation starts; `pid`: the
    harness process the hook ran under, when the hook could tell)."""
    store, conversation = use.store, ask.harness_session
    root = ask.root if ask.root.startswith("/") else ask.cwd
    if ask.session or not conversation or not ask.cwd.startswith("/") or is_system_folder(root):
        return Placed(use.resolve_session(ask).id)  # no project: the conversation's own
    at, process = now(), _process(pid)
    bound = store.conversation(ask.harness, conversation)
    if bound is not None and _within(ask.cwd, use.get_session(bound["session"]).cwd):
        store.see_conversation(ask.harness, conversation, at, process=process, ended=ended)
        return Placed(bound["session"])
    before = store.conversation_of_process(ask.harness, *process) if process else None
    if before is not None and _within(ask.cwd, use.get_session(before["session"]).cwd):
        # the same harness process moved on to a new conversation (/clear, opencode's /new)
        store.see_conversation(
            ask.harness, conversation, at, sid=before["session"], process=process, ended=ended
        )
        return Placed(before["session"])
    latest = use.resolve_session(ask.model_copy(update={"harness_session": ""}))
    others = [c for c in store.conversations_of(latest.id) if c["conversation"] != conversation]
    live = [c for c in others if _live(c, at, use.settings.conversation_live_s)]
    placed = Placed(latest.id)
    if live and source not in RESUME_SOURCES:
        placed = _own_session(use, latest, conversation)
    elif others and source == "startup":
        ago = human_duration(_age_s(latest.last_activity_at.isoformat(), at))
        placed.pointer = (
            f"recording in `{latest.id}`, this checkout's latest session (last active {ago} "
            f'ago); say "continue" to get its saved state back'
        )
    store.see_conversation(
        ask.harness, conversation, at, sid=placed.sid, process=process, ended=ended
    )
    return placed


def _own_session(use: Sessions, latest: Session, conversation: str) -> Placed:
    """A session for a second agent working in the same checkout at the same time."""
    sid = f"{latest.id[:56]}-{hashlib.sha1(conversation.encode()).hexdigest()[:6]}"
    title = f"{latest.title or latest.id} (another agent)"
    use.put_session(sid, SessionIn(cwd=latest.cwd, title=title))
    said = f"another agent is recording in `{latest.id}` here; this conversation is `{sid}`"
    return Placed(sid, said)


def _process(pid: int | None) -> tuple[int, float] | None:
    """The harness process as (pid, start time), so a reused pid is not taken for it."""
    try:
        return (pid, psutil.Process(pid).create_time()) if pid else None
    except psutil.Error:
        return None


def _live(row: dict[str, Any], at: datetime, live_s: float) -> bool:
    if row["ended_at"]:
        return False
    if row["pid"]:
        return _process(row["pid"]) == (row["pid"], row["pid_started"])
    return _age_s(row["seen_at"], at) < live_s


def _within(cwd: str, scope: str | None) -> bool:
    return scope is None or PurePosixPath(scope) in (path := PurePosixPath(cwd), *path.parents)


def _age_s(seen_at: str, at: datetime) -> float:
    return (at - datetime.fromisoformat(seen_at)).total_seconds()
