"""Attempts folded for the dump: runs of alike attempts as one line, and the attempts older
than the newest few as one line of how they ended and which flags varied.
"""

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta

from ctxd.attempts.flags import attempt_diff, changed_values, parse_flags, program_name, program_of
from ctxd.attempts.model import Attempt
from ctxd.collectors._logtext import error_shape
from ctxd.fmt import attempts, flags_said, ranges, values_said
from ctxd.models import HistoryItem

Numbered = tuple[int, Attempt]  # an attempt and its number in the session, from 1
ERROR_CHARS = 160  # of a folded kind of error, its newest line
FLAGS_NAMED = 8  # of the flags that varied among the folded attempts, those named
WORDED_VALUES = 8  # a flag of this many worded values at most names the attempts of each


def runs(numbered: list[Numbered]) -> list[list[Numbered]]:
    """Attempts of one command line in a row, in one state (a crowd of alike processes, one
    program started again and again unchanged), each run a list."""
    found: list[list[Numbered]] = []
    for number, attempt in numbered:
        if found and _alike(found[-1][0][1], attempt):
            found[-1].append((number, attempt))
        else:
            found.append([(number, attempt)])
    return found


def _alike(a: Attempt, b: Attempt) -> bool:
    return (a.argv, a.ended_at is None, a.port_opened, a.expected_ports, a.error) == (
        b.argv, b.ended_at is None, b.port_opened, b.expected_ports, b.error,
    )  # fmt: skip


def crowd(run: list[Numbered], first: HistoryItem, last: HistoryItem) -> HistoryItem:
    """A run as one line: "launched `sleep 60` 20 times (pids …)", with the newest's outcome."""
    pids = [str(attempt.pid) for _, attempt in run if attempt.pid is not None]
    shown = ", ".join(pids[:3]) + (f", … {pids[-1]}" if len(pids) > 3 else "")
    program = program_name(run[0][1].argv)
    start, end = (f"{run[i][1].started_at:%H:%M:%S}" for i in (0, -1))
    when = f"at {start}" if start == end else f"from {start} to {end}"
    ran = f" (pids {shown})" if pids else ""
    text = f"`{program}` {len(run)} times{ran} {when} UTC"
    numbers = {"first": run[0][0], "last": run[-1][0], "label": attempts(run[0][0], run[-1][0])}
    update = {"text": text, "outcome": last.outcome, "ran": last.ran, **numbers}
    return first.model_copy(update=update)


@dataclass(frozen=True, slots=True)
class Light:
    """An attempt (or a run of alike ones) that only the fold shows; a plain record, since a
    long session's snapshot makes hundreds of them (a model each cost it milliseconds)."""

    at: datetime
    first: int
    last: int
    status: str
    error: str | None
    error_log: str | None
    flags: tuple[tuple[str, str], ...]  # (flag or variable, its value here) that changed
    program: str
    cwd: str | None


# Lights by what they are read from: an ended attempt's never changes, and a long session's
# snapshot folds hundreds (its flags parsed and compared each time cost it milliseconds).
_lights: dict[tuple, Light] = {}
LIGHTS_KEPT = 8192


def light(run: list[Numbered], previous: Attempt | None, following: Attempt | None = None) -> Light:
    """Its numbers, how it ended, its error and, against the one before (`previous`, for the
    newest folded ones), the flags and variables it changed, with their values; the session's
    first attempt, with none before it, gives the values of those its `following` one changed
    (the fold then lists what the first was launched with too)."""
    (first, attempt), (last, newest) = run[0], run[-1]
    key = (first, last, attempt.id, newest.id, newest.ended_at, newest.seen, newest.error,
           newest.error_log, previous.id if previous else None,
           following.id if following else None)  # fmt: skip
    if attempt.id and (kept := _lights.get(key)) is not None:
        return kept
    if len(_lights) >= LIGHTS_KEPT:
        _lights.clear()
    _lights[key] = made = _light(run, previous, following)
    return made


def _light(run: list[Numbered], previous: Attempt | None, following: Attempt | None) -> Light:
    (first, attempt), (last, newest) = run[0], run[-1]
    flags: tuple[tuple[str, str], ...] = ()
    if previous is not None:
        diff = attempt_diff(previous, attempt)
        flags = tuple(changed_values(diff).items())
    elif following is not None:
        diff = attempt_diff(following, attempt)
        flags = tuple((k, v) for k, v in changed_values(diff).items() if v != "(removed)")
    status = "running" if newest.ended_at is None and newest.seen else "ended"
    return Light(attempt.started_at, first, last,
                 status if newest.ended_at or newest.seen else "started",
                 newest.error, newest.error_log, flags, program_name(attempt.argv),
                 newest.cwd)  # fmt: skip


def folded(
    older: list[Light], before: int, sid: str, first_attempt: Attempt | None = None
) -> HistoryItem:
    """The attempts older than the newest few, in one line: how many ended how (the same error
    once, with its count) and which flags varied among them; given the first of them
    (`first_attempt`, where every one of them was compared with the one before), a flag of a
    few worded values names the attempts each value held for."""
    first, last = older[0].first, older[-1].last
    outcomes: dict[str, int] = {}
    example: dict[str, str] = {}  # each kind of error as its newest one read, digits and all
    for item in older:
        count = item.last - item.first + 1
        key = _shape(item.error or item.status or "?")
        outcomes[key] = outcomes.get(key, 0) + count
        example[key] = (item.error or item.status or "?")[:ERROR_CHARS]
    said = "; ".join(
        f"{n} {_outcome_words(example[shape])}"
        for shape, n in sorted(outcomes.items(), key=lambda x: -x[1])
    )
    varied = (
        _held(older, first_attempt)
        if first_attempt is not None
        else flags_said((pair for item in older for pair in item.flags), FLAGS_NAMED)[0]
    )
    flags = f"; flags that varied: {varied}" if varied else ""
    earlier = f" (and {before} before them)" if before else ""
    failed = [item for item in older if item.error]
    programs = {item.program for item in older}
    program = f"`{programs.pop()}`: " if len(programs) == 1 else ""
    alike = len(outcomes) == 1 and failed
    ran = f"{last - first + 1} died the same way" if alike else said
    return HistoryItem(
        error=failed[-1].error if failed else None,
        error_log=failed[-1].error_log if failed else None,
        cwd=failed[-1].cwd if failed else None,
        at=older[0].at,
        source="launch",
        label=attempts(first, last),
        first=first,
        last=last,
        text=f"{program}{said}{flags}{earlier}",
        ran=ran + earlier,
        changed=f"varied: {varied}" if varied else "",
        status="folded",
        outcome=f"each one: `ctxd search {sid} WORDS`",
    )


def _held(older: list[Light], first_attempt: Attempt) -> str:
    """Which flags varied among the folded attempts, each with its values in the order tried;
    one of a few worded values (an algorithm, a backend) with the attempts each held for:
    "--nccl-algo Ring (1-9, 70-79), Tree (10-19, 80-89)", so a reader knows what each tried.
    A value holds from the attempt that set it to the next that changed it."""
    changes: dict[str, list[tuple[int, str]]] = {}
    for item in older:
        for name, value in item.flags:
            changes.setdefault(name, []).append((item.first, value))
    start, end = older[0].first, older[-1].last
    launched = _values(first_attempt)
    said = []
    for name in sorted(changes)[:FLAGS_NAMED]:
        points = changes[name]
        if points[0][0] > start and name in launched:
            points = [(start, launched[name]), *points]
        values = list(dict.fromkeys(value for _, value in points))
        if len(values) > WORDED_VALUES or all(v.lstrip("-").isdigit() for v in values):
            said.append(f"{name} {values_said(values)}")
            continue
        held: dict[str, list[int]] = {}
        for (at, value), (following, _) in zip(points, [*points[1:], (end + 1, "")], strict=True):
            held.setdefault(value, []).extend(range(at, following))
        said.append(f"{name} " + ", ".join(f"{v} ({ranges(n)})" for v, n in held.items()))
    # the variables every one of them ran with: no diff names them, and a reader asked
    # which interface the first 194 runs used before the one that served
    kept = [
        f"{k}={v}"
        for k, v in sorted(first_attempt.env.items())
        if k not in changes and "[REDACTED]" not in v  # a token tells nothing of the runs
    ]
    return "; ".join([*said, *(["all with " + " ".join(kept)] if kept else [])])


def _values(attempt: Attempt) -> dict[str, str]:
    """Its flags and variables with the values it was launched with, as a diff names them."""
    flags, _ = parse_flags(program_of(list(attempt.argv))[1])
    return {**attempt.env, **{k: "(bare)" if v is None else v for k, v in flags.items()}}


def earlier(before: int, sid: str, at: datetime) -> HistoryItem:
    """The attempts before those read for the dump, in one line that says how to find them."""
    return HistoryItem(
        at=at - timedelta(microseconds=1),
        source="launch",
        label=attempts(1, before),
        first=1,
        last=before,
        text=f"{before} earlier attempts, not read for this dump",
        status="folded",
        outcome=f"each one: `ctxd search {sid} WORDS`",
    )


@functools.lru_cache(maxsize=4096)  # a long session's errors repeat: hundreds per snapshot
def _shape(text: str) -> str:
    """An error as a class of errors (`error_shape`: its numbers masked, from its exception
    on), so run 14 and run 23 of one failure read alike; cut to 160 characters."""
    return error_shape(text)[:160]


def _outcome_words(said: str) -> str:
    if said in ("running", "ended", "started", "?"):
        return {"running": "running", "ended": "ended", "started": "starting"}.get(said, "?")
    return f"died with `{said}` (the newest such)"
