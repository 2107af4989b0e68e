"""Pure parsers of nvidia-smi text: `--query-gpu` / `--query-compute-apps` CSV and the header."""

import re

from ctxd.models import GpuInfo, GpuProcess

MIB = 1024 * 1024
# How nvidia-smi says "no value": [N/A], N/A, [Not Supported], [Requested functionality …].
_MISSING = re.compile(r"^\[?(N/A|Not Supported|Unknown Error|Requested functionality.*)\]?$", re.I)
_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(MiB|W|%|C|MHz)?$")
_HEADER = re.compile(
    r"(?:Driver|KMD) Version:\s*(?P<driver>[\w.]+).*?CUDA(?: UMD)? Version:\s*(?P<cuda>[\w.]+)"
)

# Our field names (left) and the --query-gpu columns that hold them, newest name first.
GPU_FIELDS = {
    "index": ("index",),
    "name": ("name",),
    "uuid": ("uuid",),
    "compute_capability": ("compute_cap",),
    "utilization_percent": ("utilization.gpu",),
    "memory_used_bytes": ("memory.used",),
    "memory_total_bytes": ("memory.total",),
    "temperature_c": ("temperature.gpu",),
    "power_w": ("power.draw", "power.draw.instant", "power.draw.average"),
    "power_limit_w": ("power.limit", "enforced.power.limit"),
}


def _lines(text: str) -> list[str]:
    """Data lines: blank lines and `#` comments (such as a captured file's source) dropped."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _column(name: str) -> str:
    """`memory.total [MiB]` -> `memory.total`: units live in the header with plain csv."""
    return name.strip().split(" [", 1)[0].strip()


def _split(line: str) -> list[str]:
    # nvidia-smi writes ", " between fields and never quotes; names and paths hold no ", ".
    return [cell.strip() for cell in line.split(", ")]


def value(cell: str | None) -> str | None:
    """A cell with nvidia-smi's ways of saying "nothing" turned into None."""
    if cell is None:
        return None
    cell = cell.strip()
    return None if not cell or _MISSING.match(cell) else cell


def number(cell: str | None) -> float | None:
    """`143771 MiB`, `700.00 W`, `100 %`, `52` -> the number; anything else -> None."""
    text = value(cell)
    match = _NUMBER.match(text) if text else None
    return float(match.group(1)) if match else None


def _mib(cell: str | None) -> int | None:
    found = number(cell)
    return int(found * MIB) if found is not None else None


def parse_query_csv(text: str) -> list[dict[str, str | None]]:
    """Rows of a `--format=csv` answer (header first) as {column: cell or None}."""
    lines = _lines(text)
    if not lines:
        return []
    header = [_column(c) for c in _split(lines[0])]
    rows = []
    for line in lines[1:]:
        cells = _split(line)
        if len(cells) < len(header):
            continue  # a truncated or error line, not a row
        rows.append({name: value(cells[i]) for i, name in enumerate(header)})
    return rows


def _known_columns() -> set[str]:
    return {name for names in GPU_FIELDS.values() for name in names} | {"driver_version"}


def _first(row: dict[str, str | None], names: tuple[str, ...]) -> str | None:
    return next((row[n] for n in names if row.get(n) is not None), None)


_KNOWN_COLUMNS = _known_columns()


def parse_query_gpu(text: str) -> tuple[list[GpuInfo], str | None]:
    """GPUs and the driver version from `--query-gpu=… --format=csv[,nounits]`."""
    gpus: list[GpuInfo] = []
    driver = None
    rows = parse_query_csv(text)
    if rows and not set(rows[0]) & _KNOWN_COLUMNS:
        return [], None  # prose (a driver's failure text on exit 0), not a CSV answer
    for position, row in enumerate(rows):
        cells = {ours: _first(row, theirs) for ours, theirs in GPU_FIELDS.items()}
        driver = driver or row.get("driver_version")
        index = number(cells["index"])
        gpus.append(
            GpuInfo(
                index=int(index) if index is not None else position,
                name=cells["name"] or "",
                uuid=cells["uuid"],
                compute_capability=cells["compute_capability"],
                utilization_percent=number(cells["utilization_percent"]),
                memory_used_bytes=_mib(cells["memory_used_bytes"]),
                memory_total_bytes=_mib(cells["memory_total_bytes"]),
                temperature_c=number(cells["temperature_c"]),
                power_w=number(cells["power_w"]),
                power_limit_w=number(cells["power_limit_w"]),
            )
        )
    return gpus, driver


def parse_compute_apps(text: str) -> list[tuple[str | None, GpuProcess]]:
    """(GPU uuid or bus id, process) pairs from `--query-compute-apps=… --format=csv`."""
    found = []
    for row in parse_query_csv(text):
        pid = number(row.get("pid"))
        if pid is None:
            continue
        gpu = row.get("gpu_uuid") or row.get("gpu_bus_id")
        name = row.get("process_name") or row.get("name") or ""
        found.append((gpu, GpuProcess(pid=int(pid), name=name, used_memory_bytes=_mib(
            row.get("used_gpu_memory") or row.get("used_memory")))))  # fmt: skip
    return found


def parse_smi_header(text: str) -> tuple[str | None, str | None]:
    """(driver, CUDA) from the plain `nvidia-smi` banner, old and R610 (`KMD Version`) forms."""
    match = _HEADER.search(text)
    return (match.group("driver"), match.group("cuda")) if match else (None, None)


def attach(gpus: list[GpuInfo], apps: list[tuple[str | None, GpuProcess]]) -> None:
    """Put each process under its GPU (by uuid); with one GPU and no uuid it is that GPU's."""
    by_uuid = {g.uuid: g for g in gpus if g.uuid}
    for gpu_id, proc in apps:
        target = by_uuid.get(gpu_id or "") or (gpus[0] if len(gpus) == 1 else None)
        if target is not None:
            target.processes.append(proc)
