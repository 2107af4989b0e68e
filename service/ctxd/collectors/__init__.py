"""The collector contract and registry: what a collector is, and the tuple of all of them."""

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from ctxd import redact
from ctxd.models import Observations, Unavailable, Watch
from ctxd.settings import Settings

M = TypeVar("M")
Item = TypeVar("Item", bound=BaseModel)


@dataclass
class CollectContext:
    """What every collector receives beside the session's watches.

    `memory` survives between snapshots of one session (one memory per purpose), so a
    collector can keep state such as psutil handles (for meaningful CPU %) or the previous
    read offset of a log. Each collector owns the entry named after it, a typed dataclass
    obtained with `memory_of`.
    """

    settings: Settings
    previous: Observations | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    # A probe only looks for events (exits, ports opening, errors, changes): collectors may
    # skip what costs and only a dump needs, such as socket owners and health requests.
    probe: bool = False
    # A shared process table read since this time.monotonic() will do (None: read afresh); a
    # probe's watcher tick shares one read among sessions, whatever this says (see proctree).
    table_since: float | None = None
    # True when this context lives for one collection run (the runner's): then what several
    # collectors read (the process table, the LISTEN sockets) is read once, by the first that
    # asks, and all of them see the same moment. A context kept across collects reads afresh.
    one_run: bool = False
    _once: dict[str, Any] = field(default_factory=dict)
    _once_guard: threading.Lock = field(default_factory=threading.Lock)
    _once_locks: dict[str, threading.Lock] = field(default_factory=dict)

    def once(self, name: str, make: Callable[[], M]) -> M:
        """`make()`, run once per collection run (see `one_run`); others asking meanwhile wait.
        A raise is not kept: each caller then meets it (and may try again)."""
        if not self.one_run:
            return make()
        with self._once_guard:
            lock = self._once_locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._once:
                self._once[name] = make()
            return self._once[name]

    def memory_of(self, name: str, kind: Callable[[], M]) -> M:
        """The collector `name`'s memory, made by `kind()` on its first run."""
        if name not in self.memory:
            self.memory[name] = kind()
        return self.memory[name]


class Collector(Protocol):
    """One section of Observations: NAME is its field, SECTION its model, collect() fills it.

    collect() must not raise for a bad watch: that watch gets an Unavailable line (see
    `per_watch`); a raise costs the whole section, which the runner then marks unavailable.
    """

    # properties: read-only, so a module's `SECTION = HostInfo` satisfies `type[BaseModel]`
    @property
    def NAME(self) -> str: ...

    @property
    def SECTION(self) -> type[BaseModel]: ...

    # The watch kind it observes ("process"), None for a section no watch asks for (host,
    # GPUs): peers, the CLI and retirement read the kinds from here.
    @property
    def KIND(self) -> str | None: ...

    # Whether an automatic watch of this kind retires once its target stays gone.
    @property
    def RETIRES(self) -> bool: ...

    def collect(self, watches: list[Watch], ctx: CollectContext) -> BaseModel: ...


def per_watch(
    watches: list[Watch],
    kind: type,
    observe: Callable[[Watch], Iterable[Item | Unavailable]],
    target: Callable[[Watch], str],
) -> tuple[list[Item], list[Unavailable]]:
    """Each watch of `kind` observed on its own: an exception is that watch's Unavailable line.

    Returns (items, unavailable) in watch order, so a bad watch never costs the others.
    """
    results: list[Item | Unavailable] = []
    for watch in watches:
        if not isinstance(watch.spec, kind):
            continue
        try:
            results += observe(watch)
        except Exception as exc:  # a bad watch must not cost the rest of the dump
            results.append(unavailable_from(exc, watch.id, target(watch)))
    return split(results)


def unavailable_from(exc: BaseException, watch_id: int | None, target: str) -> Unavailable:
    """An exception as the Unavailable line of the one watch it happened to, redacted."""
    reason = redact.text(f"error: {type(exc).__name__}: {exc}")[:300]
    return Unavailable(watch_id=watch_id, target=target, reason=reason)


def split(results: Iterable[Item | Unavailable]) -> tuple[list[Item], list[Unavailable]]:
    """(items, unavailable lines), each in the order given."""
    items: list[Item] = []
    unavailable: list[Unavailable] = []
    for result in results:
        if isinstance(result, Unavailable):
            unavailable.append(result)
        else:
            items.append(result)
    return items, unavailable


def registry() -> Sequence[Collector]:
    """The collectors, in the order their sections appear in Observations and in the dump."""
    from ctxd.collectors import (
        artifacts,
        commands,
        gpus,
        host,
        logs,
        ports,
        processes,
        ray,
        slurm,
    )

    # typed as Collector: mypy checks each module against the protocol
    modules: tuple[Collector, ...] = (
        processes,
        ports,
        slurm,
        ray,
        gpus,
        host,
        artifacts,
        commands,
        logs,
    )
    return modules


def kinds() -> dict[str, Collector]:
    """The watch kinds, each with the collector that observes it."""
    return {c.KIND: c for c in registry() if c.KIND is not None}


def check_registry(collectors: Sequence[Collector]) -> None:
    """Observations has one field per collector, named NAME, of type SECTION, in order.

    Observations is written out (not generated) so mypy and editors know each section's
    type; this check, run by the tests and at start-up, makes a mismatch an error at once.
    """
    fields = Observations.model_fields
    names = [c.NAME for c in collectors]
    if names != list(fields):
        raise TypeError(f"Observations fields {list(fields)} differ from collectors {names}")
    for c in collectors:
        if fields[c.NAME].annotation is not c.SECTION:
            raise TypeError(f"Observations.{c.NAME} is not {c.SECTION.__name__}")
