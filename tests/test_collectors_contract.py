from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from ctxd.collectors import (
    CollectContext,
    check_registry,
    per_watch,
    registry,
)
from ctxd.collectors import logs as logs_collector
from ctxd.models import LogsSection, LogWatch, PortWatch, ProcessWatch, Unavailable, Watch
from ctxd.settings import Settings


def watch(wid: int, spec: LogWatch | PortWatch | ProcessWatch) -> Watch:
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


def test_one_run_reads_the_process_table_and_listening_sockets_once(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The processes, logs and ports collectors of one run share one read of /proc and one
    of the LISTEN sockets; the next run reads again (a process started meanwhile is seen)."""
    import subprocess
    import sys

    from ctxd.collectors.proc import procfs, proctree
    from ctxd.snapshotter.runner import CollectorRunner

    reads = {"table": 0, "listening": 0}
    real_scan, real_listening = proctree.scan, procfs.listening_inodes

    def counted_scan() -> dict:
        reads["table"] += 1
        return real_scan()

    def counted_listening(*args: object) -> dict:
        reads["listening"] += 1
        return real_listening(*args)

    monkeypatch.setattr(proctree, "scan", counted_scan)
    monkeypatch.setattr(procfs, "listening_inodes", counted_listening)
    log = tmp_path / "run.log"
    log.write_text("step 1\n")
    tag = f"ctxd-one-run-{tmp_path.name}"
    watches = [
        watch(1, ProcessWatch(kind="process", match=tag, expect_ports=[1])),
        watch(2, LogWatch(kind="log", path=str(log))),
        watch(3, PortWatch(kind="port", port=1)),
    ]
    runner = CollectorRunner(Settings(data_dir=tmp_path, cpu_sample_s=0.0), registry)
    try:
        first = runner.observe("s", watches)
        assert first.processes.items == [] and reads == {"table": 1, "listening": 1}
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", tag])
        try:
            second = runner.observe("s", watches)
            assert [p.pid for p in second.processes.items] == [proc.pid]
            assert reads == {"table": 2, "listening": 2}
        finally:
            proc.kill()
            proc.wait(timeout=10)
    finally:
        runner.close()


def test_every_watch_kind_is_declared_once_by_its_collector_and_known_everywhere() -> None:
    """A kind is its collector's KIND: peers, retirement and the CLI read it from there."""
    from typing import get_args

    from ctxd.cli.main import WATCH_KINDS
    from ctxd.collectors import kinds
    from ctxd.models import WatchSpec
    from ctxd.peers.merge import SECTION_OF_KIND
    from ctxd.snapshotter.retirement import RETIRING_KINDS

    declared = kinds()
    specs = get_args(get_args(WatchSpec)[0])  # the Annotated union's members
    modelled = {get_args(spec.model_fields["kind"].annotation)[0] for spec in specs}
    assert set(declared) == modelled == set(WATCH_KINDS)
    assert {kind: c.NAME for kind, c in declared.items()} == SECTION_OF_KIND
    assert {"process", "log", "artifact"} == RETIRING_KINDS
