"""Signals read from the watched logs: an error named by its root cause, and silent logs."""

from collections.abc import Sequence
from datetime import datetime, timedelta

from ctxd.collectors._logtext import error_line_indexes
from ctxd.collectors.proc.procfs import true_start
from ctxd.fmt import between, human_duration
from ctxd.models import LogInfo, Observations, Signal
from ctxd.models.snapshot import Severity
from ctxd.snapshotter import happened
from ctxd.thresholds import LOG_SILENT_AFTER_S


def last_error_line(
    current: Observations, logs: Sequence[LogInfo] | None = None
) -> tuple[str, str] | None:
    """(log path, line) of the newest line that looks like an error in any watched log (or
    in `logs`).

    The logs collector's matcher: a setting's value (log_level='ERROR') is no error here either.
    """
    for log in sorted(current.logs.items if logs is None else logs, key=lambda lg: lg.silent_for_s):
        found = error_line_indexes(log.lines)
        if found:
            return log.path, log.lines[found[-1]].strip()[:200]
    return None


def root_cause(
    current: Observations, logs: Sequence[LogInfo] | None = None
) -> tuple[str, str] | None:
    """(log path, line) that best explains a failure: the root cause of a new error block,
    else of an earlier one, else the newest error-shaped line of a tail; of `logs` when
    given (the logs of one run), else of every watched log."""
    chosen = sorted(current.logs.items if logs is None else logs, key=lambda lg: lg.silent_for_s)
    for new in (True, False):
        for log in chosen:
            if log.error_summary and log.error_new == new:
                return log.path, log.error_summary
    return last_error_line(current, chosen)


def logs_of(current: Observations, pids: set[int], started: datetime | None) -> list[LogInfo]:
    """The watched logs that belong to the run of these processes: those they write, and
    those nobody writes now that were written since the run started. A log an earlier run
    left behind is not this run's, whatever its last error says."""
    own = []
    for log in current.logs.items:
        if log.writer_pid is not None:
            if log.writer_pid in pids:
                own.append(log)
        elif started is not None and log.modified_at >= started - timedelta(seconds=1):
            own.append(log)
    return own


def log_errors(current: Observations, previous: Observations | None) -> list[Signal]:
    """An error in a watched log, named by its root cause and its log, counted when repeated."""
    signals = []
    for log in current.logs.items:
        if not log.errors or not log.error_summary:
            continue
        times = f" ({log.error_repeats} times)" if log.error_repeats > 1 else ""
        if log.error_new:
            lead = "new error" if previous is not None else "error"
            severity: Severity = "critical"
        else:
            lead, severity = "earlier error, none new since,", "warning"
        signals.append(
            Signal(severity=severity, code=happened.LOG_ERROR, subject=log.path,
                   text=f"{lead} in {log.path}: {log.error_summary}{times}")
        )  # fmt: skip
    return signals


def silent_for(log: LogInfo, at: datetime | None) -> str:
    """How long a log has said nothing, to the version's instant `at` as its section says it."""
    return human_duration(log.silent_for_s) if at is None else between(log.modified_at, at)


def silent_logs(current: Observations, at: datetime | None = None) -> list[Signal]:
    signals = []
    for log in current.logs.items:
        if log.silent_for_s < LOG_SILENT_AFTER_S:
            continue
        last = log.lines[-1].strip() if log.lines else ""
        tail = f"; last line: {last[:120]}" if last else ""
        silent = silent_for(log, at)
        if log.writer_pid is not None and log.writer_started_at is not None:
            lived = (log.modified_at - log.writer_started_at).total_seconds()
            ran = (
                human_duration(lived + log.silent_for_s)
                if at is None
                else between(true_start(log.writer_started_at), at)
            )
            silent += (
                f", nothing since its writer (pid {log.writer_pid}) started {ran} ago"
                if lived <= 0
                else f" of the {ran} its writer (pid {log.writer_pid}) has run"
            )
        signals.append(
            Signal(
                severity="warning",
                code="log_silent",
                subject=log.path,
                text=f"log {log.path} silent for {silent}{tail}",
            )
        )
    return signals
