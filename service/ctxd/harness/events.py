"""A harness's hook event as the HTTP route takes it and answers it, the one-dump-per-turn
marks, and the events already seen (one delivered twice counts once). The hooks forward the
harness's own payload as it is (`POST /api/hooks/{harness}`); its adapter reads it
(`adapter.py`), and `UseCases.hook` acts on it: the conversation's session
(`conversations.py`), the actions to record, the text to hand back to the model."""

import threading
import time
from typing import Annotated, Any

from pydantic import BaseModel, Field

from ctxd.harness.policy import HOOK_MAX_CHARS
from ctxd.models import SESSION_ID_PATTERN, Strict

# Claude Code shows hook output over 10,000 characters as a preview: stay below it.
INJECT_MAX_CHARS = 9_500
# A harness's own summary after a compaction, as kept beside the version (a few thousand
# characters, as Claude Code writes one).
SUMMARY_MAX_CHARS = 50_000
# A dump injected at the start of a turn (SessionStart) stands for this long: the "continue"
# prompt of the same turn gets no second copy.
ONE_DUMP_PER_TURN_S = 120.0
# The same hook event delivered twice comes within moments (two hooks run for it at once).
SAME_EVENT_S = 30.0
# A resumed conversation waits this long at most for the prompt whose turn gets its dump (an
# interactive resume waits for the person to type).
RESUMED_WAITS_S = 86_400.0
Text = Annotated[str, Field(max_length=4096)]


class HookIn(Strict):
    """A hook event as the harness gave it, plus what only the hook's side knows."""

    payload: dict[str, Any]
    root: Text = ""  # the git top-level of the cwd, when there is one
    session: Annotated[str, Field(pattern=SESSION_ID_PATTERN, max_length=64)] | None = None
    max_chars: Annotated[int, Field(ge=200, le=10_000_000)] | None = None
    harness_pid: Annotated[int, Field(ge=1)] | None = None  # the process the hook ran under


class WakeIn(HookIn):
    """A waiter's ask (`ctxd hook HARNESS --wake`): the hook event it runs for, whether that
    event launched something (its attempt is then pending before any snapshot saw it), and
    how long this one request may wait."""

    launched: bool = False
    wait_s: Annotated[float, Field(ge=0, le=600)] = 290
    plain: bool = False  # answer as text: "wake" and the news, "pending" or "done" (a shell)


class WakeOut(BaseModel):
    """The news for a waiting agent (`text`, None when none came in time) and whether an
    attempt of its session still waits for an outcome (False: the waiter can go)."""

    session: str
    text: str | None = None
    pending: bool = False

    def plain(self) -> str:
        """The answer for a shell waiter: its first line says what to do."""
        if self.text:
            return f"wake\n{self.text}"
        return "pending\n" if self.pending else "done\n"


class HookOut(BaseModel):
    """What the hook prints: `context` for the model, `message` for the person."""

    session: str
    context: str | None = None
    message: str | None = None
    hook_max_chars: int = HOOK_MAX_CHARS  # the dump budget a plugin asks for, unless set


class TurnMarks:
    """Which conversations just got a dump (a compaction at the turn's start): the "continue"
    prompt of the same turn gets no second copy; and which resumed, their dump owed to the
    prompt that comes next. Marks are used up, and forgotten after ONE_DUMP_PER_TURN_S (a
    resume's after RESUMED_WAITS_S)."""

    def __init__(self) -> None:
        self._marked: dict[tuple[str, str], float] = {}
        self._resumed: dict[tuple[str, str], float] = {}
        self._seen: dict[tuple[object, ...], float] = {}
        self._lock = threading.Lock()

    def first(self, event: tuple[object, ...]) -> bool:
        """Whether this event (a harness's id of it, with what tells its deliveries apart) is
        new: the second delivery of one, within SAME_EVENT_S, is not (ctxd's hooks wired by
        its plugin and by `ctxd install` both run)."""
        now = time.monotonic()
        with self._lock:
            for key, when in list(self._seen.items()):
                if now - when > SAME_EVENT_S:
                    del self._seen[key]
            new = event not in self._seen
            self._seen.setdefault(event, now)
        return new

    def mark(self, sid: str, conversation: str) -> None:
        with self._lock:
            self._marked[(sid, conversation)] = time.monotonic()

    def resumed(self, sid: str, conversation: str) -> None:
        with self._lock:
            now = time.monotonic()
            for key, when in list(self._resumed.items()):
                if now - when > RESUMED_WAITS_S:
                    del self._resumed[key]
            self._resumed[(sid, conversation)] = now

    def owed(self, sid: str, conversation: str) -> bool:
        """Whether this conversation resumed and its dump waits for this prompt; used up."""
        with self._lock:
            at = self._resumed.pop((sid, conversation), None)
        return at is not None and time.monotonic() - at <= RESUMED_WAITS_S

    def fresh(self, sid: str, conversation: str) -> bool:
        """Whether this conversation got a dump moments ago; the mark is used up."""
        with self._lock:
            at = self._marked.pop((sid, conversation), None)
            now = time.monotonic()
            for key, when in list(self._marked.items()):
                if now - when > ONE_DUMP_PER_TURN_S:
                    del self._marked[key]
        return at is not None and now - at <= ONE_DUMP_PER_TURN_S
