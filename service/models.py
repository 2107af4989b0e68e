"""Pydantic models shared by every layer of ctxd: inputs, observations, snapshots. No I/O."""

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator, model_validator

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
    quiet_after_s: int | None = Field(None, ge=10, le=7 * 24 * 3600)


class Session(BaseModel):
    id: str
    title: str = ""
    objective: str = ""
    quiet_after_s: int = 300
    created_at: datetime
    last_activity_at: datetime
    versions: int = 0


# --- watches --------------------------------------------------------------------------------


class ProcessWatch(Strict):
    kind: Literal["process"] = "process"
    pid: int | None = Field(None, ge=1, le=2**22)
    match: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    children: bool = True
    expect_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default=[], max_length=32)
    env: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        default=[], max_length=64
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
        if (self.pid is None) == (self.match is None):
            raise ValueError("give exactly one of 'pid' or 'match'")
        return self


class LogWatch(Strict):
    kind: Literal["log"] = "log"
    path: PathText
    lines: int = Field(40, ge=1, le=500)


class ArtifactWatch(Strict):
    kind: Literal["artifact"] = "artifact"
    path: PathText


class PortWatch(Strict):
    kind: Literal["port"] = "port"
    port: int = Field(ge=1, le=65535)
    host: Annotated[str, Field(min_length=1, max_length=255)] = "127.0.0.1"
    url: Annotated[str, Field(max_length=2048, pattern=r"^https?://")] | None = None


WatchSpec = Annotated[
    ProcessWatch | LogWatch | ArtifactWatch | PortWatch, Field(discriminator="kind")
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


class JournalIn(Strict):
    kind: JournalKind
    text: Annotated[str, Field(min_length=1, max_length=20_000)]
    outcome: LongText | None = None
    status: ShortText | None = None
    key: ShortText | None = None

    @model_validator(mode="after")
    def _fact_has_key(self) -> "JournalIn":
        if self.kind == "fact" and not self.key:
            raise ValueError("a 'fact' entry needs a 'key' (its value goes in 'text')")
        return self


class JournalEntry(BaseModel):
    id: int
    session: str
    kind: JournalKind
    text: str
    outcome: str | None = None
    status: str | None = None
    key: str | None = None
    created_at: datetime


class Narrative(BaseModel):
    """The journal as a dump shows it: current state, grouped by kind."""

    objective: str = ""
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

    @property
    def key(self) -> str:
        """Identity across snapshots: a reused pid with another start time is another process."""
        return f"{self.pid}@{self.started_at.timestamp():.2f}"


class ProcessesSection(BaseModel):
    items: list[ProcessInfo] = []
    unavailable: list[Unavailable] = []


class LogInfo(BaseModel):
    watch_id: int
    path: str
    size: int
    modified_at: datetime
    silent_for_s: float
    inode: int | None = None
    binary: bool = False
    lines: list[str] = []


class LogsSection(BaseModel):
    items: list[LogInfo] = []
    unavailable: list[Unavailable] = []


class ArtifactInfo(BaseModel):
    watch_id: int
    path: str
    type: Literal["file", "directory"]
    size: int
    modified_at: datetime
    fingerprint: str
    entries: int | None = None
    truncated: bool = False


class ArtifactsSection(BaseModel):
    items: list[ArtifactInfo] = []
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
    unavailable: list[Unavailable] = []


class Observations(BaseModel):
    processes: ProcessesSection = ProcessesSection()
    logs: LogsSection = LogsSection()
    artifacts: ArtifactsSection = ArtifactsSection()
    ports: PortsSection = PortsSection()
    host: HostInfo = HostInfo()


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


class SnapshotIn(Strict):
    note: LongText | None = None


class MessageIn(Strict):
    text: Annotated[str, Field(max_length=100_000)] = ""


class Diff(BaseModel):
    session: str
    from_version: int
    to_version: int
    changes: list[Change]
    markdown_diff: str
