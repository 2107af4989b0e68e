"""The processes section: a watched process's row, its worker groups, stuck stacks and exits."""

from datetime import datetime
from functools import lru_cache
from typing import Annotated

from pydantic import BaseModel, Field

from ctxd.models.base import VOLATILE, Unavailable


@lru_cache(maxsize=8192)
def process_key(pid: int, started_at: datetime) -> str:
    """A process row's key, pid@start: a snapshot asks for each row's several times."""
    return f"{pid}@{started_at.timestamp():.2f}"


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
    age_s: Annotated[float, VOLATILE]
    argv: list[str] = Field(default_factory=list)
    flags: list[Flag] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    root: bool = False
    tree: int | None = None
    cwd: str | None = None
    exe: str | None = None
    idle_for_s: Annotated[float | None, VOLATILE] = None
    io_read_bps: Annotated[float | None, VOLATILE] = None
    io_write_bps: Annotated[float | None, VOLATILE] = None
    rss_growth_bps: Annotated[float | None, VOLATILE] = None
    open_files: int | None = None
    listening: list[int] = Field(default_factory=list)
    packages: dict[str, str] = Field(default_factory=dict)
    not_permitted: list[str] = Field(default_factory=list)
    seen_at: Annotated[datetime | None, VOLATILE] = None
    waiting: Annotated[str | None, VOLATILE] = (
        None  # a sleeping process's kernel wait: "futex_do_wait (futex)"
    )
    # what that call waits on, when it names it: the path it opens, the file or socket it reads
    waiting_on: Annotated[str | None, VOLATILE] = None
    # a FIFO it waits to open: when it was last written (made, where nothing wrote it since)
    waiting_on_written_at: Annotated[datetime | None, VOLATILE] = None
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
    # the job's own frames (not the interpreter's nor an installed library's): "file:line" as
    # the frame lines name it -> the text of that line (redacted), "" where it was not read
    source: dict[str, str] = Field(default_factory=dict)
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
    exit_status: int | None = None  # its code, or minus its signal, where the kernel told


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
