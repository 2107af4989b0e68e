"""The news of attempts, as it happens: which attempt came up, died or got stuck, and who waits.

A stored version is compared with the one before it (`outcomes`, pure): an attempt that was
starting or running and now serves, is stuck, or has ended is an outcome, said once. The board
(`NewsBoard`) keeps each session's outcomes not yet delivered and wakes whoever waits for
them: a harness's waiter long-polls (`wait`), costing no CPU while it waits, and claims what
it gets, so one outcome is handed out once. Snapshots publish from their thread; waiters wait
on the server's event loop.
"""

import asyncio
import contextlib
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from ctxd.fmt import between
from ctxd.models import HistoryItem, Snapshot
from ctxd.signals.attempts import phase

OUTCOMES_KEPT = 50  # per session, undelivered: the oldest go first
ERROR_CHARS = 300
# A command of the agent's that ends a process itself: its end is no news to the agent.
_KILLS = re.compile(r"(?:^|[;&|(\s])(?:kill|pkill|killall|fuser\s+-k)\b")


@dataclass(frozen=True)
class Outcome:
    """One attempt's news: `kind` is serving, stuck, died or ended; `text` says it in a line."""

    number: int
    kind: str
    text: str
    at: datetime
    version: int


def outcomes(
    previous: Snapshot | None,
    current: Snapshot,
    commands: Iterable[tuple[datetime, str]] = (),
) -> list[Outcome]:
    """What changed for the attempts from `previous` to `current`: one outcome per attempt
    that now serves, is stuck or has ended, having been live (or unseen) before. `commands`:
    the agent's own, with their times: one that kills an attempt after its launch makes its
    end no news (the agent knows)."""
    at, version = current.header.taken_at, current.header.version
    before = _states(previous) if previous is not None else {}
    kills = [(when, c) for when, c in commands if _KILLS.search(c)]
    out = []
    for item in _attempt_items(current):
        state = _state(item, current)
        number = item.first or 0
        if state == before.get(number) or state not in ("serving", "stuck", "died", "ended"):
            continue
        if state in ("died", "ended") and _killed(item, kills):
            continue
        out.append(Outcome(number, state, _said(item, state, current), at, version))
    return out


def _attempt_items(s: Snapshot) -> list[HistoryItem]:
    return [
        i
        for i in s.narrative.history
        if i.source == "launch" and i.first is not None and i.first == i.last
    ]


def _states(s: Snapshot) -> dict[int, str]:
    return {item.first or 0: _state(item, s) for item in _attempt_items(s)}


def _state(item: HistoryItem, s: Snapshot) -> str:
    if item.status == "ended":
        failed = item.error or (item.ran or "").startswith(("died", "killed", "exited with status"))
        return (
            "died"
            if failed and not (item.ran or "").startswith("exited with status 0")
            else "ended"
        )
    return phase(item, s.signals, s.observations, s.header.taken_at)


def _killed(item: HistoryItem, kills: list[tuple[datetime, str]]) -> bool:
    """Whether one of the agent's kill commands since its launch names this attempt's pid or
    program."""
    words = {str(item.pid)} if item.pid else set()
    program = item.program() or ""
    if program:
        words.add(program.split()[-1])
    return any(w in command for when, command in kills if when >= item.at for w in words)


def _said(item: HistoryItem, state: str, s: Snapshot) -> str:
    program = item.program() or "its program"
    who = f"{item.label} (`{program}`" + (f", pid {item.pid})" if item.pid else ")")
    at = s.header.taken_at
    if state == "serving":
        ports = ", ".join(f":{p}" for p in item.ports)
        return f"{who} is serving on {ports}, {between(item.at, at)} after its launch"
    if state == "stuck":
        stuck = next(
            (sig.text for sig in s.signals if sig.code == "stuck" and sig.subject == str(item.pid)),
            "every process idle",
        )
        return f"{who} is stuck: {stuck.removeprefix('stuck: ')[:ERROR_CHARS]}"
    error = f": {item.error[:ERROR_CHARS]}" if item.error else ""
    where = f" ({item.error_log.rsplit('/', 1)[-1]})" if item.error and item.error_log else ""
    return f"{who} {item.ran or 'ended'}{error}{where}"


def pending(s: Snapshot | None) -> bool:
    """Whether an attempt of this version still waits for an outcome: live, not yet serving
    nor stuck."""
    return any(True for _ in _waiting(s))


def still_pending(s: Snapshot | None, at: datetime) -> list[Outcome]:
    """Each live attempt of version `s` still without an outcome, as news at `at`: "attempt 3
    is still starting, launched 12 min ago" (the quiet rule: an idle agent is told once)."""
    if s is None:
        return []
    out = []
    for item, state in _waiting(s):
        program = item.program() or "its program"
        text = (f"{item.label} (`{program}`) is still {state}, launched"
                f" {between(item.at, at)} ago, with no outcome yet")  # fmt: skip
        out.append(Outcome(item.first or 0, "quiet", text, at, s.header.version))
    return out


def _waiting(s: Snapshot | None) -> Iterator[tuple[HistoryItem, str]]:
    """The live attempts of version `s` with no outcome yet, each with its state (starting,
    running)."""
    if s is None:
        return
    for item in _attempt_items(s):
        if item.status in ("running", "started") and (state := _state(item, s)) in (
            "starting",
            "running",
        ):
            yield item, state


def wake_text(sid: str, news: list[Outcome], current: Snapshot | None) -> str:
    """The paragraph a woken agent reads: the news, each other live attempt's state, and the
    command that shows everything."""
    lines = [f"ctxd: {o.text}." for o in news]
    told = {o.number for o in news}
    if current is not None:
        for item in _attempt_items(current):
            if item.first not in told and item.status in ("running", "started"):
                lines.append(f"{item.label} is still {_state(item, current)}.")
    lines.append(f"Full state: `ctxd resume {sid}`")
    return " ".join(lines)


@dataclass
class _Waiting:
    outcomes: list[Outcome] = field(default_factory=list)
    events: set[asyncio.Event] = field(default_factory=set)
    waiters: int = 0


class NewsBoard:
    """Each session's undelivered outcomes, and the waiters to wake when one comes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, _Waiting] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def publish(self, sid: str, news: list[Outcome]) -> None:
        """Keep these outcomes for the session's waiter and wake it (from any thread)."""
        if not news:
            return
        with self._lock:
            board = self._sessions.setdefault(sid, _Waiting())
            board.outcomes = [*board.outcomes, *news][-OUTCOMES_KEPT:]
            events, loop = list(board.events), self._loop
        if loop is not None:
            for event in events:
                loop.call_soon_threadsafe(event.set)

    def waited(self, sid: str) -> bool:
        """Whether a waiter waits on the session now (its attempts are then looked at often)."""
        with self._lock:
            board = self._sessions.get(sid)
            return board is not None and board.waiters > 0

    def claim(self, sid: str) -> list[Outcome]:
        """The session's undelivered outcomes, now delivered (to the one who claims them)."""
        with self._lock:
            board = self._sessions.get(sid)
            if board is None or not board.outcomes:
                return []
            news, board.outcomes = board.outcomes, []
            return news

    def give_back(self, sid: str, news: list[Outcome]) -> None:
        """Outcomes claimed but not delivered (the waiter's harness is gone): kept again, first."""
        with self._lock:
            board = self._sessions.setdefault(sid, _Waiting())
            board.outcomes = [*news, *board.outcomes][-OUTCOMES_KEPT:]

    async def wait(self, sid: str, timeout_s: float) -> list[Outcome]:
        """The session's undelivered outcomes, claimed, as soon as there are any; [] after
        `timeout_s`. Waits on an asyncio event: no thread and no CPU while nothing comes."""
        self._loop = asyncio.get_running_loop()
        event = asyncio.Event()
        with self._lock:
            board = self._sessions.setdefault(sid, _Waiting())
            board.events.add(event)
            board.waiters += 1
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                event.clear()  # before looking: a publish after the look sets it again
                if news := self.claim(sid):
                    return news
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), left)
        finally:
            with self._lock:
                board.events.discard(event)
                board.waiters -= 1
