"""Slurm's text answers as job records: `scontrol show job -o` and `sacct -P -n -X`.

Why not `squeue --json`: in Slurm 22.05 (Debian 12) it ignores every filter (`-j`, `--name`,
`-u`) and dumps each job the controller knows, which on a shared cluster is megabytes per
snapshot; `scontrol show job -o ID` is one job, one line, with its output paths expanded.
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime

# `Key=value` fields separated by spaces; a key may hold `:` or `/` (AllocNode:Sid, CPUs/Task)
_FIELD = re.compile(r"(?:^| )([A-Za-z][A-Za-z0-9:/_]*)=")
_NONE = {"", "(null)", "None", "Unknown", "N/A", "n/a"}
# The states in which a job has not ended: it waits, runs, or will run again (a requeued job
# goes back to PENDING). Every other state is an end, COMPLETED the one good end.
ALIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "STOPPED",
        "SIGNALING",
        "STAGE_OUT",
        "RESIZING",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "SPECIAL_EXIT",
        "RESV_DEL_HOLD",
    }
)
# sbatch's filename pattern: %[width]letter, the width zero-pads the numbers (at most 10)
_PATTERN = re.compile(r"%(\d*)([AabJjNnstux%])")
_NUMERIC = frozenset("AabJjnt")
SACCT_FIELDS = (
    "JobID,JobName,State,ExitCode,NodeList,Submit,Start,End,Timelimit,User,WorkDir,Reason"
)


@dataclass
class Job:
    job_id: str  # "77" or, for an array task, "ARRAYJOB_TASK" ("77_3")
    name: str = ""
    state: str = ""
    reason: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    nodes: str = ""
    user: str | None = None
    workdir: str | None = None
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    time_limit_s: float | None = None
    stdout: str | None = None
    stderr: str | None = None
    source: str = ""
    number: str = ""  # the JobId itself: an array task's is not its array's
    gpus: bool = False  # it was allocated GPUs (a step beside it must then ask for none)


def fields(line: str) -> dict[str, str]:
    """One `scontrol -o` line as its fields; a value runs up to the next ` Key=`."""
    starts = list(_FIELD.finditer(line))
    out: dict[str, str] = {}
    for i, match in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(line)
        out.setdefault(match[1], line[match.end() : end].strip())
    return out


def from_scontrol(text: str) -> list[Job]:
    """`scontrol show job -o [ID]`: one job per line."""
    jobs = []
    for line in text.splitlines():
        f = fields(line.strip())
        if "JobId" not in f:
            continue
        array_job, task = f.get("ArrayJobId"), f.get("ArrayTaskId")
        job_id = f"{array_job}_{task}" if array_job and task and task.isdigit() else f["JobId"]
        code, signal = exit_status(f.get("ExitCode", ""))
        jobs.append(
            Job(
                job_id=job_id,
                name=f.get("JobName", ""),
                state=f.get("JobState", ""),
                reason=_reason(f.get("Reason", "")),
                exit_code=code,
                signal=signal,
                nodes=_value(f.get("NodeList", "")) or "",
                user=_user(f.get("UserId", "")),
                workdir=_value(f.get("WorkDir", "")),
                submitted_at=timestamp(f.get("SubmitTime", "")),
                started_at=timestamp(f.get("StartTime", "")),
                ended_at=timestamp(f.get("EndTime", "")),
                time_limit_s=duration(f.get("TimeLimit", "")),
                stdout=_value(f.get("StdOut", "")),
                stderr=_value(f.get("StdErr", "")),
                source="scontrol",
                number=f["JobId"],
                gpus="gres/gpu" in f.get("AllocTRES", "") or "gpu" in f.get("TresPerNode", ""),
            )
        )
    return jobs


def from_sacct(text: str) -> list[Job]:
    """`sacct -P -n -X -o SACCT_FIELDS`: the job as accounting kept it, after the controller
    forgot it (MinJobAge); accounting does not keep the output paths."""
    names = SACCT_FIELDS.split(",")
    jobs = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != len(names):
            continue
        f = dict(zip(names, parts, strict=True))
        code, signal = exit_status(f["ExitCode"])
        jobs.append(
            Job(
                job_id=f["JobID"],
                name=f["JobName"],
                state=f["State"].split(" ")[0],  # "CANCELLED by 1000"
                reason=_value(f["Reason"]),
                exit_code=code,
                signal=signal,
                nodes=_value(f["NodeList"]) or "",
                user=_value(f["User"]),
                workdir=_value(f["WorkDir"]),
                submitted_at=timestamp(f["Submit"]),
                started_at=timestamp(f["Start"]),
                ended_at=timestamp(f["End"]),
                time_limit_s=duration(f["Timelimit"]),
                source="sacct",
            )
        )
    return jobs


def exit_status(value: str) -> tuple[int | None, int | None]:
    """ "3:0" -> (3, None); "0:9" -> (0, 9): the exit code, and the signal that ended it."""
    code, _, signal = value.partition(":")
    if not code.strip().isdigit():
        return None, None
    sig = int(signal) if signal.strip().isdigit() else 0
    return int(code), sig or None


def duration(value: str) -> float | None:
    """Slurm's [days-]hours:minutes:seconds (or minutes, or mm:ss); None when unlimited."""
    value = value.strip()
    if value in _NONE or value.upper() in ("UNLIMITED", "INFINITE", "PARTITION_LIMIT"):
        return None
    days, _, clock = value.rpartition("-")
    parts = clock.split(":")
    if not all(p.isdigit() for p in parts) or (days and not days.isdigit()) or len(parts) > 3:
        return None
    numbers = [int(p) for p in parts]
    if len(numbers) == 1:  # minutes
        seconds = numbers[0] * 60
    elif len(numbers) == 2:  # minutes:seconds
        seconds = numbers[0] * 60 + numbers[1]
    else:
        seconds = numbers[0] * 3600 + numbers[1] * 60 + numbers[2]
    return float(seconds + int(days or 0) * 86400)


def timestamp(value: str) -> datetime | None:
    """Slurm prints local time without a zone: read as this host's local time (the client's,
    which formats it), and given in UTC like every other time ctxd keeps."""
    value = value.strip()
    if value in _NONE:
        return None
    try:
        return datetime.fromisoformat(value).astimezone().astimezone(UTC)
    except ValueError:
        return None


def expand(pattern: str, job: Job) -> str:
    """An output path as sbatch's filename patterns make it for the batch step: %j %J (the
    job), %A %a %b (array job, task, task mod 10), %x %u %N, %s (`batch`), %n %t (0), %%;
    a width (`%4j`) zero-pads a number. A backslash turns patterns off, as in Slurm."""
    if "\\" in pattern:
        return pattern.replace("\\", "")
    base, _, task = job.job_id.partition("_")
    number = job.number or base
    table = {
        "j": number,
        "J": number,
        "A": base,
        "a": task,
        "b": str(int(task) % 10) if task.isdigit() else "",
        "x": job.name,
        "u": job.user or "",
        "N": first_node(job.nodes),
        "s": "batch",
        "n": "0",
        "t": "0",
        "%": "%",
    }

    def one(m: re.Match[str]) -> str:
        width, letter = m[1], m[2]
        if letter == "%":
            return "%" if not width else m[0]
        value = table[letter]
        if width and letter in _NUMERIC and value.isdigit():
            return value.zfill(min(int(width), 10))
        return value

    return _PATTERN.sub(one, pattern)


def first_node(nodes: str) -> str:
    """The first host of a Slurm host list: "gpu[07-08,10],cpu1" -> "gpu07"."""
    m = re.match(r"([^\[,]*)(?:\[([^\]\-,]*))?", nodes)
    return (m[1] + (m[2] or "")) if m else ""


def _value(value: str) -> str | None:
    value = value.strip()
    return None if value in _NONE else value


def _user(value: str) -> str | None:
    """ "root(0)" -> "root"."""
    return _value(value.split("(")[0])


def _reason(value: str) -> str | None:
    """scontrol writes a reason's spaces as `_`: "ReqNodeNotAvail,_May_be_reserved"."""
    reason = _value(value)
    return reason.replace("_", " ") if reason else None


def host_count(nodes: str) -> int:
    """How many hosts a Slurm host list names: "gpu[07-08,10],cpu1" -> 4; "" -> 0."""
    count = 0
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", nodes):
        ranges = re.search(r"\[([^\]]*)\]", part)
        if not ranges:
            count += 1
            continue
        for item in ranges[1].split(","):
            low, _, high = item.partition("-")
            ok = low.isdigit() and (not high or high.isdigit())
            count += (int(high) - int(low) + 1) if ok and high else 1
    return count
