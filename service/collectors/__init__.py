"""The collector registry: one explicit tuple of modules, each exposing NAME and collect()."""

from dataclasses import dataclass, field
from typing import Any

from service.models import Observations
from service.settings import Settings


@dataclass
class CollectContext:
    """What every collector receives beside the session's watches.

    `memory` survives between snapshots of one session, so a collector can keep state such as
    psutil handles (for meaningful CPU %) or the previous read offset of a log; each collector
    owns the key named after it.
    """

    settings: Settings
    previous: Observations | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    # A probe only looks for events (exits, ports opening, errors, changes): collectors may
    # skip what costs and only a dump needs, such as socket owners and health requests.
    probe: bool = False


def registry() -> tuple[Any, ...]:
    """The collectors, in the order their sections appear in Observations."""
    from service.collectors import artifacts, commands, gpus, host, logs, ports, processes

    return (processes, ports, logs, artifacts, host, gpus, commands)
