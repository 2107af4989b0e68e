"""The news of attempts, as it happens: which attempt came up, died or got stuck, and who waits.

A stored version is compared with the one before it (`outcomes`, pure): an attempt that was
starting or running and now serves, is stuck, or has ended is an outcome, said once. The board
(`NewsBoard`) keeps each session's outcomes not yet delivered and wakes whoever waits for
them: a harness's waiter long-polls (`wait`), costing no CPU while it waits, and claims what
it gets, so one outcome is handed out once. Beside that, the board keeps what it was told
(`told_since`): readers that follow a session (`follow`: `GET /api/sessions/{sid}/news`,
`ctxd wait`, the MCP tool, the session page's live view) read it "since version V" without
claiming anything. Snapshots publish from their thread; waiters and readers wait on the
server's event loop, each on its own asyncio event: nothing polls per waiter or reader.
"""

import asyncio
import contextlib
import os
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from pydantic import BaseModel

from ctxd.fmt import between
from ctxd.models import HistoryItem, Observations, Snapshot
from ctxd.signals.attempts import phase
from ctxd.snapshotter.line_waits import LineWait

OUTCOMES_KEPT = 50  # per session, undelivered: the oldest go first
HISTORY_KEPT = 200  # per session, what readers may ask for since a version
LOG_READY = "log-ready"  # the trigger word of a log that printed the line the agent waits for
WAIT_MAX_S = 600  # one long poll of a reader, at most
RECALL_VERSIONS = 20  # after a restart, the stored versions a reader's first ask looks over
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
    waits: Iterable[LineWait] = (),
) -> list[Outcome]:
    """What changed for the attempts from `previous` to `current`: one outcome per attempt
    that now serves, is stuck or has ended, having been live (or unseen) before. `commands`:
    the agent's own, with their times: one that kills an attempt after its launch makes its
    end no news (the agent knows). `waits`: the log lines the agent waits for
    (`line_waits.py`): an attempt whose log printed one serves."""
    at, version = current.header.taken_at, current.header.version
    waits = tuple(waits)
    before = _states(previous, waits) if previous is not None else {}
    kills = [(when, c) for when, c in commands if _KILLS.search(c)]
    out = []
    for item in _attempt_items(current):
        state = _state(item, current, waits)
        number = item.first or 0
        if state == before.get(number) or state not in ("serving", "stuck", "died", "ended"):
            continue
        if state in ("died", "ended") and _killed(item, kills):
            continue
        out.append(Outcome(number, state, _said(item, state, current, waits), at, version))
    return out


def _attempt_items(s: Snapshot) -> list[HistoryItem]:
    return [
        i
        for i in s.narrative.history
        if i.source == "launch" and i.first is not None and i.first == i.last
    ]


def _states(s: Snapshot, waits: Sequence[LineWait] = ()) -> dict[int, str]:
    return {item.first or 0: _state(item, s, waits) for item in _attempt_items(s)}


def _state(item: HistoryItem, s: Snapshot, waits: Sequence[LineWait] = ()) -> str:
    if item.status == "ended":
        failed = item.error or (item.ran or "").startswith(("died", "killed", "exited with status"))
        return (
            "died"
            if failed and not (item.ran or "").startswith("exited with status 0")
            else "ended"
        )
    state = phase(item, s.signals, s.observations, s.header.taken_at)
    if state in ("starting", "running", "stuck") and _ready_line(item, s, waits) is not None:
        return "serving"  # its log printed the line the agent waits for: up, and idle for work
    return state


def _ready_line(
    item: HistoryItem, s: Snapshot, waits: Sequence[LineWait]
) -> tuple[str, str] | None:
    """(the log, its line) of a wait of the agent's, written since the attempt's launch, on
    one of the logs its output goes to, that the log's last lines in `s` satisfy."""
    logs = {os.path.normpath(p) for p in item.logs}
    for wait in waits:
        if wait.at < item.at or wait.path not in logs:
            continue
        for log in s.observations.logs.items:
            if log.path == wait.path and (line := wait.printed(log.lines)) is not None:
                return wait.path, line
    return None


def _killed(item: HistoryItem, kills: list[tuple[datetime, str]]) -> bool:
    """Whether one of the agent's kill commands since its launch names this attempt's pid or
    program."""
    words = {str(item.pid)} if item.pid else set()
    program = item.program() or ""
    if program:
        words.add(program.split()[-1])
    return any(w in command for when, command in kills if when >= item.at for w in words)


def _said(item: HistoryItem, state: str, s: Snapshot, waits: Sequence[LineWait]) -> str:
    program = item.program() or "its program"
    who = f"{item.label} (`{program}`" + (f", pid {item.pid})" if item.pid else ")")
    at = s.header.taken_at
    ready = _ready_line(item, s, waits) if state == "serving" and not item.port_open else None
    if ready is not None:
        log, line = ready
        name, since = log.rsplit("/", 1)[-1], between(item.at, at)
        said = line.strip()[:ERROR_CHARS]
        return f"{who} is up: its log printed `{said}` ({name}), {since} after its launch"
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


def pending(s: Snapshot | None, attempt: int | None = None, waits: Sequence[LineWait] = ()) -> bool:
    """Whether an attempt of this version (attempt number `attempt`, if given) still waits
    for an outcome: live, not yet serving (by its port, or by the line the agent waits for in
    its log: `waits`) nor stuck."""
    return any(attempt in (None, item.first) for item, _ in _waiting(s, waits))


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


def _waiting(
    s: Snapshot | None, waits: Sequence[LineWait] = ()
) -> Iterator[tuple[HistoryItem, str]]:
    """The live attempts of version `s` with no outcome yet, each with its state (starting,
    running)."""
    if s is None:
        return
    for item in _attempt_items(s):
        if item.status in ("running", "started") and (state := _state(item, s, waits)) in (
            "starting",
            "running",
        ):
            yield item, state


def wake_text(
    sid: str, news: list[Outcome], current: Snapshot | None, waits: Sequence[LineWait] = ()
) -> str:
    """The paragraph a woken agent reads: the news, each other live attempt's state, and the
    command that shows everything."""
    lines = [f"ctxd: {o.text}." for o in news]
    told = {o.number for o in news}
    if current is not None:
        for item in _attempt_items(current):
            if item.first not in told and item.status in ("running", "started"):
                lines.append(f"{item.label} is still {_live(item, current, waits)}.")
    lines.append(f"Full state: `ctxd resume {sid}`")
    return " ".join(lines)


def _live(item: HistoryItem, s: Snapshot, waits: Sequence[LineWait]) -> str:
    """A live attempt's state as the wake text says it: "serving on :30000" with its ports."""
    state = _state(item, s, waits)
    if state == "serving" and item.ports:
        return f"serving on {', '.join(f':{p}' for p in item.ports)}"
    return state


@dataclass
class _Waiting:
    outcomes: list[Outcome] = field(default_factory=list)  # not yet delivered as a wake
    told: deque[Outcome] = field(default_factory=lambda: deque(maxlen=HISTORY_KEPT))
    events: set[asyncio.Event] = field(default_factory=set)
    waiters: int = 0
    recalled: bool = False  # the outcomes of versions stored before this board began are in
    through: int = 0  # the newest version whose outcomes are in
    waits: tuple[LineWait, ...] = ()  # the log lines the agent waits for


class NewsBoard:
    """Each session's outcomes (those not yet delivered as a wake, and those told, for readers
    since a version), the log lines its agent waits for, and the waiters and readers to wake
    when an outcome comes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, _Waiting] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        _BOARDS.add(self)

    def close(self) -> None:
        """Answer every waiter and reader now, with what it has (nothing, mostly): the server
        is stopping, and a long poll left waiting would be cut off mid-answer."""
        with self._lock:
            self._closed = True
            events = [e for board in self._sessions.values() for e in board.events]
            loop = self._loop
        if loop is not None:
            for event in events:
                loop.call_soon_threadsafe(event.set)

    def publish(self, sid: str, news: list[Outcome], version: int | None = None) -> None:
        """Keep these outcomes for the session's waiter and wake it (from any thread); with
        `version`, they are all of that stored version's (none, maybe)."""
        if not news:
            if version is not None:
                with self._lock:
                    board = self._sessions.setdefault(sid, _Waiting())
                    board.through = max(board.through, version)
            return
        with self._lock:
            board = self._sessions.setdefault(sid, _Waiting())
            board.through = max(board.through, version or 0)
            news = [o for o in news if not _said_already(board, o)]
            board.outcomes = [*board.outcomes, *news][-OUTCOMES_KEPT:]
            _keep(board, [o for o in news if o.kind != "quiet"])  # "no news yet" is no event
            events, loop = list(board.events), self._loop
        if loop is not None:
            for event in events:
                loop.call_soon_threadsafe(event.set)

    def expect(self, sid: str, waits: Iterable[LineWait]) -> None:
        """The log lines the session's agent waits for now (`line_waits.py`)."""
        with self._lock:
            self._sessions.setdefault(sid, _Waiting()).waits = tuple(waits)

    def printed(
        self, sid: str, before: Observations | None, after: Observations
    ) -> list[tuple[str, str]]:
        """A probe's news for the trigger loop, as (trigger word, text): a log that now shows
        a line the agent waits for, which it did not show `before`."""
        with self._lock:
            board = self._sessions.get(sid)
            waits = board.waits if board is not None else ()
        out = []
        for wait in waits:
            lines = [log.lines for log in after.logs.items if log.path == wait.path]
            line = next((found for ls in lines if (found := wait.printed(ls))), None)
            if line is None:
                continue
            old = [
                log.lines for log in (before.logs.items if before else []) if log.path == wait.path
            ]
            if not any(wait.printed(ls) for ls in old):
                name = wait.path.rsplit("/", 1)[-1]
                out.append((LOG_READY, f"{name} printed the line the agent waits for: {line}"))
        return out

    def waits_for(self, sid: str) -> tuple[LineWait, ...]:
        """The log lines the session's agent waits for, as the last stored version found."""
        with self._lock:
            board = self._sessions.get(sid)
            return board.waits if board is not None else ()

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

    def told_since(self, sid: str, version: int, attempt: int | None = None) -> list[Outcome]:
        """What the session's attempts (attempt `attempt` alone, if given) came to in versions
        after `version`, oldest first, whether delivered as a wake or not."""
        with self._lock:
            board = self._sessions.get(sid)
            told = list(board.told) if board is not None else []
        return [o for o in told if o.version > version and attempt in (None, o.number)]

    def recalled(self, sid: str) -> bool:
        """Whether the outcomes of the versions stored before this board began are in."""
        with self._lock:
            board = self._sessions.get(sid)
            return board is not None and board.recalled

    def recall(self, sid: str, found: list[Outcome], through: int) -> None:
        """The outcomes found in stored versions up to `through` (after a restart: the board
        starts empty), kept among those told since, each once."""
        with self._lock:
            board = self._sessions.setdefault(sid, _Waiting())
            _keep(board, found)
            board.recalled = True
            board.through = max(board.through, through)

    def through(self, sid: str) -> int:
        """The newest version of the session whose outcomes the board has: "now", for a
        reader that asks for what happens from here on."""
        with self._lock:
            board = self._sessions.get(sid)
            return board.through if board is not None else 0

    async def wait(self, sid: str, timeout_s: float) -> list[Outcome]:
        """The session's undelivered outcomes, claimed, as soon as there are any; [] after
        `timeout_s`. Waits on an asyncio event: no thread and no CPU while nothing comes."""
        return await self._until(sid, lambda: self.claim(sid), timeout_s, waiter=True)

    async def follow(
        self, sid: str, version: int, attempt: int | None, timeout_s: float, waiter: bool
    ) -> list[Outcome]:
        """What the session's attempts (or attempt `attempt`) came to after `version`, as soon
        as there is something, claiming nothing; [] after `timeout_s`. A `waiter` (an agent,
        not a page's reader) makes its session looked at often while it waits."""
        look = partial(self.told_since, sid, version, attempt)
        return await self._until(sid, look, timeout_s, waiter)

    async def _until(
        self, sid: str, look: Callable[[], list[Outcome]], timeout_s: float, waiter: bool
    ) -> list[Outcome]:
        """What `look` finds, as soon as it finds something after a publish wakes this one's
        event; [] after `timeout_s`."""
        self._loop = asyncio.get_running_loop()
        event = asyncio.Event()
        with self._lock:
            board = self._sessions.setdefault(sid, _Waiting())
            board.events.add(event)
            board.waiters += waiter
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                event.clear()  # before looking: a publish after the look sets it again
                if news := look():
                    return news
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return []
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), left)
        finally:
            with self._lock:
                board.events.discard(event)
                board.waiters -= waiter


_BOARDS: "weakref.WeakSet[NewsBoard]" = weakref.WeakSet()


def close_all() -> None:
    """Every board's waiters and readers answered now: the server is stopping."""
    for board in list(_BOARDS):
        board.close()


def stopping() -> bool:
    """Whether the server is stopping (`close_all`): a stream of news ends instead of asking
    again."""
    return any(board._closed for board in list(_BOARDS))


def _said_already(board: _Waiting, outcome: Outcome) -> bool:
    """Whether the attempt's last outcome was already this one (serving by its log's line,
    then by its port): one event, told once."""
    last = next((o for o in reversed(board.told) if o.number == outcome.number), None)
    return outcome.kind == "serving" and last is not None and last.kind == "serving"


def _keep(board: _Waiting, news: list[Outcome]) -> None:
    """Add outcomes to what the board was told, each (attempt, kind, version) once, in the
    order of their versions."""
    known = {(o.number, o.kind, o.version) for o in board.told}
    fresh = [o for o in news if (o.number, o.kind, o.version) not in known]
    if fresh:
        kept = sorted([*board.told, *fresh], key=lambda o: o.version)
        board.told.clear()
        board.told.extend(kept)


class NewsItem(BaseModel):
    """One outcome as a reader gets it: attempt `attempt` came to `kind` (serving, stuck,
    died, ended) in version `version`; `text` says it in a line."""

    attempt: int
    kind: str
    text: str
    at: datetime
    version: int


class NewsOut(BaseModel):
    """What happened since the version asked about (`news`, oldest first; empty when nothing
    did in time); `version`: ask next with `since` = this; `pending`: whether an attempt asked
    about is still live with no outcome yet (False: nothing more will come for it)."""

    session: str
    version: int
    news: list[NewsItem]
    pending: bool
