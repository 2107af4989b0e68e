"""The rules of which ctxd session an agent-harness conversation is recorded in (the use cases
place it: `UseCases.place`, with the store): keyed by the harness's own session id (Claude
Code `session_id`, opencode `sessionID`) within the checkout, so several agents in one
repository do not share one record.

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
from typing import Any

import psutil

from ctxd.fmt import human_duration
from ctxd.models import Session


@dataclass
class Placed:
    sid: str
    pointer: str | None = None  # one line for the person


def process(pid: int | None) -> tuple[int, float] | None:
    """The harness process as (pid, start time), so a reused pid is not taken for it."""
    try:
        return (pid, psutil.Process(pid).create_time()) if pid else None
    except psutil.Error:
        return None


def live(row: dict[str, Any], at: datetime, live_s: float) -> bool:
    """Whether a conversation's row is live: not ended, and its harness process running (the
    same pid and start), else seen within `live_s`."""
    if row["ended_at"]:
        return False
    if row["pid"]:
        return process(row["pid"]) == (row["pid"], row["pid_started"])
    return age_s(row["seen_at"], at) < live_s


def within(cwd: str, scope: str | None) -> bool:
    """Whether `cwd` is in a session's folder (a session with none holds every folder)."""
    return scope is None or PurePosixPath(scope) in (path := PurePosixPath(cwd), *path.parents)


def age_s(seen_at: str, at: datetime) -> float:
    return (at - datetime.fromisoformat(seen_at)).total_seconds()


def pointer_to_latest(latest: Session, at: datetime) -> str:
    """What a fresh start told to continue the checkout's latest session hears."""
    ago = human_duration(age_s(latest.last_activity_at.isoformat(), at))
    return (
        f"recording in `{latest.id}`, this checkout's latest session (last active {ago} "
        f'ago); say "continue" to get its saved state back'
    )


def own_session(latest: Session, conversation: str) -> tuple[str, str, str]:
    """(its id, its title, what the person hears) of the session of a second agent working in
    the same checkout at the same time."""
    sid = f"{latest.id[:56]}-{hashlib.sha1(conversation.encode()).hexdigest()[:6]}"
    title = f"{latest.title or latest.id} (another agent)"
    said = f"another agent is recording in `{latest.id}` here; this conversation is `{sid}`"
    return sid, title, said
