"""The same state gives the same content key from the first snapshot on (no second version)."""

import sys
import time
from pathlib import Path

from ctxd.models import LogWatch, ProcessWatch, SessionIn
from ctxd.settings import Settings
from ctxd.snapshotter import changes
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.database import Store

from tests.conftest import asleep, wait_until

FIXTURES = Path(__file__).parent / "fixtures"


def test_an_unchanged_session_is_confirmed_not_versioned_again(tmp_path: Path, spawn) -> None:
    crashed = tmp_path / "vllm.log"
    crashed.write_bytes(
        (FIXTURES / "vllm_worker_free_memory_chain_issue535_excerpt.log").read_bytes()
    )
    quiet = tmp_path / "quiet.log"
    quiet.write_text("INFO ready\n")
    child = spawn(sys.executable, "-c", "import time; time.sleep(60)")
    # asleep first: a process still starting is news
    wait_until(lambda: asleep(child.pid, "nanosleep"), "the child asleep")
    settings = Settings(data_dir=tmp_path / "data", cpu_sample_s=0)
    snap = Snapshotter(settings, Store(settings.db_path))
    try:
        snap.store.put_session("s", SessionIn())
        snap.store.add_watch("s", LogWatch(path=str(crashed)), limit=10)
        snap.store.add_watch("s", LogWatch(path=str(quiet)), limit=10)
        snap.store.add_watch("s", ProcessWatch(pid=child.pid), limit=10)
        first = snap.take("s")
        time.sleep(0.2)  # time passes (ages, idle times grow): no news, no version
        second = snap.take("s")
        assert first.header.version == 1
        assert second.header.version == 1 and second.header.confirmations == 1
        # and a real change still makes a version
        with open(quiet, "a") as handle:
            handle.write("RuntimeError: NCCL error: unhandled system error\n")
        third = snap.take("s")
        assert third.header.version == 2
    finally:
        snap.close()


def test_the_news_fields_of_a_log_do_not_enter_the_key(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from ctxd.models import LogInfo, LogsSection, Observations, Snapshot, SnapshotHeader

    def snapshot(**news) -> Snapshot:
        log = LogInfo(watch_id=1, path="/x.log", size=10, silent_for_s=1,
                      modified_at=datetime(2026, 1, 1, tzinfo=UTC),
                      errors=["ValueError: x"], error_summary="ValueError: x", **news)  # fmt: skip
        header = SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="t")
        return Snapshot(header=header, observations=Observations(logs=LogsSection(items=[log])))

    first_read = snapshot(scanned_bytes=10, error_new=True, error_lines=3)
    later_read = snapshot(growth_bytes=0, scanned_bytes=0, error_new=False)
    assert changes.content_key(first_read) == changes.content_key(later_read)
    grown = snapshot().model_copy(deep=True)
    grown.observations.logs.items[0].size = 11
    assert changes.content_key(grown) != changes.content_key(later_read)


def test_where_a_sleeping_process_waits_is_shown_but_not_keyed() -> None:
    from datetime import UTC, datetime

    from ctxd.models import (
        Observations,
        ProcessesSection,
        ProcessInfo,
        Snapshot,
        SnapshotHeader,
    )

    def snapshot(waiting: str) -> Snapshot:
        started = datetime(2026, 1, 1, tzinfo=UTC)
        row = ProcessInfo(watch_id=1, pid=7, ppid=1, name="python", state="sleeping",
                          started_at=started, age_s=60, waiting=waiting)  # fmt: skip
        header = SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="t")
        observations = Observations(processes=ProcessesSection(items=[row]))
        return Snapshot(header=header, observations=observations)

    epoll, futex = snapshot("do_epoll_wait (epoll_wait)"), snapshot("futex_do_wait (futex)")
    assert changes.content_key(epoll) == changes.content_key(futex)
    # the same environment read in another order is the same content; another value is not
    env = {"NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1", "TP": "8"}
    futex.observations.processes.items[0].env = env
    epoll.observations.processes.items[0].env = dict(reversed(env.items()))
    assert changes.content_key(epoll) == changes.content_key(futex)
    epoll.observations.processes.items[0].env = {**env, "TP": "4"}
    assert changes.content_key(epoll) != changes.content_key(futex)


def test_the_key_walks_the_models_as_their_json_dump_reads(tmp_path: Path, spawn) -> None:
    """content_key reads the models themselves; what it hashes is what the same walk of the
    snapshot's JSON dump gives (no field lost, none read differently), on a real snapshot
    with a process and its environment, a failed log, a tree, a port, a journal and a launch."""
    import json
    import os
    import socket

    import pydantic_core
    from ctxd.models import ArtifactWatch, JournalIn, PortWatch

    log = tmp_path / "vllm.log"
    log.write_bytes((FIXTURES / "vllm_worker_free_memory_chain_issue535_excerpt.log").read_bytes())
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "kernel-0.1.whl").write_bytes(b"x" * 4096)
    env = {**os.environ, "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    child = spawn(sys.executable, "-c", "import time; time.sleep(60)", "serve.py", env=env)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    settings = Settings(data_dir=tmp_path / "data", cpu_sample_s=0)
    snap = Snapshotter(settings, Store(settings.db_path))
    try:
        snap.store.put_session("s", SessionIn(objective="find the hang"))
        for spec in (
            LogWatch(path=str(log)),
            ProcessWatch(pid=child.pid),
            ArtifactWatch(path=str(tmp_path / "dist")),
            PortWatch(port=listener.getsockname()[1]),
        ):
            snap.store.add_watch("s", spec, limit=10)
        snap.store.add_entry("s", JournalIn(kind="attempt", text="tp 8", status="failed"))
        snapshot = snap.take("s")
        assert snapshot.observations.processes.items[0].env  # the walk meets a mapping
        dumped = snapshot.model_dump(mode="json", exclude={"header": True, "changes": True})
        dumped["signals"] = sorted(s.key for s in snapshot.signals)
        dumped["note"] = snapshot.header.note
        reference = _without_volatile(changes._stable(dumped))
        for item in reference["observations"]["logs"]["items"]:
            for name in changes._LOG_NEWS:
                item.pop(name, None)
        launches = [i for i in reference["narrative"]["history"] if i["source"] == "launch"]
        assert launches  # the process, seen running: its outcome is a duration, not state
        for item in launches:
            item.pop("outcome")
        assert json.loads(pydantic_core.to_json(changes.keyed(snapshot))) == reference
    finally:
        listener.close()
        snap.close()


def _volatile_names() -> set[str]:
    """The field names some observed model declares VOLATILE (what the key leaves out)."""
    from ctxd import models
    from ctxd.models.base import VOLATILE
    from pydantic import BaseModel

    kinds = [k for k in vars(models).values() if isinstance(k, type) and issubclass(k, BaseModel)]
    return {n for k in kinds for n, f in k.model_fields.items() if VOLATILE in f.metadata}


def _without_volatile(value, names=None):
    """A JSON walk without the volatile fields, as the model walk leaves them out; a mapping of
    the data itself (a process's environment) keeps every key."""
    names = _volatile_names() if names is None else names
    if isinstance(value, dict):
        return {k: v if k == "env" else _without_volatile(v, names)
                for k, v in value.items() if k not in names}  # fmt: skip
    if isinstance(value, list):
        return [_without_volatile(v, names) for v in value]
    return value


def test_only_fields_declared_volatile_leave_the_key_not_any_name_ending_in_s() -> None:
    """An environment variable named like a duration (`NCCL_TIMEOUT_S`) is data: changing it
    is a new version. A process's age, declared VOLATILE by its model, is not."""
    from datetime import UTC, datetime

    from ctxd.models import Observations, ProcessesSection, ProcessInfo, Snapshot, SnapshotHeader

    def snapshot(env: dict[str, str], age: float) -> Snapshot:
        started = datetime(2026, 12, 1, tzinfo=UTC)
        row = ProcessInfo(watch_id=1, pid=10, ppid=1, name="python", state="sleeping",
                          started_at=started, age_s=age, env=env)  # fmt: skip
        observed = Observations(processes=ProcessesSection(items=[row]))
        header = SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="x")
        return Snapshot(header=header, observations=observed)

    base = changes.content_key(snapshot({"NCCL_TIMEOUT_S": "60"}, 10.0))
    assert changes.content_key(snapshot({"NCCL_TIMEOUT_S": "60"}, 99.0)) == base
    assert changes.content_key(snapshot({"NCCL_TIMEOUT_S": "600"}, 10.0)) != base
