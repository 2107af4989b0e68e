"""The snapshot builder: what a live look may and may not change about the next version."""

from pathlib import Path

from service.models import LogWatch, SessionIn
from service.settings import Settings
from service.snapshots import Snapshotter
from service.store import Store

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "scheduler.py", line 10, in <module>\n'
    "RuntimeError: NCCL error: unhandled system error\n"
)


def test_a_preview_does_not_consume_the_news_of_the_next_snapshot(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("starting\n")
    settings = Settings(data_dir=tmp_path / "data", cpu_sample_s=0)
    snap = Snapshotter(settings, Store(settings.db_path))
    try:
        snap.store.put_session("p", SessionIn())
        snap.store.add_watch("p", LogWatch(path=str(log)), limit=10)
        snap.take("p")
        with open(log, "a") as handle:
            handle.write(TRACEBACK)
        preview, _ = snap.preview("p")
        assert preview.observations.logs.items[0].errors
        stored = snap.take("p")
        (item,) = stored.observations.logs.items
        assert item.errors and item.error_new
        assert stored.header.version == 2
    finally:
        snap.close()


def test_a_hung_collector_is_not_started_again_while_it_runs(tmp_path: Path, monkeypatch) -> None:
    import threading
    import types

    from service import snapshots
    from service.models import ProcessesSection
    from service.settings import Limits

    release = threading.Event()
    calls = []

    def collect(watches, ctx):
        calls.append(1)
        release.wait(10)
        return ProcessesSection()

    hung = types.SimpleNamespace(NAME="processes", collect=collect)
    monkeypatch.setattr(snapshots, "registry", lambda: (hung,))
    settings = Settings(data_dir=tmp_path / "data", limits=Limits(collector_timeout_s=0.2))
    snap = Snapshotter(settings, Store(settings.db_path))
    try:
        snap.store.put_session("h", SessionIn())
        first = snap.observe("h")
        second = snap.observe("h")
        assert "timed out" in first.processes.unavailable[0].reason
        assert "still busy" in second.processes.unavailable[0].reason
        assert len(calls) == 1
    finally:
        release.set()
        snap.close()
