"""A running Slurm job's steps as `sstat` reads them live from their nodes: CPU time and
memory per step (`sstat -P -n -a -j ID`), parsed; where sstat cannot say (no accounting
gatherer, jobacct_gather/none, or no step running yet), the line it gave instead."""

import re

from ctxd.models import SlurmStep

FIELDS = "JobID,NTasks,AveCPU,MinCPU,MaxRSS,MaxRSSNode,AveRSS"
_MEMORY = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[KMGTP]?)$")
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


def argv(job_id: str) -> list[str]:
    return ["sstat", "-P", "-n", "-a", "-j", job_id, "-o", FIELDS]


def parse(text: str) -> list[SlurmStep]:
    """sstat's parsable lines (FIELDS, `|`-separated) as steps; lines of another shape are
    left out."""
    steps = []
    for line in text.splitlines():
        cells = line.strip().split("|")
        if len(cells) < 7 or not cells[0]:
            continue
        step, tasks, ave_cpu, min_cpu, max_rss, max_rss_node, ave_rss = cells[:7]
        steps.append(
            SlurmStep(
                step=step,
                tasks=int(tasks) if tasks.isdigit() else None,
                cpu_s=cpu_time(ave_cpu),
                min_cpu_s=cpu_time(min_cpu),
                max_rss_bytes=memory(max_rss),
                max_rss_node=max_rss_node or None,
                ave_rss_bytes=memory(ave_rss),
            )
        )
    return steps


def cpu_time(value: str) -> float | None:
    """sstat's CPU time: [days-][hours:]minutes:seconds[.fraction]; None when unreadable."""
    value = value.strip()
    days, _, clock = value.rpartition("-")
    parts = clock.split(":")
    if not value or (days and not days.isdigit()) or len(parts) > 3 or len(parts) < 2:
        return None
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        return None
    seconds = sum(n * 60**i for i, n in enumerate(reversed(numbers)))
    return seconds + int(days or 0) * 86400


def memory(value: str) -> int | None:
    """sstat's memory ("1234K", "12.5M", "0"): bytes; None when unreadable."""
    found = _MEMORY.match(value.strip())
    if found is None:
        return None
    return int(float(found["n"]) * _UNITS[found["unit"]])
