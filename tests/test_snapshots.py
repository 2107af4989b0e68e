"""The snapshot builder: what a live look may and may not change about the next version."""

from pathlib import Path

from ctxd.models import LogWatch, SessionIn
from ctxd.settings import Settings
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.database import Store

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

    from ctxd.models import ProcessesSection
    from ctxd.settings import Limits
    from ctxd.snapshotter import snapshotter as snapshots

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
        first = snap.runner.observe("h", snap.store.list_watches("h"))
        second = snap.runner.observe("h", snap.store.list_watches("h"))
        assert "timed out" in first.processes.unavailable[0].reason
        assert "still busy" in second.processes.unavailable[0].reason
        assert len(calls) == 1
    finally:
        release.set()
        snap.close()


def test_the_snapshot_kept_in_memory_is_the_one_stored(tmp_path: Path) -> None:
    """The next snapshot compares with the committed one kept in memory: it must be what
    the store gives back, confirmations included, and a version written by another process
    (another Snapshotter on the same database) is read from the store."""
    import subprocess
    import sys

    from ctxd.models import ProcessWatch

    log = tmp_path / "server.log"
    log.write_text("starting\n" + TRACEBACK)
    settings = Settings(data_dir=tmp_path / "data", cpu_sample_s=0)
    snap = Snapshotter(settings, Store(settings.db_path))
    other = Snapshotter(settings, Store(settings.db_path))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "kept"])
    try:
        snap.store.put_session("p", SessionIn(objective="compare"))
        snap.store.add_watch("p", LogWatch(path=str(log)), limit=10)
        snap.store.add_watch("p", ProcessWatch(pid=sleeper.pid), limit=10)
        taken = snap.take("p")
        kept = snap._previous("p", 1)
        assert kept is taken
        stored = snap.store.get_snapshot("p", 1)
        assert kept.model_dump(exclude={"changes"}) == stored.model_dump(exclude={"changes"})
        assert kept.changes == stored.changes
        for _ in range(5):  # until nothing changed (a first CPU reading makes a version)
            again = snap.take("p")
            if again.header.confirmations:
                break
        latest = again.header.version
        assert again.header.confirmations and snap._previous("p", latest) is again
        assert again.model_dump() == snap.store.get_snapshot("p", latest).model_dump()
        other.take("p", force=True)  # written by another process
        after = snap.take("p", force=True)
        assert after.header.previous_version == latest + 1
        assert after.header.version == latest + 2
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)
        other.close()
        snap.close()


def test_the_workspace_git_is_asked_while_the_collectors_run(tmp_path: Path, monkeypatch) -> None:
    # `git status` and `git log` cost several milliseconds: asked after the collectors, they
    # added that to every snapshot of a session with a workspace.
    import os
    import subprocess
    import threading
    import types

    from ctxd.models import ProcessesSection
    from ctxd.snapshotter import agent_context
    from ctxd.snapshotter import snapshotter as snapshots

    repo = tmp_path / "checkout"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    for args in (["init", "-q", "-b", "trunk"], ["commit", "-q", "--allow-empty", "-m", "first"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)
    asked = threading.Event()
    real_git_section = agent_context.git_section

    def git_section(top: str, timeout: float):  # type: ignore[no-untyped-def]
        asked.set()
        return real_git_section(top, timeout=timeout)

    waited: list[bool] = []

    def collect(watches, ctx):  # type: ignore[no-untyped-def]
        waited.append(asked.wait(2))  # True only if git was asked while this collector ran
        return ProcessesSection()

    monkeypatch.setattr(agent_context, "git_section", git_section)
    monkeypatch.setattr(
        snapshots, "registry", lambda: (types.SimpleNamespace(NAME="processes", collect=collect),)
    )
    settings = Settings(data_dir=tmp_path / "data", cpu_sample_s=0)
    snap = Snapshotter(settings, Store(settings.db_path))
    try:
        snap.store.put_session("g", SessionIn(cwd=str(repo)))
        snapshot = snap.take("g")
        assert waited == [True]
        assert snapshot.narrative.workspace and "`trunk`" in snapshot.narrative.workspace
    finally:
        snap.close()
