"""Follows one process watch's root processes over collects and turns them into launches:
a root not seen before starts a launch, a root no longer seen ends it.

Pure: each collect passes what it saw (`Seen`); the caller keeps the launch list (in the
store) between collects. A launch is identified by pid and start time, so a recycled pid
is a new launch.
"""

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime

from service.discovery.launches import Launch, flag_diff, idle_seconds, summary_line

CPU_SAMPLES_MAX = 120


@dataclass
class Seen:
    """A root process of the watch as one collect saw it."""

    pid: int
    create_time: float  # epoch seconds, as psutil and procscan give it
    argv: tuple[str, ...]
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    listening: list[int] | None = None  # None: could not be read
    cpu_s: float | None = None  # user + system CPU seconds of its tree


@dataclass
class Tracked:
    launch: Launch
    cpu: list[tuple[float, float]] = field(default_factory=list)  # (epoch s, cpu s)


def _key(pid: int, started_at: datetime) -> tuple[int, int]:
    return pid, int(started_at.timestamp())


def observe(
    tracked: list[Tracked],
    seen: list[Seen],
    now: datetime,
    expected_ports: tuple[int, ...] = (),
) -> list[Tracked]:
    """The watch's launches after one collect, oldest first: new roots become launches,
    running launches whose root is gone get `ended_at`, and the running ones get their
    port state and idle time updated. `exit_status` is left to whoever can know it."""
    by_key = {_key(t.launch.pid, t.launch.started_at): t for t in tracked}
    current = set()
    for root in seen:
        started = datetime.fromtimestamp(root.create_time, UTC)
        key = _key(root.pid, started)
        current.add(key)
        item = by_key.get(key)
        if item is None:
            launch = Launch(
                pid=root.pid,
                argv=tuple(root.argv),
                started_at=started,
                cwd=root.cwd,
                env=dict(root.env),
                expected_ports=tuple(expected_ports),
                port_opened=False if expected_ports else None,
            )
            item = by_key[key] = Tracked(launch)
        launch = item.launch
        if (
            launch.expected_ports
            and root.listening
            and set(root.listening) & set(launch.expected_ports)
        ):
            launch.port_opened = True  # once open, it stays "opened" in the history
        if root.cpu_s is not None:
            item.cpu = [*item.cpu, (now.timestamp(), root.cpu_s)][-CPU_SAMPLES_MAX:]
            launch.idle_s = idle_seconds(item.cpu)
    for key, item in by_key.items():
        if key not in current and item.launch.ended_at is None:
            item.launch.ended_at = now
    return sorted(by_key.values(), key=lambda t: (t.launch.started_at, t.launch.pid))


def changes(launches: list[Launch]) -> list[str]:
    """For each launch, what changed from the one before it ("" for the first)."""
    lines = [""] if launches else []
    for before, after in itertools.pairwise(launches):
        diff = flag_diff(before.argv, after.argv, before.env, after.env)
        lines.append(summary_line(diff, " ".join(after.argv[:3])))
    return lines
