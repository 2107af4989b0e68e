"""A budget cut renders one snapshot again after each step; the sections a step left as they
were are reused, never a section whose values changed: each render of the cut is the text a
fresh render of the same snapshot gives."""

import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pydantic_core
import pytest
from ctxd.models import (
    ArtifactInfo,
    Change,
    CommandInfo,
    GpuInfo,
    GpuProcess,
    HistoryItem,
    HostInfo,
    JournalEntry,
    JournalIn,
    LastRead,
    LogInfo,
    LogWatch,
    Observations,
    PortWatch,
    ProcessInfo,
    ProcessWatch,
    SessionIn,
    Signal,
    Snapshot,
    SnapshotHeader,
    StuckStack,
)
from ctxd.render import reuse
from ctxd.settings import Settings
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.database import Store
from ctxd.usecases import recovery
from pydantic import BaseModel

from tests.conftest import wait_until

SERVER = """
import socket, sys, time
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()
with open(sys.argv[1], "a") as log:
    print(f"listening on {sock.getsockname()[1]}", file=log, flush=True)
    for n in range(40):
        print(f"[rank {n % 4}] step {n}: loss {1 / (n + 1):.4f}", file=log, flush=True)
time.sleep(600)
"""


@pytest.fixture
def snap(tmp_path: Path):
    settings = Settings(data_dir=tmp_path / "data", cpu_sample_s=0, watch_roots=[tmp_path])
    store = Store(settings.db_path)
    snapshotter = Snapshotter(settings, store)
    yield snapshotter
    snapshotter.close()
    store.close()


def test_each_render_of_a_cut_is_a_fresh_render_of_its_snapshot(snap: Snapshotter, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for n in range(1, 7):  # runs that died, each with its error and a tail of lines
        lines = [f"[run {n}] step {k}" for k in range(30)]
        text = "\n".join([*lines, f"RuntimeError: NCCL error in run {n} (code {50 + n})", ""])
        (logs / f"run{n}.log").write_text(text)
    tag = f"reuse-{tmp_path.name}"
    script = tmp_path / f"{tag}.py"
    script.write_text(SERVER)
    live_log = logs / "live.log"
    server = subprocess.Popen([sys.executable, str(script), str(live_log)])
    try:
        wait_until(lambda: live_log.exists() and "step 39" in live_log.read_text(), "its log")
        port = int(live_log.read_text().split()[2])
        with socket.create_connection(("127.0.0.1", port)):
            pass  # it answers
        store, sid = snap.store, "cut"
        store.put_session(sid, SessionIn(objective="Find why the server dies at start"))
        limit = snap.settings.limits.max_watches_per_session
        store.add_watch(sid, ProcessWatch(match=tag, expect_ports=[port]), limit)
        store.add_watch(sid, PortWatch(port=port), limit)
        for path in sorted(logs.iterdir()):
            store.add_watch(sid, LogWatch(path=str(path)), limit)
        for n in range(8):
            store.add_entry(sid, JournalIn(kind="finding", text=f"finding {n}: " + "x" * 300))
        snapshot = snap.take(sid, force=True)

        copy = snapshot.model_copy(deep=True)
        left: dict[str, str] = {}
        reused = reuse.Sections()
        first = snap.render(copy, for_model=True, reused=reused)
        assert first == snap.render(copy, for_model=True)
        reused.keep()
        kept = len(reused.texts)
        assert kept >= 3  # the narrative, the processes, the logs, ...
        snap.render(copy, for_model=True, left_out={"host": "the host"}, reused=reused)
        assert len(reused.texts) == kept  # a section left out: every other one reused
        changed = 0
        reused.follow(copy)
        for step in recovery.SHRINK_STEPS:  # every step, each on what the ones before left
            before = copy.model_dump_json(), dict(left)
            whole = reuse.parts(copy)
            step(copy, left)
            # the parts a step does not name as its own are as they were; taken again, the
            # ones it names give the snapshot's parts as a fresh look gives them
            after = reuse.parts(copy)
            touched = recovery.TOUCHES[step]
            mine = {(id(_holder(copy, path)), path.rsplit(".", 1)[-1]) for path in touched}
            assert {k for k in after if after[k] != whole[k]} <= mine, step
            assert reused.follow(copy, touched) == tuple(after.values()), step
            cut = snap.render(copy, for_model=True, left_out=left, reused=reused)
            assert cut == snap.render(copy, for_model=True, left_out=left), step
            changed += (copy.model_dump_json(), left) != before
        assert changed >= 5  # the steps cut something: logs, findings, rows, ...
        assert len(reused.texts) > kept  # and the sections they cut were rendered again
    finally:
        server.kill()
        server.wait()


def _holder(snapshot: BaseModel, path: str) -> BaseModel:
    """The model that holds the field `path` names ("observations.logs": the observations)."""
    for name in path.split(".")[:-1]:
        snapshot = getattr(snapshot, name)
    return snapshot


def test_a_section_is_reused_only_for_the_values_it_reads():
    # what each partial reads, as its template says: the logs read the logs of `o`, the
    # version's time and whether the dump is the model's; the host only `o.host`
    assert reuse._READS["_logs.md.j2"] == {
        "for_model": None, "h": ("taken_at",), "o": ("logs",),
    }  # fmt: skip
    assert reuse._READS["_host.md.j2"] == {"o": ("host",)}


def test_a_section_is_keyed_by_the_content_of_what_it_reads_or_not_reused():
    host = HostInfo(hostname="gpu-node-1", load_1m=0.5)
    same = HostInfo(hostname="gpu-node-1", load_1m=0.5)
    key = reuse._key("_host.md.j2", {"o": Observations(host=host)})
    assert key is not None and key == reuse._key("_host.md.j2", {"o": Observations(host=same)})
    other = Observations(host=HostInfo(hostname="gpu-node-2", load_1m=0.5))
    assert reuse._key("_host.md.j2", {"o": other}) != key
    # what its JSON would not tell (an object of no known shape): no key, rendered each time
    assert reuse._key("_host.md.j2", {"o": object()}) is None


def test_a_section_keyed_by_the_parts_followed_changes_with_them():
    # a render after `follow` keys the host by the JSON `follow` took of `o.host`: the same
    # as a key of the same content, another once the host changed and was followed again
    snapshot = Snapshot(
        header=SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="manual"),
        observations=Observations(host=HostInfo(hostname="gpu-node-1", load_1m=0.5)),
    )
    sections = reuse.Sections()
    sections.follow(snapshot)
    values = {"o": snapshot.observations}
    followed = reuse._key("_host.md.j2", values, sections._parts)
    assert followed is not None and followed != reuse._key("_host.md.j2", values)
    same = Observations(host=HostInfo(hostname="gpu-node-1", load_1m=0.5))
    assert followed[1:] == (pydantic_core.to_json(same.host),)
    snapshot.observations.host.hostname = "gpu-node-2"
    stale = reuse._key("_host.md.j2", values, sections._parts)
    assert stale == followed  # not followed yet: what `follow` is for
    before = sections.follow(snapshot, ["observations.host"])
    assert before == tuple(reuse.parts(snapshot).values())
    assert reuse._key("_host.md.j2", values, sections._parts) != followed


def everything_to_cut() -> Snapshot:
    """A snapshot on which every step of the budget cut finds something to cut: idle GPUs,
    an ended attempt's log, long tails, many rows, findings, long cells, stuck stacks (one
    tree's the handover's line gives)."""
    at = datetime.now(UTC)
    s = Snapshot(header=SnapshotHeader(session="s", version=2, taken_at=at, trigger="t"))
    o, n = s.observations, s.narrative
    o.gpus.items = [GpuInfo(index=i, processes=[GpuProcess(pid=900 + i)]) for i in range(2)]
    lines = [f"step {k}" for k in range(20)]
    o.logs.items = [
        LogInfo(watch_id=k, path=f"/w/run{k}.log", size=9, modified_at=at, silent_for_s=0,
                lines=lines, writer_pid=100 if k == 0 else None)
        for k in range(6)
    ]  # fmt: skip
    o.processes.items = [
        ProcessInfo(watch_id=1, pid=100 + k, ppid=1 if k == 0 else 100, name="serve",
                    state="S", started_at=at, age_s=5, root=k == 0, tree=100,
                    env={"NCCL_ALGO": "Ring"}, relaunch=["python3", "serve.py"])
        for k in range(12)
    ]  # fmt: skip
    o.processes.items += [
        ProcessInfo(watch_id=2, pid=300 + k, ppid=1, name="other", state="S", started_at=at,
                    age_s=5, cpu_percent=k)
        for k in range(12)
    ]  # fmt: skip
    o.processes.stuck_stacks = [
        StuckStack(tree=100, pids=[100], kernel=["hrtimer_nanosleep"],
                   lines=['thread "A"', "  wait (threading.py:1)", 'thread "B"', "  run (a.py:2)"],
                   source={"torchrun:8": ""}),
        StuckStack(tree=100, pids=[101], kernel=["futex_wait"], lines=["  all_reduce (c.py:3)"],
                   source={"serve.py:11": "dist.all_reduce(t)"}),
    ]  # fmt: skip
    # a second running attempt whose two ranks wait apart: the handover's line says where
    o.processes.items += [
        ProcessInfo(watch_id=5, pid=200 + k, ppid=1 if k == 0 else 200, name="tp", state="S",
                    started_at=at, age_s=5, root=k == 0, tree=200,
                    env={"RANK": str(k - 1)} if k else {})
        for k in range(3)
    ]  # fmt: skip
    o.processes.stuck_stacks += [
        StuckStack(tree=200, pids=[201], lines=["  all_reduce (c.py:3)", "  main (tp.py:9)"],
                   source={"tp.py:9": "dist.all_reduce(t)"}),
        StuckStack(tree=200, pids=[202], lines=["  load (tp.py:4)"], source={"tp.py:4": "open(p)"}),
    ]  # fmt: skip
    o.artifacts.items = [
        ArtifactInfo(watch_id=3, path=f"/w/out{k}", type="file", size=1, modified_at=at,
                     fingerprint=str(k))
        for k in range(5)
    ]  # fmt: skip
    o.commands.items = [CommandInfo(watch_id=4, label=f"c{k}", argv=["true"]) for k in range(5)]
    long = "x" * 300
    s.signals = [
        Signal(severity="warning", code="gpu_held_idle", text="GPU 0 held idle"),
        Signal(severity="critical", code="log_error", text=long),
    ]
    s.changes = [Change(kind="log", text="a new error")]
    n.recent_commands = [f"tail -n {k} logs/run0.log" for k in range(8)]
    n.last_read = LastRead(command="grep -n -A11 'def main' serve.py", at=at,
                           lines=[f"{k}:    step({k})" for k in range(12)])  # fmt: skip
    n.read_before = LastRead(command="curl -s 127.0.0.1:8000/health", at=at, lines=["ok"])
    n.findings = [
        JournalEntry(id=k, session="s", kind="finding", text=long, created_at=at) for k in range(8)
    ]
    n.history = [
        HistoryItem(at=at, source="launch", text="attempt 1", status="ended", logs=["/w/run1.log"],
                    command="python3 serve.py --run 1", changed=long, error=long, outcome=long),
        HistoryItem(at=at, source="launch", text="attempt 2", status="running", pid=100,
                    logs=["/w/run0.log"], command="python3 serve.py --run 2"),
        HistoryItem(at=at, source="launch", text="attempt 3", status="running", pid=200,
                    command="torchrun --nproc-per-node 2 tp.py"),
    ]  # fmt: skip
    return s


def test_each_cut_step_changes_only_the_fields_it_names():
    # what `follow` takes again after a step is what the step names (`recovery.TOUCHES`): a
    # field it changed and did not name would read as unchanged, and the cut would differ
    s = everything_to_cut()
    left: dict[str, str] = {}
    for step in recovery.SHRINK_STEPS:
        before = reuse.parts(s)
        step(s, left)
        after = reuse.parts(s)
        changed = {k for k in after if after[k] != before[k]}
        named = {(id(_holder(s, path)), path.rsplit(".", 1)[-1]) for path in recovery.TOUCHES[step]}
        assert changed <= named, step
        assert changed or not named, step  # each step cuts something here
