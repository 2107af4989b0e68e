"""What happened between two observations: one comparison, one set of names.

The trigger loop turns these into events (`event:process-exit`), signals.py into signals
(`process_exited`), changes.py into Changes: the same facts, computed once, named once.
"""

from ctxd.collectors._slurm_parse import ALIVE_STATES
from ctxd.models import (
    ArtifactInfo,
    LogInfo,
    Observations,
    PortInfo,
    ProcessInfo,
    SlurmJobInfo,
)

PROCESS_EXITED = "process_exited"
PORT_OPENED = "port_opened"
PORT_CLOSED = "port_closed"
LOG_ERROR = "log_error"
ARTIFACT_CHANGED = "artifact_changed"
SLURM_JOB_ENDED = "slurm_job_ended"

# The words a user reads in a trigger (`event:process-exit,port-open`), one per fact.
TRIGGER_WORDS = {
    PROCESS_EXITED: "process-exit",
    PORT_OPENED: "port-open",
    LOG_ERROR: "log-error",
    ARTIFACT_CHANGED: "artifact-change",
    SLURM_JOB_ENDED: "slurm-job-end",
}


def exited(before: Observations, after: Observations) -> list[ProcessInfo]:
    """Processes of `before` gone in `after`.

    When the collector lists what exited, a process missing from the rows but not listed is
    alive beyond the row limit, not gone.
    """
    alive = {p.key for p in after.processes.items}
    known = {e.key for e in after.processes.exited}
    return [
        p
        for p in before.processes.items
        if p.key not in alive and not (after.processes.exited and p.key not in known)
    ]


def opened(before: Observations, after: Observations) -> list[PortInfo]:
    """Ports seen closed in `before` that listen in `after` (a new watch is no opening)."""
    was = {(p.host, p.port): p.listening for p in before.ports.items}
    return [p for p in after.ports.items if p.listening and was.get((p.host, p.port)) is False]


def new_errors(before: Observations, after: Observations) -> list[LogInfo]:
    """Logs whose error block differs from the one `before` showed."""
    old = {log.path: log.errors or None for log in before.logs.items}
    return [log for log in after.logs.items if log.errors and log.errors != old.get(log.path)]


def changed_artifacts(before: Observations, after: Observations) -> list[ArtifactInfo]:
    """Artifacts seen in `before` whose fingerprint is another now."""
    old = {a.path: a.fingerprint for a in before.artifacts.items}
    return [a for a in after.artifacts.items if a.path in old and old[a.path] != a.fingerprint]


def jobs_ended(before: Observations, after: Observations) -> list[SlurmJobInfo]:
    """Slurm jobs pending or running in `before` that have ended in `after`."""
    alive = {(j.host, j.job_id) for j in before.slurm.items if j.state in ALIVE_STATES}
    return [
        j
        for j in after.slurm.items
        if (j.host, j.job_id) in alive and j.state and j.state not in ALIVE_STATES
    ]


def events(before: Observations | None, after: Observations) -> list[tuple[str, str]]:
    """Pure: what in `after` is news worth a snapshot at once, as (trigger word, text)."""
    if before is None:
        return []
    found = [
        *((PROCESS_EXITED, f"process {p.pid} ({p.name}) exited") for p in exited(before, after)),
        *((PORT_OPENED, f"{p.host}:{p.port} now listening") for p in opened(before, after)),
        *(
            (LOG_ERROR, f"new error in {log.path}: {log.error_summary or log.errors[0]}")
            for log in new_errors(before, after)
        ),
        *(
            (ARTIFACT_CHANGED, f"artifact {a.path} changed")
            for a in changed_artifacts(before, after)
        ),
        *((SLURM_JOB_ENDED, f"slurm {j.label} ended {j.state}") for j in jobs_ended(before, after)),
    ]
    return [(TRIGGER_WORDS[code], text) for code, text in found]
