"""What an agent harness's hook event means to ctxd: one policy for Claude Code and opencode.

The hooks forward the harness's own payload as it is (`POST /api/hooks/{harness}`); here it
becomes the session (the conversation's, `harness_sessions.py`), the actions to record, and
the text to hand back to the model, at most one dump per turn.
"""

import threading
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from ctxd.discovery import actions
from ctxd.harness import conversations as harness_sessions
from ctxd.harness.policy import HOOK_MAX_CHARS
from ctxd.harness.resolve import ResolveIn
from ctxd.models import SESSION_ID_PATTERN, Strict

# Claude Code shows hook output over 10,000 characters as a preview: stay below it.
INJECT_MAX_CHARS = 9_500
# A dump injected at the start of a turn (SessionStart) stands for this long: the "continue"
# prompt of the same turn gets no second copy.
ONE_DUMP_PER_TURN_S = 120.0
RESUME_SOURCES = ("compact", "resume", "clear", "fork")

Harness = Literal["claude", "opencode"]
Text = Annotated[str, Field(max_length=4096)]


class HookIn(Strict):
    """A hook event as the harness gave it, plus what only the hook's side knows."""

    payload: dict[str, Any]
    root: Text = ""  # the git top-level of the cwd, when there is one
    session: Annotated[str, Field(pattern=SESSION_ID_PATTERN, max_length=64)] | None = None
    max_chars: Annotated[int, Field(ge=200, le=10_000_000)] | None = None
    harness_pid: Annotated[int, Field(ge=1)] | None = None  # the process the hook ran under


class HookOut(BaseModel):
    """What the hook prints: `context` for the model, `message` for the person."""

    session: str
    context: str | None = None
    message: str | None = None
    hook_max_chars: int = HOOK_MAX_CHARS  # the dump budget a plugin asks for, unless set


def _text(payload: dict[str, Any], name: str) -> str:
    value = payload.get(name)
    return value if isinstance(value, str) else ""


class HarnessEvents:
    def __init__(self, use: Any) -> None:
        self.use = use  # UseCases (not imported: it imports this module)
        self._injected: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def handle(self, harness: Harness, given: HookIn) -> HookOut:
        p = given.payload
        if harness == "opencode":
            event, conversation = _text(p, "event"), _text(p, "sessionID")
        else:
            event, conversation = _text(p, "hook_event_name"), _text(p, "session_id")
        ask = ResolveIn(
            harness=harness,
            session=given.session,
            cwd=_text(p, "cwd")[:4096],
            root=given.root,
            harness_session=conversation[:4096],
        )
        source = _text(p, "source")
        placed = harness_sessions.place(self.use, ask, event, source, given.harness_pid)
        sid = placed.sid
        budget = min(given.max_chars or HOOK_MAX_CHARS, INJECT_MAX_CHARS)
        out = HookOut(session=sid, message=placed.pointer)
        if event in ("SessionStart", "UserPromptSubmit") and _text(p, "transcript_path"):
            self.use.objective_from_transcript(sid, _text(p, "transcript_path"))
        if event in ("PostToolUse", "PostToolUseFailure"):
            self.use.record_actions(sid, actions.from_claude(p))
        elif event == "tool.execute.after":
            self.use.record_actions(sid, actions.from_opencode(p))
        elif event == "SessionStart" and _text(p, "source") in RESUME_SOURCES:
            out.context = self.use.resume(sid, max_chars=budget)
            self._mark(sid, conversation)
        elif event in ("UserPromptSubmit", "chat.message"):
            out.context = self._prompt(sid, conversation, _text(p, "prompt"), budget)
        elif event == "PreCompact":
            note = f"compaction ({_text(p, 'trigger') or 'unknown'} trigger)"
            self.use.take(sid, note=f"{harness}: {note}")
        elif event in ("Stop", "SessionEnd", "session.idle"):
            self.use.heartbeat(sid)
        return out

    def _prompt(self, sid: str, conversation: str, text: str, budget: int) -> str | None:
        if self._fresh(sid, conversation):
            # The turn began with a dump (resume, compaction): the prompt is still recorded.
            self.use.note_prompt(sid, text)
            return None
        return self.use.prompt(sid, text, max_chars=budget)

    def _mark(self, sid: str, conversation: str) -> None:
        """This conversation just got a dump: its next "continue" of the turn gets none."""
        with self._lock:
            self._injected[(sid, conversation)] = time.monotonic()

    def _fresh(self, sid: str, conversation: str) -> bool:
        """Whether this conversation got a dump moments ago; the mark is used up."""
        with self._lock:
            at = self._injected.pop((sid, conversation), None)
            now = time.monotonic()
            for key, when in list(self._injected.items()):
                if now - when > ONE_DUMP_PER_TURN_S:
                    del self._injected[key]
        return at is not None and now - at <= ONE_DUMP_PER_TURN_S
