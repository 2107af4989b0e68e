from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from service.collectors import (
    CollectContext,
    check_registry,
    per_watch,
    registry,
)
from service.collectors import logs as logs_collector
from service.models import LogsSection, LogWatch, PortWatch, Unavailable, Watch
from service.settings import Settings


def watch(wid: int, spec: LogWatch | PortWatch) -> Watch:
    return Watch(id=wid, session="t", created_at=datetime.now(UTC), spec=spec)


def test_the_registry_matches_observations() -> None:
    check_registry(registry())


def test_a_collector_out_of_step_with_observations_is_refused() -> None:
    swapped = [registry()[1], registry()[0], *registry()[2:]]
    with pytest.raises(TypeError, match="differ"):
        check_registry(swapped)

    @dataclass
    class WrongSection:
        NAME = "ports"
        SECTION = LogsSection

    with pytest.raises(TypeError, match=r"Observations\.ports"):
        check_registry([registry()[0], WrongSection(), *registry()[2:]])


def test_per_watch_keeps_a_failing_watch_to_its_own_line() -> None:
    watches = [
        watch(1, LogWatch(path="/a")),
        watch(2, PortWatch(port=80)),
        watch(3, LogWatch(path="/b")),
    ]

    def observe(w: Watch) -> list[Unavailable]:
        if w.id == 1:
            raise ValueError("bad watch")
        return [Unavailable(watch_id=w.id, target="ok", reason="fine")]

    items, lines = per_watch(watches, LogWatch, observe, lambda w: f"target {w.id}")
    assert items == []
    assert [(u.watch_id, u.target) for u in lines] == [(1, "target 1"), (3, "ok")]
    assert lines[0].reason == "error: ValueError: bad watch"


def test_memory_is_typed_and_kept_per_collector() -> None:
    ctx = CollectContext(settings=Settings())
    memory = ctx.memory_of(logs_collector.NAME, logs_collector.LogsMemory)
    assert isinstance(memory, logs_collector.LogsMemory)
    assert ctx.memory_of(logs_collector.NAME, logs_collector.LogsMemory) is memory
