"""An attempt (one launch of the agent's work, from its command to how it ended) and what a
snapshot or a command writes about one.

Plain frozen records, no I/O, importing nothing of ctxd's but `fmt`: the store takes and
returns them (its row encoding, JSON columns and ISO times, is its own), binding and history
read them. argv and env values are as observed; the caller redacts before storing.
"""

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Final, Literal, TypeVar

from ctxd.fmt import between, human_duration

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt: born with the agent's command (`command`), or first seen as a new root
    process of a process watch; bound to its process once seen (`seen`). As stored, it is
    keyed in its session by `start_key` (its command's until its process is seen, then its
    process's), and its row's `id` orders it among the others."""

    pid: int | None
    argv: tuple[str, ...]
    started_at: datetime
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    expected_ports: tuple[int, ...] = ()
    ended_at: datetime | None = None  # when it was first seen gone
    exit_status: int | None = None  # only where the kernel or the parent told
    port_opened: bool | None = None  # None: no expected port
    idle_s: float | None = None  # time since its CPU time last grew
    command: str | None = None  # the agent's command line as written (redacted)
    seen: bool = True  # its process was seen running (False: it ended before, or is starting)
    logs: tuple[str, ...] = ()  # the files its output goes to
    error: str | None = None  # the root-cause line its own log ended with
    error_log: str | None = None  # the log that line is in
    start_key: str = ""  # its key in the session ("": not stored)
    id: int = 0  # its row's id; ids only grow (0: not stored)
    watch_id: int | None = None  # the process watch that saw it
    tool_id: str | None = None  # the harness's tool call that reported its command

    def outcome(self, now: datetime) -> str:
        """How it ended or how long it runs: "running for 3 min", "died after 2 s"."""
        if self.ended_at is None:
            if not self.seen:
                return "started, its process not seen yet"
            return f"running for {human_duration((now - self.started_at).total_seconds())}"
        lasted = between(self.started_at, self.ended_at)  # to the second, as the clocks read
        if not self.seen:
            return f"died within {lasted}, its process gone before ctxd first scanned for it"
        if self.exit_status is None and self.error:  # its log ends with why
            return f"died after {lasted}"
        if self.exit_status is None:  # not ctxd's child: the kernel tells only its parent
            return f"ended after {lasted} (its exit status goes to its parent, not to ctxd)"
        if self.exit_status < 0:
            return f"killed by signal {-self.exit_status} after {lasted}"
        return f"exited with status {self.exit_status} after {lasted}"


class Unchanged(Enum):
    """A field an `AttemptUpdate` does not give: the attempt keeps what is stored."""

    UNCHANGED = "unchanged"


UNCHANGED: Final = Unchanged.UNCHANGED
Keep = Literal[Unchanged.UNCHANGED]


@dataclass(frozen=True, slots=True)
class AttemptUpdate:
    """What a snapshot or a command writes about one attempt, by its `start_key`: a new
    attempt's fields, or those a later look changes; a field left UNCHANGED keeps what is
    stored (a None given is written). What each writer gives:

    - a command reported (`reported`): a new attempt, `seen` False, no process yet;
    - a root process a snapshot sees: its facts (pid, time, argv, cwd, env, ports, idle time,
      logs); bound to the attempt its command made, that attempt's key as `bound_from`, its
      command, its time (the earlier), its expected ports and logs, and `seen`;
    - an attempt a snapshot finds gone: `ended_at`, and the error its log ended with;
    - a command reported after a snapshot saw its process: `bound_from` its own key, and the
      command, tool call, logs and ports.
    """

    start_key: str
    bound_from: str | Keep = UNCHANGED  # its key until now: it is keyed by `start_key` from now
    watch_id: int | Keep | None = UNCHANGED
    pid: int | Keep | None = UNCHANGED
    started_at: datetime | Keep = UNCHANGED
    argv: tuple[str, ...] | Keep = UNCHANGED
    cwd: str | Keep | None = UNCHANGED
    env: dict[str, str] | Keep = UNCHANGED
    expected_ports: tuple[int, ...] | Keep = UNCHANGED
    port_opened: bool | Keep | None = UNCHANGED
    idle_s: float | Keep | None = UNCHANGED
    ended_at: datetime | Keep | None = UNCHANGED  # None: open again (a harness says it runs)
    exit_status: int | Keep | None = UNCHANGED
    error: str | Keep | None = UNCHANGED
    error_log: str | Keep | None = UNCHANGED
    command: str | Keep | None = UNCHANGED
    tool_id: str | Keep | None = UNCHANGED
    logs: tuple[str, ...] | Keep = UNCHANGED
    seen: bool | Keep = UNCHANGED


def given(value: T | Keep) -> T:
    """A field its writer always gives (a sighting's argv, cwd and time); raises if not."""
    if value is UNCHANGED:
        raise ValueError("a field this update was expected to give is UNCHANGED")
    return value


def given_or(value: T | Keep, current: T) -> T:
    """The field as an update gives it, else `current`."""
    return current if value is UNCHANGED else value


def reported(attempt: Attempt) -> AttemptUpdate:
    """A new attempt as its reported command writes it, before any process is seen: its
    command as written, folder, time, tool call, logs and ports, `seen` False."""
    return AttemptUpdate(
        start_key=attempt.start_key,
        watch_id=None,
        pid=None,
        started_at=attempt.started_at,
        argv=attempt.argv,
        cwd=attempt.cwd,
        env=attempt.env,
        expected_ports=attempt.expected_ports,
        command=attempt.command,
        tool_id=attempt.tool_id,
        logs=attempt.logs,
        seen=False,
    )
