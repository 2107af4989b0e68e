"""The GPUs table's rows: GPUs alike in model, load and memory folded into one row.

Eight H200s each holding the same memory at 0 % read as one row ("0 to 7") naming every pid,
not eight rows a reader has to compare. Pure: the GPU section's items in, rows out.
"""

from dataclasses import dataclass

from ctxd.fmt import human_bytes
from ctxd.models import GpuInfo, GpuProcess


@dataclass(frozen=True)
class GpuRow:
    indices: str  # "3", or a span of alike GPUs
    first: GpuInfo
    processes: list[GpuProcess]
    each: bool  # the figures are each GPU's, not a sum


def rows(items: list[GpuInfo]) -> list[GpuRow]:
    runs: list[list[GpuInfo]] = []
    for gpu in items:
        if runs and _alike(runs[-1][-1], gpu) and runs[-1][-1].index + 1 == gpu.index:
            runs[-1].append(gpu)
        else:
            runs.append([gpu])
    out = []
    for run in runs:
        span = f"{run[0].index}" if len(run) == 1 else f"{run[0].index}\N{EN DASH}{run[-1].index}"
        procs = [p for gpu in run for p in gpu.processes]
        out.append(GpuRow(span, run[0], procs, len(run) > 1))
    return out


def _alike(a: GpuInfo, b: GpuInfo) -> bool:
    def key(g: GpuInfo) -> tuple:
        return (g.name, g.compute_capability, g.utilization_percent,
                human_bytes(g.memory_used_bytes), g.memory_total_bytes,
                len(g.processes) > 0)  # fmt: skip

    return key(a) == key(b)
