"""The dump's Attempts table: a row per attempt, runs that ended alike folded into one row.

No attempt is ever left out: the newest failure and what runs keep rows of their own, and a
run of attempts before them that died of the same error (its numbers aside) is one row naming
the flags that varied among them, and the value they all kept of a flag changed elsewhere.
Pure: the narrative's history in, rows out.
"""

import shlex
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from ctxd.attempts.flags import parse_flags
from ctxd.collectors._logtext import error_shape
from ctxd.fmt import attempts, between, flags_said, log_name
from ctxd.models import HistoryItem

CHANGED_CHARS = 240
_LIVE = ("running", "started")
FLAGS_NAMED = 6


@dataclass(frozen=True)
class Row:
    label: str
    launched: str
    program: str
    ran: str
    changed: str
    ended: str  # Markdown: the error as code, with its log


def rows(
    history: list[HistoryItem], at: datetime, stuck: Collection[str] = frozenset()
) -> list[Row]:
    """The table's rows, oldest first; `at`: the dump's instant, what runs is timed to;
    `stuck`: the trees (by top pid) called stuck."""
    attempt_items = [i for i in history if i.source == "launch" and i.status != "folded"]
    failed = [i for i in attempt_items if i.error and i.status == "ended"]
    apart = {id(failed[-1])} if failed else set()
    out: list[Row] = []
    run: list[HistoryItem] = []
    tried = {flag for i in attempt_items for flag in i.flag_values if flag.startswith("-")}
    for item in history:
        alike = run and error_shape(run[-1].error or "") == error_shape(item.error or "")
        if _foldable(item, apart) and alike:
            run.append(item)
            continue
        out += _flush(run, tried)
        run = [item] if _foldable(item, apart) else []
        if not run:
            out.append(_row(item, at, first=not out, stuck=str(item.pid) in stuck))
    return out + _flush(run, tried)


def _foldable(item: HistoryItem, apart: set[int]) -> bool:
    return (
        item.source == "launch"
        and item.status == "ended"
        and bool(item.error)
        and id(item) not in apart
    )


def _flush(run: list[HistoryItem], tried: set[str]) -> list[Row]:
    """A run of alike failures as one row; `tried`: the flags the session changed somewhere,
    whose one value through the run the row names too ("all with --nccl-algo NVLSTree": the
    row said only what varied, and a reader asked which value these runs tried)."""
    if len(run) < 2:
        return [_row(item) for item in run]
    first, last = run[0].first or 0, run[-1].last or 0
    # the first's values too: what it was launched with
    named, varied = flags_said((p for item in run for p in item.flag_values.items()), FLAGS_NAMED)
    named += " …" if varied > FLAGS_NAMED else ""
    varied_here = {flag for item in run for flag in item.flag_values}
    held = _held(run, tried - varied_here)
    named = "; ".join(part for part in (named and f"varied: {named}", held and f"all with {held}")
                      if part)  # fmt: skip
    return [
        Row(
            label=f"**{attempts(first, last)}**",
            launched=f"{run[0].at:%H:%M:%S} to {run[-1].at:%H:%M:%S}",
            program=_program(run[-1]),
            ran=f"each died the same way ({last - first + 1} times); the newest {run[-1].ran}",
            changed=named,
            ended=_ended(run[-1]),
        )
    ]


def _held(run: list[HistoryItem], flags: set[str]) -> str:
    """Of `flags`, those each attempt of the run gave the same value, from their command
    lines ("--nccl-algo NVLSTree"); "" where a line is unknown or cannot be split."""
    if not flags:
        return ""
    seen: dict[str, set[str | None]] = {}
    for item in run:
        if not item.command:
            return ""
        try:
            given, _ = parse_flags(shlex.split(item.command))
        except ValueError:  # an unclosed quote
            return ""
        for flag in flags:
            seen.setdefault(flag, set()).add(given.get(flag, "\0absent"))
    held = [(f, v.pop()) for f, v in sorted(seen.items()) if len(v) == 1]
    return ", ".join(f if v is None else f"{f} {v}" for f, v in held if v != "\0absent")


def _row(
    item: HistoryItem, at: datetime | None = None, first: bool = False, stuck: bool = False
) -> Row:
    if item.source == "journal":
        status = f" (**{item.status}**)" if item.status else ""
        return Row("noted by the agent", f"{item.at:%H:%M:%S}", "", f"{item.text}{status}", "",
                   item.outcome or "")  # fmt: skip
    if item.status == "folded":
        program = f"`{item.program()}`" if item.program() else ""
        return Row(f"**{item.label}**", f"from {item.at:%H:%M:%S}", program,
                   item.ran or item.text, item.changed or "", _ended(item))  # fmt: skip
    ran = item.ran or item.status or ""
    if item.status == "running" and at is not None:  # of the dump's instant, to the second
        ran = f"running for {between(item.at, at)}"
    if item.ports and (item.pid is not None or item.status != "ended"):  # unseen: unknown
        ports = ", ".join(map(str, item.ports))
        state = "open" if item.port_open else "never opened" if item.status == "ended" else None
        ran += f"; port {ports} {state or ('not open' if stuck else 'not open yet')}"
    changed = (item.changed or "").removeprefix("relaunched with ")
    if len(changed) > CHANGED_CHARS:  # whole changes kept, the last ones go
        head = changed[: CHANGED_CHARS - 1]
        cut = max(head.rfind("; "), head.rfind(", "))
        changed = (head[:cut] if cut > 0 else head) + ", …"
    return Row(
        label=f"**{item.label}**",
        launched=f"{item.at:%H:%M:%S}",
        program=item.text.split(" at ")[0],
        ran=ran,
        changed=changed or ("-" if first else "the same"),
        ended=_ended(item) or _live_end(item, stuck),
    )


def _live_end(item: HistoryItem, stuck: bool) -> str:
    """A live attempt's last cell, as the handover's line says its phase ("still running" of
    a server the handover calls serving read as a server not yet up)."""
    if item.status not in _LIVE:
        return ""
    if stuck:
        return "still running, stuck (see Now)"
    return "still running, serving" if item.port_open else "still running"


def _ended(item: HistoryItem) -> str:
    if not item.error:
        return ""
    code = item.error.replace("`", "'")
    where = f" (in {log_name(item.error_log, item.cwd)})" if item.error_log else ""
    return f"`{code}`{where}"


def _program(item: HistoryItem) -> str:
    return item.text.split(" (pid")[0].split(" at ")[0]
