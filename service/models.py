"""Pydantic models shared by every layer of ctxd: inputs, observations, snapshots. No I/O."""

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator, model_validator

from service.errors import Invalid

SESSION_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
SessionId = Annotated[str, Field(pattern=SESSION_ID_PATTERN)]
ShortText = Annotated[str, Field(max_length=200)]
LongText = Annotated[str, Field(max_length=20_000)]
PathText = Annotated[str, Field(min_length=1, max_length=4096)]


class Strict(BaseModel):
    """Input models reject fields they do not know, so a typo is an error, not a no-op."""

    model_config = ConfigDict(extra="forbid")


# --- sessions -------------------------------------------------------------------------------


class SessionIn(Strict):
    title: ShortText | None = None
    objective: LongText | None = None
    quiet_after_s: int | None = Field(None, ge=1, le=7 * 24 * 3600)
    schedule_every_s: int | None = Field(None, ge=0, le=7 * 24 * 3600)
    cwd: PathText | None = None

    @field_validator("cwd")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError("cwd must be an absolute path")
        return value


class Session(BaseModel):
    id: str
    title: str = ""
    objective: str = ""
    quiet_after_s: int = 300
    schedule_every_s: int | None = None
    cwd: str | None = None
    created_at: datetime
    last_activity_at: datetime
    versions: int = 0


# --- watches --------------------------------------------------------------------------------


class ProcessWatch(Strict):
    kind: Literal["process"] = "process"
    pid: int | None = Field(None, ge=1, le=2**22)
    match: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    name: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    children: bool = True
    expect_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default=[], max_length=32)
    env: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        default=[], max_length=64
    )
    packages: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")]] = Field(
        default=[], max_length=32
    )

    @field_validator("match")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_target(self) -> "ProcessWatch":
        if [self.pid, self.match, self.name].count(None) != 2:
            raise ValueError("give exactly one of 'pid', 'match' or 'name'")
        return self


class LogWatch(Strict):
    kind: Literal["log"] = "log"
    path: PathText
    lines: int = Field(40, ge=1, le=500)
    files: int = Field(5, ge=1, le=20, description="newest files shown when path is a glob")
    errors: list[Annotated[str, Field(min_length=1, max_length=500)]] = Field(
        default=[], max_length=20, description="extra regular expressions of error lines"
    )

    @field_validator("errors")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression {pattern!r}: {exc}") from None
        return value


class ArtifactWatch(Strict):
    kind: Literal["artifact"] = "artifact"
    path: PathText


class CommandWatch(Strict):
    """A command from the server's allowlist, by its configured name or its exact argv."""

    kind: Literal["command"] = "command"
    name: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    argv: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None, min_length=1, max_length=64
    )
    timeout_s: float = Field(10.0, gt=0, le=60)
    cwd: PathText | None = None

    @model_validator(mode="after")
    def _one_target(self) -> "CommandWatch":
        if (self.name is None) == (self.argv is None):
            raise ValueError("give exactly one of 'name' or 'argv'")
        return self


class PortWatch(Strict):
    kind: Literal["port"] = "port"
    port: int = Field(ge=1, le=65535)
    host: Annotated[str, Field(min_length=1, max_length=255)] = "127.0.0.1"
    url: Annotated[str, Field(max_length=2048, pattern=r"^https?://")] | None = None


WatchSpec = Annotated[
    ProcessWatch | LogWatch | ArtifactWatch | PortWatch | CommandWatch,
    Field(discriminator="kind"),
]


class WatchIn(RootModel[WatchSpec]):
    """A watch as posted: one of the kinds, told apart by `kind`."""


class Watch(BaseModel):
    id: int
    session: str
    created_at: datetime
    spec: WatchSpec


# --- journal --------------------------------------------------------------------------------

JournalKind = Literal[
    "objective", "attempt", "finding", "hypothesis", "decision", "next", "note", "fact", "question"
]


STATUSES: dict[str, tuple[str, ...]] = {
    "attempt": ("running", "failed", "succeeded", "abandoned"),
    "hypothesis": ("open", "confirmed", "refuted"),
    "next": ("open", "done"),
    "question": ("open", "answered"),
}


def check_status(kind: str | None, status: str | None) -> None:
    allowed = STATUSES.get(kind or "")
    if status is not None and allowed and status not in allowed:
        raise Invalid(f"status of a '{kind}' is one of {', '.join(allowed)}; got '{status}'")
    if status is not None and not allowed and kind is not None:
        raise Invalid(f"a '{kind}' entry has no status")


class JournalIn(Strict):
    kind: JournalKind
    text: Annotated[str, Field(min_length=1, max_length=20_000)]
    outcome: LongText | None = None
    status: ShortText | None = None
    key: ShortText | None = None
    concerns: list[Annotated[int, Field(ge=1)]] = Field(default=[], max_length=50)

    @model_validator(mode="after")
    def _consistent(self) -> "JournalIn":
        if self.kind == "fact" and not self.key:
            raise ValueError("a 'fact' entry needs a 'key' (its value goes in 'text')")
        check_status(self.kind, self.status)
        return self


class JournalUpdate(Strict):
    """Fields of an entry that can change as work goes on; omitted fields stay as they are."""

    text: Annotated[str, Field(min_length=1, max_length=20_000)] | None = None
    outcome: LongText | None = None
    status: ShortText | None = None
    concerns: list[Annotated[int, Field(ge=1)]] | None = Field(default=None, max_length=50)


class JournalEntry(BaseModel):
    id: int
    session: str
    kind: JournalKind
    text: str
    outcome: str | None = None
    status: str | None = None
    key: str | None = None
    concerns: list[int] = []
    created_at: datetime
    updated_at: datetime | None = None


class Narrative(BaseModel):
    """The journal as a dump shows it: current state, grouped by kind."""

    objective: str = ""
    latest_message: str | None = None
    facts: dict[str, str] = {}
    attempts: list[JournalEntry] = []
    findings: list[JournalEntry] = []
    decisions: list[JournalEntry] = []
    next_steps: list[JournalEntry] = []
    questions: list[JournalEntry] = []
    notes: list[JournalEntry] = []
    last_entry_id: int = 0


# --- observations ---------------------------------------------------------------------------


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
    argv: list[str] = []
    flags: list[Flag] = []
    env: dict[str, str] = {}
    root: bool = False
    tree: int | None = None
    cwd: str | None = None
    exe: str | None = None
    idle_for_s: float | None = None
    io_read_bps: float | None = None
    io_write_bps: float | None = None
    rss_growth_bps: float | None = None
    open_files: int | None = None
    listening: list[int] = []
    packages: dict[str, str] = {}
    not_permitted: list[str] = []
    seen_at: datetime | None = None

    @property
    def key(self) -> str:
        """Identity across snapshots: a reused pid with another start time is another process."""
        return f"{self.pid}@{self.started_at.timestamp():.2f}"


class WorkerGroup(BaseModel):
    """Children of one root whose command lines differ only in a rank-like part."""

    tree: int
    count: int
    command: str


class ExitedProcess(BaseModel):
    watch_id: int
    pid: int
    name: str
    root: bool = False
    key: str
    last_seen_at: datetime | None = None


class ProcessesSection(BaseModel):
    items: list[ProcessInfo] = []
    unavailable: list[Unavailable] = []
    matched: int = 0
    featured: list[int] = []
    workers: list[WorkerGroup] = []
    exited: list[ExitedProcess] = []
    stuck_after_s: float | None = None


class LogInfo(BaseModel):
    watch_id: int
    path: str
    size: int
    modified_at: datetime
    silent_for_s: float
    inode: int | None = None
    binary: bool = False
    lines: list[str] = []
    growth_bytes: int | None = None  # since the previous snapshot; None: first or replaced
    rotated: bool = False  # a new file (inode) at the path since the previous snapshot
    rotated_from: str | None = None  # where the old file went, when found beside it
    truncated: bool = False  # shrank, or rewritten, since the previous snapshot
    scanned_bytes: int = 0  # new bytes scanned for errors
    skipped_bytes: int = 0  # new bytes beyond the scan bound, not scanned
    errors: list[str] = []  # the first error block (a whole traceback, up to a bound)
    error_summary: str | None = None  # its most telling line (the exception line)
    error_new: bool = False  # found in this snapshot's new bytes, not carried over
    error_lines: int = 0  # error-shaped lines among the new bytes


class LogsSection(BaseModel):
    items: list[LogInfo] = []
    unavailable: list[Unavailable] = []


class ArtifactFile(BaseModel):
    path: str  # relative to the directory
    size: int
    modified_at: datetime


class DistInfo(BaseModel):
    kind: Literal["wheel", "sdist"]
    name: str
    version: str
    build: str | None = None
    tags: list[str] = []


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
    newest: list[ArtifactFile] = []  # directories: a few most recently modified files
    largest: list[ArtifactFile] = []  # directories: a few largest files
    changes: list[str] = []  # directories: files added, removed, modified since last time
    dist: DistInfo | None = None  # wheels and sdists: parsed from the file name


class ArtifactsSection(BaseModel):
    items: list[ArtifactInfo] = []
    unavailable: list[Unavailable] = []


class CommandInfo(BaseModel):
    watch_id: int
    label: str  # the allowlist name
    argv: list[str]
    exit_code: int | None = None  # None: timed out or could not start
    timed_out: bool = False
    duration_s: float = 0.0
    output: list[str] = []  # stdout then stderr, cleaned, bounded
    output_cut: bool = False


class CommandsSection(BaseModel):
    items: list[CommandInfo] = []
    unavailable: list[Unavailable] = []


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
    items: list[PortInfo] = []
    unavailable: list[Unavailable] = []


class HostInfo(BaseModel):
    hostname: str = ""
    os: str = ""
    kernel: str = ""
    cpu_count: int | None = None
    load_avg: list[float] = []
    memory_total_bytes: int | None = None
    memory_available_bytes: int | None = None
    python: str = ""
    cpu_model: str = ""
    swap_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    uptime_s: float | None = None
    disks: list["DiskInfo"] = []
    unavailable: list[Unavailable] = []


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
    processes: list[GpuProcess] = []


class GpusSection(BaseModel):
    source: Literal["nvml", "nvidia-smi", "none"] = "none"
    reason: str = ""
    driver_version: str | None = None
    cuda_version: str | None = None
    items: list[GpuInfo] = []
    unavailable: list[Unavailable] = []


class Observations(BaseModel):
    processes: ProcessesSection = ProcessesSection()
    logs: LogsSection = LogsSection()
    artifacts: ArtifactsSection = ArtifactsSection()
    ports: PortsSection = PortsSection()
    host: HostInfo = HostInfo()
    gpus: GpusSection = GpusSection()
    commands: CommandsSection = CommandsSection()


# --- signals, changes, snapshots ------------------------------------------------------------

Severity = Literal["critical", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}


class Signal(BaseModel):
    severity: Severity
    code: str
    subject: str = ""
    text: str

    @property
    def key(self) -> str:
        """Identity across snapshots: the same condition on the same thing, whatever its text."""
        return f"{self.code}:{self.subject}"


class Change(BaseModel):
    kind: str
    text: str


class SnapshotHeader(BaseModel):
    session: str
    version: int
    taken_at: datetime
    trigger: str
    previous_version: int | None = None
    previous_taken_at: datetime | None = None
    host: str = ""
    note: str | None = None
    duration_ms: float = 0.0
    confirmed_at: datetime | None = None
    confirmations: int = 0
    data_dir_bytes: int | None = None


class Snapshot(BaseModel):
    header: SnapshotHeader
    title: str = ""
    narrative: Narrative = Narrative()
    signals: list[Signal] = []
    observations: Observations = Observations()
    changes: list[Change] = []


class SnapshotSummary(BaseModel):
    session: str
    version: int
    taken_at: datetime
    trigger: str
    signals: int
    changes: int
    confirmed_at: datetime | None = None


class SnapshotIn(Strict):
    note: LongText | None = None
    force: bool = False


class MessageIn(Strict):
    text: Annotated[str, Field(max_length=100_000)] = ""


class Diff(BaseModel):
    session: str
    from_version: int
    to_version: int
    changes: list[Change]
    markdown_diff: str
