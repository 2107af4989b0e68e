"""Slurm jobs: state, reason, exit, nodes and times from the controller, and their output tails.

A job is read with `scontrol show job -o ID` (one line, output paths expanded); jobs of a name
or of this user are listed with their working directories (`squeue -h --states=all -o
%i|%Z`) first, so that only the newest `jobs` under the watch's workdir are read. A job the
controller has forgotten (older than its MinJobAge) is read from accounting (`sacct -P`)
when there is one. The job's stdout and stderr are tailed by the log collector's own reader,
under the watch roots like any log.
"""

import getpass
import os
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ctxd import confine, redact
from ctxd.collectors import CollectContext, _slurm_nodes, _slurm_steps, per_watch
from ctxd.collectors._follow import Cursor
from ctxd.collectors._slurm_parse import (
    ALIVE_STATES,
    SACCT_FIELDS,
    Job,
    expand,
    from_sacct,
    from_scontrol,
    host_count,
)
from ctxd.collectors.logs import observe_log
from ctxd.models import (
    LogInfo,
    LogWatch,
    SlurmJobInfo,
    SlurmSection,
    SlurmStep,
    SlurmTask,
    SlurmWatch,
    Unavailable,
    Watch,
)

NAME = "slurm"
SECTION = SlurmSection
KIND = "slurm"
RETIRES = False
COMMAND_TIMEOUT_S = 5.0


class SlurmError(Exception):
    """Slurm could not be asked (no client, no controller): one line that says why."""


@dataclass
class SlurmMemory:
    """Per (watch, output file): where the previous snapshot stopped reading."""

    cursors: dict[tuple[int, str], Cursor] = field(default_factory=dict)


def collect(watches: list[Watch], ctx: CollectContext) -> SlurmSection:
    memory = ctx.memory_of(NAME, SlurmMemory)
    seen: dict[tuple[int, str], Cursor] = {}
    roots = confine.roots_of_run(ctx)

    def observe(watch: Watch) -> list[SlurmJobInfo | Unavailable]:
        assert isinstance(watch.spec, SlurmWatch)
        said: list[SlurmJobInfo | Unavailable] = []
        for job in find_jobs(watch.spec):
            info, silent_nodes = describe(watch, job, ctx, memory, seen, roots)
            said += [info, *silent_nodes]
        return said

    items, unavailable = per_watch(watches, SlurmWatch, observe, target)
    memory.cursors = seen
    return SlurmSection(items=items, unavailable=unavailable)


def target(watch: Watch) -> str:
    spec = watch.spec
    if not isinstance(spec, SlurmWatch):
        return NAME
    if spec.job:
        return f"slurm job {spec.job}"
    return f"slurm jobs named {spec.name}" if spec.name else "slurm jobs of mine"


def slurm(*argv: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise SlurmError(f"`{argv[0]}` not found: no Slurm client on this host") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{argv[0]}` gave no answer within {COMMAND_TIMEOUT_S:g} s") from None


def find_jobs(spec: SlurmWatch) -> list[Job]:
    """The watch's jobs, newest first, at most `spec.jobs` (one for a job id)."""
    if spec.job:
        return [job_by_id(spec.job, accounting=True)]
    who = ["--name", spec.name] if spec.name else ["-u", getpass.getuser()]
    listed = slurm("squeue", "-h", "--states=all", "-o", "%i|%Z", *who)
    if listed.returncode != 0:
        raise SlurmError(_first_line(listed.stderr) or f"squeue exited {listed.returncode}")
    ids = set()
    for line in listed.stdout.splitlines():
        job_id, _, workdir = (part.strip() for part in line.partition("|"))
        if job_id and (spec.workdir is None or _under(workdir, spec.workdir)):
            ids.add(job_id)
    jobs = []  # scontrol asked at most `spec.jobs` times, whatever the user has queued
    for job_id in sorted(ids, key=_id_order, reverse=True)[: spec.jobs]:
        try:
            jobs.append(job_by_id(job_id, accounting=False))
        except LookupError:
            continue  # ended between the two questions
    if not jobs:
        what = f"named {spec.name!r}" if spec.name else "of this user"
        where = f" under {spec.workdir}" if spec.workdir else ""
        raise LookupError(f"no job {what}{where} known to the controller")
    return jobs


def job_by_id(job_id: str, accounting: bool) -> Job:
    answer = slurm("scontrol", "show", "job", "-o", job_id)
    if answer.returncode == 0:
        jobs = from_scontrol(answer.stdout)
        if jobs:
            return jobs[0]
    problem = _first_line(answer.stderr)
    if "Invalid job id" not in problem:
        raise SlurmError(problem or f"scontrol exited {answer.returncode}")
    if accounting:
        kept = slurm("sacct", "-P", "-n", "-X", "-j", job_id, "-o", SACCT_FIELDS)
        if kept.returncode == 0 and (jobs := from_sacct(kept.stdout)):
            return jobs[0]
        why = _first_line(kept.stderr or kept.stdout) or "it has no record of it"
        raise LookupError(f"job {job_id} is not known to the controller; accounting: {why}")
    raise LookupError(f"job {job_id} is not known to the controller")


def describe(
    watch: Watch,
    job: Job,
    ctx: CollectContext,
    memory: SlurmMemory,
    seen: dict[tuple[int, str], Cursor],
    roots: tuple[Path, ...],
) -> tuple[SlurmJobInfo, list[Unavailable]]:
    """The job as its controller tells it, its output's tails and, when it runs, its
    processes on its nodes; beside it an unavailable line per node that did not answer."""
    assert isinstance(watch.spec, SlurmWatch)
    spec, now = watch.spec, time.time()
    moment = datetime.now(UTC)
    logs: list[LogInfo] = []
    problems: list[str] = []
    stdout, stderr = output_paths(job)
    for path in output_files(job):
        tail = LogWatch(path=path, lines=spec.lines)
        limits = ctx.settings.limits
        result, cursor = observe_log(watch.id, path, tail, limits, memory.cursors, now, roots)
        if cursor is not None:
            seen[(watch.id, os.path.realpath(path))] = cursor
        if isinstance(result, LogInfo):
            logs.append(result)
        elif job.state != "PENDING":  # a pending job has written nothing yet
            problems.append(redact.text(f"{path}: {result.reason}"))
    running = job.state in ALIVE_STATES
    elapsed = None
    if job.started_at is not None and job.state != "PENDING":
        end = moment if running or job.ended_at is None else job.ended_at
        elapsed = max(0.0, (end - job.started_at).total_seconds())
    pending = None
    if job.state == "PENDING" and job.submitted_at is not None:
        pending = max(0.0, (moment - job.submitted_at).total_seconds())
    tasks: list[SlurmTask] = []
    steps: list[SlurmStep] = []
    steps_note: str | None = None
    silent_nodes: list[Unavailable] = []
    if job.state == "RUNNING" and spec.tasks and not ctx.probe:
        nodes = host_count(job.nodes) or 1
        found = _slurm_nodes.collect(
            job.job_id, nodes, ctx.settings.slurm_nodes_timeout_s, gpus=job.gpus
        )
        tasks = found.tasks
        steps, steps_note = _steps(job.job_id)
        if found.problem is not None:
            silent = [n for n in node_names(job.nodes) if n not in found.answered]
            reason = redact.text(found.problem)
            silent_nodes = [
                Unavailable(watch_id=watch.id, target=f"slurm job {job.job_id} on node {n}",
                            reason=reason)
                for n in silent or [f"{nodes - len(found.answered)} of {job.nodes}"]
            ]  # fmt: skip
    info = SlurmJobInfo(
        watch_id=watch.id,
        job_id=job.job_id,
        name=job.name,
        label=f"job {job.job_id} ({job.name})" if job.name else f"job {job.job_id}",
        state=job.state,
        reason=job.reason,
        exit_code=job.exit_code,
        signal=job.signal,
        nodes=job.nodes,
        user=job.user,
        workdir=job.workdir,
        submitted_at=job.submitted_at,
        started_at=job.started_at,
        ended_at=job.ended_at,
        elapsed_s=elapsed,
        time_limit_s=job.time_limit_s,
        pending_for_s=pending,
        pending_after_s=spec.pending_after_s,
        silent_after_s=spec.silent_after_s,
        stdout=stdout,
        stderr=stderr,
        logs=logs,
        log_problems=problems,
        source=job.source,
        tasks=tasks,
        steps=steps,
        steps_note=steps_note,
    )
    return info, silent_nodes


def _steps(job_id: str) -> tuple[list[SlurmStep], str | None]:
    """The job's running steps as sstat reads them, or why it said nothing of them."""
    try:
        answer = slurm(*_slurm_steps.argv(job_id))
    except SlurmError as problem:
        return [], redact.text(str(problem))
    steps = _slurm_steps.parse(answer.stdout) if answer.returncode == 0 else []
    if steps:
        return steps, None
    said = _first_line(answer.stderr) or _first_line(answer.stdout)
    why = f"sstat exited {answer.returncode}" if answer.returncode else "sstat listed no step"
    return [], redact.text(f"{why}: {said}" if said else why)


def node_names(nodes: str) -> list[str]:
    """A node list's names (`node[1-3]` is three), as Slurm expands it; [] when it cannot."""
    if not nodes:
        return []
    try:
        answer = slurm("scontrol", "show", "hostnames", nodes)
    except SlurmError:
        return []
    return answer.stdout.split() if answer.returncode == 0 else []


def output_paths(job: Job) -> tuple[str | None, str | None]:
    """(stdout, stderr) as the files they are: patterns expanded, relative to the workdir."""
    return _output_path(job.stdout, job), _output_path(job.stderr, job)


def output_files(job: Job) -> list[str]:
    """The files to tail: stdout, then stderr when it is another file; /dev/null is none."""
    return [p for p in dict.fromkeys(output_paths(job)) if p and p != "/dev/null"]


def _output_path(pattern: str | None, job: Job) -> str | None:
    if not pattern:
        return None
    path = expand(pattern, job)
    if not os.path.isabs(path) and job.workdir:
        path = os.path.join(job.workdir, path)
    return path


def _under(path: str | None, folder: str) -> bool:
    if not path:
        return False
    real, root = os.path.realpath(path), os.path.realpath(os.path.expanduser(folder))
    return real == root or real.startswith(root.rstrip("/") + "/")


def _id_order(job_id: str) -> tuple[int, int]:
    base, _, task = job_id.partition("_")
    return (int(base) if base.isdigit() else 0, int(task) if task.isdigit() else 0)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:300]
