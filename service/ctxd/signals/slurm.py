"""The signals read from Slurm jobs: failed (OOM, timeout, signal), pending too long, silent.

A job has failed when it has ended (its state is none of the alive ones, which a requeued
job's is) in any state but COMPLETED (or REVOKED): a cancelled, preempted or timed-out job
did not do its work."""

from ctxd.collectors._slurm_parse import ALIVE_STATES
from ctxd.fmt import human_duration
from ctxd.models import Observations, Signal, SlurmJobInfo

# ends that are no failure: done, or (federation) started by another cluster instead
ENDED_WELL = frozenset({"COMPLETED", "REVOKED"})


def slurm_jobs(current: Observations) -> list[Signal]:
    signals = []
    for job in current.slurm.items:
        if job.state and job.state not in ALIVE_STATES | ENDED_WELL:
            signals.append(_failed(job))
        elif job.state == "PENDING" and _past(job.pending_for_s, job.pending_after_s):
            why = f" ({job.reason})" if job.reason else ""
            text = f"slurm {job.label} pending for {human_duration(job.pending_for_s or 0)}{why}"
            signals.append(
                Signal(severity="warning", code="slurm_pending", subject=job.label, text=text)
            )
        elif job.state == "RUNNING" and job.logs:
            quiet = min(log.silent_for_s for log in job.logs)
            if _past(quiet, job.silent_after_s):
                text = (
                    f"slurm {job.label} running on {job.nodes or '?'} but its output is silent "
                    f"for {human_duration(quiet)}{_last_line(job)}"
                )
                signals.append(
                    Signal(severity="warning", code="slurm_silent", subject=job.label, text=text)
                )
    return signals


def _failed(job: SlurmJobInfo) -> Signal:
    how = [job.state]
    if job.reason and job.reason != "None":
        how.append(f"({job.reason})")
    if job.signal:
        how.append(f"killed by signal {job.signal}")
    elif job.exit_code:
        how.append(f"exit {job.exit_code}")
    where = f" on {job.nodes}" if job.nodes else ""
    text = f"slurm {job.label} {' '.join(how)}{where}{_last_line(job)}"
    return Signal(severity="critical", code="slurm_failed", subject=job.label, text=text)


def _past(value: float | None, threshold: float | None) -> bool:
    return value is not None and threshold is not None and value >= threshold


def _last_line(job: SlurmJobInfo) -> str:
    for log in job.logs:
        if log.error_summary:
            return f"; root cause: {log.error_summary[:160]}"
    lines = [line.strip() for log in job.logs for line in log.lines if line.strip()]
    return f"; last line: {lines[-1][:160]}" if lines else ""
