"""What the collectors observed: one section model per collector (processes: models/processes.py)
and Observations, which holds them all."""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from ctxd.models.base import VOLATILE, Unavailable
from ctxd.models.processes import ProcessesSection


class LogInfo(BaseModel):
    watch_id: int
    path: str
    size: int
    modified_at: datetime
    silent_for_s: Annotated[float, VOLATILE]
    inode: int | None = None
    binary: bool = False
    lines: list[str] = Field(default_factory=list)
    growth_bytes: int | None = None  # since the previous snapshot; None: first or replaced
    rotated: bool = False  # a new file (inode) at the path since the previous snapshot
    rotated_from: str | None = None  # where the old file went, when found beside it
    truncated: bool = False  # shrank, or rewritten, since the previous snapshot
    scanned_bytes: int = 0  # new bytes scanned for errors
    skipped_bytes: int = 0  # new bytes beyond the scan bound, not scanned
    # the first error block (a whole traceback, up to a bound)
    errors: list[str] = Field(default_factory=list)
    error_summary: str | None = None  # its most telling line (the exception line)
    error_new: bool = False  # found in this snapshot's new bytes, not carried over
    error_lines: int = 0  # error-shaped lines among the new bytes
    error_repeats: int = 0  # error lines that say what error_summary says (8 ranks, one cause)
    # who writes it (collectors/_holders.py): a process with it open for writing
    writer_pid: int | None = None
    writer_name: str | None = None
    writer_streams: str | None = None  # "its stdout and stderr", "fd 5"
    writer_started_at: datetime | None = None
    writer_appends: bool = False  # opened with O_APPEND (>>): its offset tells nothing
    written_since_start: int | None = None  # bytes its open file wrote since it was opened
    # when none writes it: the newest watched root's start, to call a log older than it stale
    newest_root_pid: int | None = None
    newest_root_started_at: datetime | None = None
    host: str | None = None  # the peer it was observed on; None: this host


class LogsSection(BaseModel):
    items: list[LogInfo] = Field(default_factory=list)
    unavailable: list[Unavailable] = Field(default_factory=list)


class ArtifactFile(BaseModel):
    path: str  # relative to the directory
    size: int
    modified_at: datetime


class DistInfo(BaseModel):
    kind: Literal["wheel", "sdist"]
    name: str
    version: str
    build: str | None = None
    tags: list[str] = Field(default_factory=list)


class ArtifactInfo(BaseModel):
    watch_id: int
    path: str
    type: Literal["file", "directory"]
    size: int
    modified_at: datetime
    fingerprint: str
    fingerprint_kind: Literal["sha256", "sampled", "tree", "pending"] | None = None
    entries: int | None = None
    truncated: bool = False
    files: int | None = None  # directories: regular files under it
    # directories: a few most recently modified files
    newest: list[ArtifactFile] = Field(default_factory=list)
    largest: list[ArtifactFile] = Field(default_factory=list)  # directories: a few largest files
    # directories: files added, removed, modified since last time
    changes: list[str] = Field(default_factory=list)
    dist: DistInfo | None = None  # wheels and sdists: parsed from the file name
    # libraries and wheels: whether the watched processes use this very file (_holders.py)
    in_use: str | None = None
    host: str | None = None  # the peer it was observed on; None: this host


class ArtifactsSection(BaseModel):
    items: list[ArtifactInfo] = Field(default_factory=list)
    unavailable: list[Unavailable] = Field(default_factory=list)


class CommandInfo(BaseModel):
    watch_id: int
    label: str  # the allowlist name
    argv: list[str]
    exit_code: int | None = None  # None: timed out or could not start
    timed_out: bool = False
    duration_s: Annotated[float, VOLATILE] = 0.0
    output: list[str] = Field(default_factory=list)  # stdout then stderr, cleaned, bounded
    output_cut: bool = False
    host: str | None = None  # the peer it was observed on; None: this host


class CommandsSection(BaseModel):
    items: list[CommandInfo] = Field(default_factory=list)
    unavailable: list[Unavailable] = Field(default_factory=list)


class PortInfo(BaseModel):
    watch_id: int | None = None
    host: str
    port: int
    listening: bool
    bound: str | None = None  # the address it listens on, where not `host` ("0.0.0.0")
    expected_by: int | None = None
    url: str | None = None
    health_status: int | None = None
    health_error: str | None = None
    health_latency_ms: Annotated[float | None, VOLATILE] = None
    health_body: str | None = None
    owner_pid: int | None = None


class PortsSection(BaseModel):
    items: list[PortInfo] = Field(default_factory=list)
    unavailable: list[Unavailable] = Field(default_factory=list)


class SlurmTask(BaseModel):
    """One process of a running job, as the collector Slurm ran on its node saw it."""

    node: str
    pid: int
    ppid: int
    rank: int | None = None  # SLURM_PROCID: the task's rank in its step
    step: str | None = None  # SLURM_STEP_ID; None: the batch script and what it started
    name: str = ""
    argv: list[str] = Field(default_factory=list)
    state: str = ""  # the kernel's letter: R, S, D, Z
    threads: int = 0
    busy_percent: Annotated[float, VOLATILE] = 0.0  # of a core, over a half-second sample
    waits_in: str | None = None  # the kernel's view: "futex_do_wait (futex)"
    blocked_on: str | None = None  # what that call names: a path being opened, a socket
    stack: list[str] = Field(default_factory=list)  # py-spy's, for an idle Python process
    stack_note: str | None = None  # why there is no stack


class SlurmStep(BaseModel):
    """One running step of a job as sstat reads it live: its CPU time and memory."""

    step: str  # "123.0", "123.batch"
    tasks: int | None = None
    cpu_s: Annotated[float | None, VOLATILE] = None  # average CPU time of its tasks
    min_cpu_s: Annotated[float | None, VOLATILE] = None  # of its least busy task
    max_rss_bytes: Annotated[int | None, VOLATILE] = None  # its largest task's resident memory
    max_rss_node: str | None = None  # the node of that task
    ave_rss_bytes: Annotated[int | None, VOLATILE] = None


class SlurmJobInfo(BaseModel):
    """One Slurm job as its controller (or accounting) tells it, with its output files' tails."""

    watch_id: int
    job_id: str
    name: str = ""
    label: str = ""  # "job 123 (train)": how the dump and signals name it
    state: str = ""  # PENDING, RUNNING, COMPLETED, FAILED, OUT_OF_MEMORY, TIMEOUT, ...
    reason: str | None = None  # why pending or why it ended: Resources, NonZeroExitCode
    exit_code: int | None = None
    signal: int | None = None
    nodes: str = ""
    user: str | None = None
    workdir: str | None = None
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    elapsed_s: Annotated[float | None, VOLATILE] = None
    time_limit_s: float | None = None  # None: unlimited or unknown
    pending_for_s: Annotated[float | None, VOLATILE] = None
    pending_after_s: float | None = None  # the watch's thresholds, for the signals
    silent_after_s: float | None = None
    stdout: str | None = None
    stderr: str | None = None
    logs: list[LogInfo] = Field(default_factory=list)
    log_problems: list[str] = Field(default_factory=list)
    source: str = ""  # where it was read: scontrol (the controller) or sacct (accounting)
    host: str | None = None  # the peer it was observed on; None: this host
    # a running job's processes on its nodes, collected there through srun (not by a probe)
    tasks: list[SlurmTask] = Field(default_factory=list)  # a node that did not answer: unavailable
    steps: list[SlurmStep] = Field(default_factory=list)  # sstat's, of a running job
    steps_note: str | None = None  # why sstat said nothing of them


class SlurmSection(BaseModel):
    items: list[SlurmJobInfo] = Field(default_factory=list)
    unavailable: list[Unavailable] = Field(default_factory=list)


class RayNode(BaseModel):
    node_id: str  # the first 8 characters of Ray's id
    ip: str = ""
    state: str = ""  # ALIVE, DEAD
    head: bool = False
    resources: dict[str, float] = Field(default_factory=dict)  # CPU, GPU, memory (bytes)


class RayActor(BaseModel):
    name: str = ""  # its name, or its class's where it has none
    class_name: str = ""
    state: str = ""  # ALIVE, PENDING_CREATION, RESTARTING, DEAD, DEPENDENCIES_UNREADY
    pid: int | None = None
    node_ip: str | None = None
    asks: dict[str, float] = Field(default_factory=dict)  # the resources it requires
    died_of: str | None = None  # the last line of its death cause: the exception
    restarts: int = 0


class RayTask(BaseModel):
    """A task running long (or pending): where it runs, since when, and its stack if local."""

    name: str
    state: str
    pid: int | None = None
    started_at: datetime | None = None
    running_s: Annotated[float | None, VOLATILE] = None
    node_ip: str | None = None  # the node it runs on
    waits_in: str | None = None  # the kernel's view, for a worker on this machine
    blocked_on: str | None = None
    stack: list[str] = Field(default_factory=list)
    stack_note: str | None = None
    # the worker's own frames: "file:line" as the stack names it -> that line's text (redacted)
    source: dict[str, str] = Field(default_factory=dict)


class RayInfo(BaseModel):
    watch_id: int
    url: str
    address: str | None = None  # "auto": the URL was found at this look
    found: str | None = None  # how "auto" found it
    job: str | None = None
    nodes: list[RayNode] = Field(default_factory=list)
    actors: list[RayActor] = Field(default_factory=list)
    actors_total: int = 0  # before the name filter and the cap
    tasks: list[RayTask] = Field(default_factory=list)  # running long, or pending
    free: dict[str, float] = Field(default_factory=dict)  # what ALIVE nodes hold, less in use
    placement_groups_pending: list[str] = Field(default_factory=list)


class RaySection(BaseModel):
    items: list[RayInfo] = Field(default_factory=list)
    unavailable: list[Unavailable] = Field(default_factory=list)


class HostInfo(BaseModel):
    hostname: str = ""
    os: str = ""
    kernel: str = ""
    cpu_count: int | None = None
    load_avg: Annotated[list[float], VOLATILE] = Field(default_factory=list)
    memory_total_bytes: int | None = None
    memory_available_bytes: Annotated[int | None, VOLATILE] = None
    python: str = ""
    cpu_model: str = ""
    swap_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    uptime_s: Annotated[float | None, VOLATILE] = None
    disks: list["DiskInfo"] = Field(default_factory=list)
    unavailable: list[Unavailable] = Field(default_factory=list)
    peer: str | None = None  # the peer's name, for a peer's own facts (in `peers`)
    # the peers that answered this snapshot, each its own facts
    peers: list["HostInfo"] = Field(default_factory=list)


class DiskInfo(BaseModel):
    """Free space of the filesystem holding `path` (the data dir or a watched path)."""

    path: str
    total_bytes: int
    free_bytes: int


class GpuProcess(BaseModel):
    pid: int
    name: str = ""
    used_memory_bytes: int | None = None
    watched: bool = False


class GpuInfo(BaseModel):
    index: int
    name: str = ""
    uuid: str | None = None
    compute_capability: str | None = None
    utilization_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: Annotated[float | None, VOLATILE] = None
    power_w: Annotated[float | None, VOLATILE] = None
    power_limit_w: Annotated[float | None, VOLATILE] = None
    processes: list[GpuProcess] = Field(default_factory=list)
    host: str | None = None  # the peer it was observed on; None: this host


class GpusSection(BaseModel):
    source: Literal["nvml", "nvidia-smi", "none"] = "none"
    reason: str = ""
    driver_version: str | None = None
    cuda_version: str | None = None
    items: list[GpuInfo] = Field(default_factory=list)
    unavailable: list[Unavailable] = Field(default_factory=list)


class Observations(BaseModel):
    """One section per collector, named by its NAME, in the order the dump shows them.

    Written out rather than generated from the registry, so each section keeps its static type
    for mypy and editors; `collectors.check_registry` fails start-up if the two disagree.
    """

    processes: ProcessesSection = ProcessesSection()
    ports: PortsSection = PortsSection()
    slurm: SlurmSection = SlurmSection()
    ray: RaySection = RaySection()
    gpus: GpusSection = GpusSection()
    host: HostInfo = HostInfo()
    artifacts: ArtifactsSection = ArtifactsSection()
    commands: CommandsSection = CommandsSection()
    logs: LogsSection = LogsSection()
