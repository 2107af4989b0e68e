"""What the collectors observed: one section model per collector, and Observations."""

from datetime import datetime
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, Field


@lru_cache(maxsize=8192)
def process_key(pid: int, started_at: datetime) -> str:
    """A process row's key, pid@start: a snapshot asks for each row's several times."""
    return f"{pid}@{started_at.timestamp():.2f}"


class Unavailable(BaseModel):
    """A watch (or a whole collector) that could not be observed, and why."""

    watch_id: int | None = None
    target: str
    reason: str


class Flag(BaseModel):
    """One command-line argument: `name` is None for a positional argument."""

    name: str | None = None
    value: str | None = None


class ProcessInfo(BaseModel):
    watch_id: int
    pid: int
    ppid: int
    name: str
    user: str | None = None
    state: str
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    vms_bytes: int | None = None
    threads: int | None = None
    started_at: datetime
    age_s: float
    argv: list[str] = Field(default_factory=list)
    flags: list[Flag] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    root: bool = False
    tree: int | None = None
    cwd: str | None = None
    exe: str | None = None
    idle_for_s: float | None = None
    io_read_bps: float | None = None
    io_write_bps: float | None = None
    rss_growth_bps: float | None = None
    open_files: int | None = None
    listening: list[int] = Field(default_factory=list)
    packages: dict[str, str] = Field(default_factory=dict)
    not_permitted: list[str] = Field(default_factory=list)
    seen_at: datetime | None = None
    waiting: str | None = None  # a sleeping process's kernel wait: "futex_do_wait (futex)"
    # roots: lines that start it again as it ran (_relaunch.py)
    relaunch: list[str] = Field(default_factory=list)
    host: str | None = None  # the peer it was observed on; None: this host

    @property
    def key(self) -> str:
        """Identity across snapshots: a reused pid with another start time is another process."""
        return process_key(self.pid, self.started_at)

    @property
    def ref(self) -> str:
        """Its pid, named with its host when it is a peer's: "123", "node2:123"."""
        return pid_ref(self.host, self.pid)

    @property
    def tree_ref(self) -> str:
        """Its tree (its root's pid), named with its host: trees of two hosts never meet."""
        return pid_ref(self.host, self.tree if self.tree is not None else self.pid)


def pid_ref(host: str | None, pid: int) -> str:
    """A pid as the dump and the signals name it: "123" here, "node2:123" on a peer."""
    return f"{host}:{pid}" if host else str(pid)


class WorkerGroup(BaseModel):
    """Children of one root whose command lines differ only in a rank-like part."""

    tree: int
    count: int
    command: str
    # set when the members are alike (state, CPU, memory): the table shows them as one row
    pids: list[int] = Field(default_factory=list)
    ranks: str | None = None  # the varying part of their command lines: "0-7"
    host: str | None = None  # the peer it was observed on; None: this host

    @property
    def tree_ref(self) -> str:
        return pid_ref(self.host, self.tree)

    @property
    def refs(self) -> list[str]:
        return [pid_ref(self.host, pid) for pid in self.pids]


class StuckStack(BaseModel):
    """One distinct waiting point in a stuck tree: its Python stack (py-spy) and kernel stack
    (/proc/PID/stack), or why there is none, and the members that wait in it."""

    tree: int
    pids: list[int] = Field(default_factory=list)
    # Python thread names and frames, innermost first, as py-spy prints
    lines: list[str] = Field(default_factory=list)
    note: str | None = None  # why there is no Python stack: ptrace not permitted, no py-spy...
    # kernel functions, innermost first (readable with root rights)
    kernel: list[str] = Field(default_factory=list)
    taken_at: datetime | None = None
    host: str | None = None  # the peer it was observed on; None: this host

    @property
    def tree_ref(self) -> str:
        return pid_ref(self.host, self.tree)


class ExitedProcess(BaseModel):
    watch_id: int
    pid: int
    name: str
    root: bool = False
    key: str
    last_seen_at: datetime | None = None


class ProcessesSection(BaseModel):
    items: list[ProcessInfo] = Field(default_factory=list)
    unavailable: list[Unavailable] = Field(default_factory=list)
    matched: int = 0
    featured: list[int] = Field(default_factory=list)
    workers: list[WorkerGroup] = Field(default_factory=list)
    exited: list[ExitedProcess] = Field(default_factory=list)
    stuck_after_s: float | None = None
    # stuck trees only, taken once per episode
    stuck_stacks: list[StuckStack] = Field(default_factory=list)


class LogInfo(BaseModel):
    watch_id: int
    path: str
    size: int
    modified_at: datetime
    silent_for_s: float
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
    duration_s: float = 0.0
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
    expected_by: int | None = None
    url: str | None = None
    health_status: int | None = None
    health_error: str | None = None
    health_latency_ms: float | None = None
    health_body: str | None = None
    owner_pid: int | None = None


class PortsSection(BaseModel):
    items: list[PortInfo] = Field(default_factory=list)
    unavailable: list[Unavailable] = Field(default_factory=list)


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
    elapsed_s: float | None = None
    time_limit_s: float | None = None  # None: unlimited or unknown
    pending_for_s: float | None = None
    pending_after_s: float | None = None  # the watch's thresholds, for the signals
    silent_after_s: float | None = None
    stdout: str | None = None
    stderr: str | None = None
    logs: list[LogInfo] = Field(default_factory=list)
    log_problems: list[str] = Field(default_factory=list)
    source: str = ""  # where it was read: scontrol (the controller) or sacct (accounting)
    host: str | None = None  # the peer it was observed on; None: this host


class SlurmSection(BaseModel):
    items: list[SlurmJobInfo] = Field(default_factory=list)
    unavailable: list[Unavailable] = Field(default_factory=list)


class HostInfo(BaseModel):
    hostname: str = ""
    os: str = ""
    kernel: str = ""
    cpu_count: int | None = None
    load_avg: list[float] = Field(default_factory=list)
    memory_total_bytes: int | None = None
    memory_available_bytes: int | None = None
    python: str = ""
    cpu_model: str = ""
    swap_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    uptime_s: float | None = None
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
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
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
    gpus: GpusSection = GpusSection()
    host: HostInfo = HostInfo()
    artifacts: ArtifactsSection = ArtifactsSection()
    commands: CommandsSection = CommandsSection()
    logs: LogsSection = LogsSection()
