"""Sections in the store: unchanged ones refer to the earlier copy, changed ones are stored as
deltas of a keyframe, and every version reads back exactly, before and after a prune."""

import json
import zlib
from datetime import timedelta
from pathlib import Path

from ctxd.models import (
    Observations,
    ProcessesSection,
    ProcessInfo,
    SessionIn,
    Snapshot,
    SnapshotHeader,
)
from ctxd.store.connection import now
from ctxd.store.database import Store
from ctxd.store.sections import BASE, DELTA, KEYFRAME_EVERY, references


def _process(pid: int, version: int) -> ProcessInfo:
    started = now() - timedelta(hours=1)
    return ProcessInfo(
        watch_id=1,
        pid=pid,
        ppid=1,
        name="python",
        state="sleeping",
        started_at=started,
        age_s=3600 + version * 2.123456789 + pid / 7,
        idle_for_s=version * 1.987654321,
        argv=["python", "-m", "sglang.launch_server", "--tp", "8", "--rank", str(pid)],
        env={"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "NCCL_DEBUG": "INFO"},
        cwd="/srv/model",
        rss_bytes=12_619_776,
    )


def _store_with(tmp_path: Path, count: int, old_until: int = 0) -> tuple[Store, dict]:
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())
    built: dict[int, Snapshot] = {}

    def build(version: int) -> tuple[Snapshot, str]:
        # from half past midnight, whenever the test runs: which version is the last of its
        # day (one a prune keeps) must not depend on the hour of the run
        start = (now() - timedelta(days=40)).replace(hour=0, minute=30, second=0, microsecond=0)
        moment = start + timedelta(hours=version)
        header = SnapshotHeader(
            session="s",
            version=version,
            taken_at=moment if version <= old_until else now(),
            trigger="manual",
        )
        processes = ProcessesSection(items=[_process(pid, version) for pid in range(100, 109)])
        built[version] = Snapshot(
            header=header, title="t", observations=Observations(processes=processes)
        )
        return built[version], f"# s · v{version}\n"

    for _ in range(count):
        store.add_snapshot("s", build)
    return store, built


def test_changed_sections_are_deltas_and_unchanged_ones_are_not_stored_again(tmp_path: Path):
    store, built = _store_with(tmp_path, 3 * KEYFRAME_EVERY)
    for version, snapshot in built.items():
        assert store.get_snapshot("s", version) == snapshot
    blobs = [bytes(r["data"]) for r in store._rows("select data from blobs")]
    # per version: a new header and a new process table; the title and the rest only once
    with store._lock:
        refs = [references(store.db, "s", v) for v in built]
    constant = {
        h for r in refs for k, h in r.items() if k not in ("header", "observations.processes")
    }
    assert constant == {
        h for k, h in refs[0].items() if k not in ("header", "observations.processes")
    }
    assert len(blobs) == 2 * len(built) + len(constant)
    assert sum(b[:2] == DELTA for b in blobs) >= 2 * len(built) * 0.9
    whole = sum(
        len(zlib.compress(s.observations.processes.model_dump_json().encode(), 6))
        for s in built.values()
    )
    assert sum(len(b) for b in blobs) < whole / 2
    lists = [json.loads(r["sections"]) for r in store._rows("select sections from snapshots")]
    assert sum(BASE in refs for refs in lists) >= len(lists) - 3  # whole every 32 versions
    assert all(len(refs) <= 3 for refs in lists if BASE in refs)  # @, header, processes


def test_a_prune_that_removes_keyframes_leaves_every_kept_version_readable(tmp_path: Path):
    store, built = _store_with(tmp_path, 3 * KEYFRAME_EVERY + 5, old_until=3 * KEYFRAME_EVERY)
    removed = {v for _, v in store.prune(keep_days=30)}
    assert 1 + KEYFRAME_EVERY in removed  # a keyframe list and keyframe blobs went
    kept = sorted(set(built) - removed)
    assert len(kept) > 5
    for version in kept:
        assert store.get_snapshot("s", version) == built[version]
    store.prune(keep_days=30)
    for version in kept:
        assert store.get_snapshot("s", version) == built[version]
    live = store._rows("select count(*) n from blobs")[0]["n"]
    assert live < len(built)  # what no kept version needs went


def test_sections_are_the_snapshots_json_dump_cut_at_its_sections() -> None:
    """pydantic-core writes each section in one call: the bytes decode to exactly what the
    snapshot's Python JSON dump holds there (times, floats, nested models)."""
    from ctxd.store.sections import parts_of

    snapshot = Snapshot(
        header=SnapshotHeader(session="s", version=3, taken_at=now(), trigger="manual"),
        title="sections",
        observations=Observations(
            processes=ProcessesSection(items=[_process(pid, 3) for pid in (11, 12)])
        ),
    )
    dumped = snapshot.model_dump(mode="json")
    parts = parts_of(snapshot)
    observations = dumped.pop("observations")
    assert set(parts) == set(dumped) | {f"observations.{k}" for k in observations}
    for name, value in dumped.items():
        assert json.loads(parts[name]) == value
    for name, value in observations.items():
        assert json.loads(parts[f"observations.{name}"]) == value
    assert parts_of(snapshot) == parts  # the same content, the same bytes (content addresses)
