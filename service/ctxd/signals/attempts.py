"""Signals about attempts: Now says of each line which attempt it is about, worst first.

The observation signals (`derive.py`) speak of logs, ports and processes; a resuming agent
needs them per attempt. Here a log error that an ended attempt's own log ended with becomes
that attempt's line ("attempt 3 died within 1 s …: <error>"), failures alike in a row fold
into one line with their count, the running attempt leads with what its own log says, and a
port line says which attempt expects it. Pure: the snapshot's signals and its Attempts in,
the signals to show out.
"""

from collections.abc import Set
from datetime import UTC, datetime

from ctxd.collectors._logtext import error_shape
from ctxd.fmt import attempts, between
from ctxd.models import SEVERITY_ORDER, HistoryItem, Observations, Signal
from ctxd.snapshotter import happened
from ctxd.thresholds import STUCK_AFTER_S

# The newest failures named one by one; older ones fold into one line per kind of error.
FAILURES_SHOWN = 3
_DIFF = ("relaunched", "a different program", "env ")


def restate(
    signals: list[Signal],
    history: list[HistoryItem],
    seen: Observations,
    logs: Set[str],
    ended: Set[str] = frozenset(),
    at: datetime | None = None,
) -> list[Signal]:
    """`signals` with the attempts' lines added, and the log lines they restate left out:
    an error in an ended attempt's log (`ended`), new or old, and an old error in any
    attempt's log (`logs`), which the attempts' lines say once for all."""
    attempt_items = [item for item in history if item.source == "launch" and item.label]
    if not attempt_items:
        return signals
    told = {item.error_log for item in attempt_items if item.error_log is not None} | ended
    kept = [s for s in signals if not _restated(s, told, logs)]
    running = [item for item in attempt_items if item.status in ("running", "started")]
    at = at or datetime.now(UTC)
    for item in running:
        mark = f"(pid {item.pid})"
        starting = phase(item, signals, seen, at) == "starting"
        for i, signal in enumerate(kept):
            about_it = item.pid and signal.code == happened.PORT_CLOSED and mark in signal.text
            # every watched process idle, and each one is this attempt's
            about_it = about_it or (signal.code == "all_idle" and _all_its_own(item, seen))
            # GPUs held idle while the weights are still being set up: the same news
            about_it = about_it or (signal.code == "gpu_held_idle" and starting)
            if about_it and starting:  # within its start: news, not a failure
                ago = between(item.at, at)
                text = f"{item.label} is starting (launched {ago} ago): {signal.text}"
                kept[i] = signal.model_copy(update={"text": text, "severity": "info"})
            elif about_it:
                kept[i] = signal.model_copy(update={"text": f"{item.label}: {signal.text}"})
    added = [*_failures(attempt_items, bool(running)), *(_running(i, seen) for i in running)]
    return sorted([*kept, *added], key=lambda s: SEVERITY_ORDER[s.severity])


def phase(item: HistoryItem, signals: list[Signal], seen: Observations, at: datetime) -> str:
    """What a live attempt is doing: `stuck` (its tree is), `serving` (its port opened),
    `starting` (younger than the stuck threshold, or its process not seen yet) or `running`.
    A launch seconds old with its port still closed is starting, not failing."""
    if item.pid and any(s.code == "stuck" and s.subject == str(item.pid) for s in signals):
        return "stuck"
    if item.port_open:
        return "serving"
    threshold = seen.processes.stuck_after_s or STUCK_AFTER_S
    if item.status == "started" or (at - item.at).total_seconds() < threshold:
        return "starting"
    return "running"


def _all_its_own(item: HistoryItem, seen: Observations) -> bool:
    """Whether every watched process is the attempt's process or descends from it."""
    family = {item.pid}
    rows = seen.processes.items
    for _ in rows:  # parents before children is not promised: grow until nothing joins
        grown = family | {p.pid for p in rows if p.ppid in family}
        if grown == family:
            break
        family = grown
    return bool(item.pid) and bool(rows) and all(p.pid in family for p in rows)


def _restated(signal: Signal, told: Set[str], logs: Set[str]) -> bool:
    if signal.code != happened.LOG_ERROR:
        return False
    return signal.subject in told or (signal.subject in logs and signal.severity != "critical")


def _failures(attempt_items: list[HistoryItem], something_runs: bool) -> list[Signal]:
    """The ended attempts that left an error: the newest few by name, runs of the same error
    as one line with their count; critical when nothing runs since."""
    failed = [item for item in attempt_items if item.status in ("ended", "folded") and item.error]
    runs: list[list[HistoryItem]] = []
    for item in failed:
        if runs and _shape(runs[-1][-1].error) == _shape(item.error):
            runs[-1].append(item)
        else:
            runs.append([item])
    signals = []
    for run in runs[-FAILURES_SHOWN:]:
        newest = run[-1]
        last = runs[-1] is run
        severity = "critical" if last and not something_runs else "warning"
        where = f" (in {newest.error_log.rsplit('/', 1)[-1]})" if newest.error_log else ""
        if len(run) == 1 and newest.status == "ended":
            how = (newest.outcome or "").split(";", 1)[0]
            text = f"{newest.label} {how}: {newest.error}{where}"
        else:
            count = sum((item.last or 0) - (item.first or 0) + 1 for item in run)
            span = attempts(run[0].first or 0, newest.last or 0)
            text = f"{span} died the same way ({count} times); the newest: {newest.error}{where}"
        signals.append(Signal(severity=severity, code="attempt_failed", subject=newest.label or "",
                              text=text))  # fmt: skip
    return signals


def _running(item: HistoryItem, seen: Observations) -> Signal:
    """The live attempt, in one line: how long it runs, its port, what its log says last."""
    tree = {p.pid for p in seen.processes.items if item.pid in (p.pid, p.tree)}
    own = [log for log in seen.logs.items if log.writer_pid in tree and log.lines]
    last = own[0].lines[-1].strip()[:160] if own else ""
    said = f"; its log: {last!r}" if last else ""
    state = [part for part in (item.outcome or "").split("; ") if not part.startswith(_DIFF)]
    return Signal(severity="info", code="attempt_running", subject=item.label or "",
                  text=f"{item.label} ({'; '.join(state)}){said}")  # fmt: skip


def _shape(error: str | None) -> str:
    """Errors alike but for their numbers (run 14's and run 23's) are one kind."""
    return error_shape(error or "")
