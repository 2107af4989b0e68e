"""The budget cut keeps its promise: however small the budget, the objective, Now, the running
attempt, the newest failure and the next steps survive (shortened, never dropped), and the
note says what was left out, in the order the steps cut it."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from ctxd.attempts.model import AttemptUpdate
from ctxd.models import JournalIn, SessionIn, Snapshot, SnapshotHeader, StuckStack
from ctxd.settings import Settings
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.database import Store
from ctxd.usecases import recovery

T0 = datetime.now(UTC) - timedelta(hours=2)
NEXT = "check NCCL_P2P_DISABLE on the second node"


@pytest.fixture
def snap(tmp_path: Path):
    settings = Settings(data_dir=tmp_path / "data")
    store = Store(settings.db_path)
    snapshotter = Snapshotter(settings, store)
    store.put_session("cut", SessionIn(objective="Find why the 8-GPU server dies at start"))
    for n in range(1, 41):  # forty failed attempts with long commands, then a running one
        flags = " ".join(f"--flag-{k} {n * k}" for k in range(30))
        log = f"/srv/logs/run{n}.log"
        ended = {"ended_at": T0 + timedelta(minutes=n, seconds=5), "error_log": log,
                 "error": f"RuntimeError: NCCL error in run {n}"}  # fmt: skip
        store.save_attempts("cut", [AttemptUpdate(**{
            "start_key": f"cmd:{n}", "watch_id": None, "pid": 1000 + n,
            "started_at": T0 + timedelta(minutes=n),
            "argv": ["python3", "serve.py", *flags.split()],
            "cwd": "/srv", "env": {}, "expected_ports": [30000], "logs": [log], "seen": 1,
            "command": f"python3 serve.py {flags}", **(ended if n < 40 else {}),
        })])  # fmt: skip
    for n in range(30):
        store.add_entry("cut", JournalIn(kind="finding", text=f"finding {n}: " + "x" * 300))
    store.add_entry("cut", JournalIn(kind="next", text=NEXT))
    yield snapshotter
    snapshotter.close()


@pytest.mark.parametrize("budget", [8000, 4000, 3000])
def test_what_matters_survives_any_budget(snap: Snapshotter, budget: int):
    snap.take("cut")
    dump = recovery.resume(snap, "cut", fresh=False, max_chars=budget)
    assert len(dump) <= budget
    assert "## Handover" in dump and "dies at start" in dump
    assert "## Now" in dump
    assert "**attempt 40**" in dump and "running for" in dump  # the running attempt
    assert "NCCL error in run 39" in dump  # the newest failure
    assert NEXT in dump  # the next steps
    assert "Kept under" in dump


def test_the_note_lists_the_cuts_in_the_order_the_steps_make_them(snap: Snapshotter):
    snap.take("cut")
    dump = recovery.resume(snap, "cut", fresh=False, max_chars=2500)
    note = dump.split("left out: ", 1)[1].split(" (all: ", 1)[0]
    order = ["the host", "findings, decisions and notes",
             "the newest failure's line"]  # fmt: skip
    positions = [note.find(step) for step in order]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), note
    # a step that found nothing to cut is not named: this session has no GPU or artifact
    assert "GPUs" not in note and "artifacts" not in note, note


def stuck_snapshot() -> Snapshot:
    """A stuck tree: its launcher idle in its library's loop (two threads, as py-spy listed
    torchrun's, its keep-alive timer first; its only own frame,
    torchrun's `<module> (torchrun:8)`, unread), its ranks in the job's own code; the kernel
    stack of each."""
    s = Snapshot(header=SnapshotHeader(session="s", version=1, taken_at=T0, trigger="t"))
    launcher = StuckStack(tree=10, pids=[10], kernel=["hrtimer_nanosleep", "common_nsleep"],
                          lines=['thread "KeepAlive"', "  Condition.wait (threading.py:331)",
                                 "  Event.wait (threading.py:629)",
                                 'thread "MainThread" (idle)', "  Agent._invoke_run (api.py:923)",
                                 "  Agent.run (api.py:745)"],
                          source={"torchrun:8": ""})  # fmt: skip
    ranks = StuckStack(tree=10, pids=[11, 12], kernel=["futex_do_wait", "__futex_wait"],
                       lines=['thread "MainThread" (idle)', "  all_reduce (c10d.py:3252)"],
                       source={"serve_tp.py:30": "dist.all_reduce(t)"})  # fmt: skip
    s.observations.processes.stuck_stacks = [launcher, ranks]
    return s


def test_a_launchers_library_stack_and_kernel_stacks_go_before_any_log_line():
    s = stuck_snapshot()
    recovery._launcher_frames(s, {})
    launcher, ranks = s.observations.processes.stuck_stacks
    assert launcher.lines == ['thread "MainThread" (idle)', "  Agent._invoke_run (api.py:923)"]
    assert len(ranks.lines) == 2 and ranks.kernel  # the ranks' stacks are not the launcher's
    recovery._kernel_stacks(s, {})
    assert ranks.kernel == [] and ranks.source  # the job's line stays
    assert launcher.kernel  # no job's line: its kernel stack is all it has
    recovery._stack_frames(s, {})
    assert ranks.lines == [] and len(launcher.lines) == 2  # the dump said "- pid 10", no more
    steps = recovery.SHRINK_STEPS
    first_logs = next(i for i, step in enumerate(steps) if "_logs_to" in step.__qualname__)
    assert steps.index(recovery._launcher_frames) < first_logs
    assert steps.index(recovery._kernel_stacks) < first_logs
    assert steps.index(recovery._stack_frames) < first_logs  # the job's own lines stay


def test_stacks_the_handovers_line_gives_go_before_any_log_line():
    """A running attempt whose ranks wait apart: the handover's line says where each group
    waits (the line and its function), so its stacks go; another tree's, whose place no line
    says, stay."""
    from ctxd.models import HistoryItem, ProcessInfo

    s = Snapshot(header=SnapshotHeader(session="s", version=1, taken_at=T0, trigger="t"))
    late = StuckStack(tree=10, pids=[14], lines=['thread "MainThread" (idle)',
                      "  load_shard (serve_tp.py:21)"],
                      source={"serve_tp.py:21": "open(path)"})  # fmt: skip
    waiting = StuckStack(tree=10, pids=[11, 12, 13], lines=['thread "MainThread" (idle)',
                         "  all_reduce (c10d.py:3252)", "  main (serve_tp.py:30)"],
                         source={"serve_tp.py:30": "dist.all_reduce(t)"})  # fmt: skip
    other = StuckStack(tree=20, pids=[21], lines=['thread "MainThread"', "  run (x.py:1)"])
    s.observations.processes.stuck_stacks = [late, waiting, other]
    s.observations.processes.items = [
        ProcessInfo(watch_id=1, pid=pid, ppid=10 if pid != 10 else 1, name="python3", tree=10,
                    state="sleeping", started_at=T0, age_s=60, root=pid == 10,
                    env={"RANK": str(pid - 11)} if pid != 10 else {})
        for pid in (10, 11, 12, 13, 14)
    ]  # fmt: skip
    s.narrative.history = [HistoryItem(source="launch", label="attempt 2", at=T0, pid=10, text="",
                                       status="running")]  # fmt: skip
    said = recovery._stacks_said(s, {})
    assert said == "the stuck stacks the handover's line gives"
    assert s.observations.processes.stuck_stacks == [other]
    steps = recovery.SHRINK_STEPS
    first_logs = next(i for i, step in enumerate(steps) if "_logs_to" in step.__qualname__)
    assert steps.index(recovery._stacks_said) < first_logs


def test_the_cut_leaves_the_snapshot_it_cuts_as_it_was(snap: Snapshotter):
    # the steps cut a copy: the version as stored, or kept in memory, is not shortened
    snapshot = snap.take("cut")
    before = snapshot.model_dump_json()
    dump = recovery.for_model(snap, snapshot, 3000)
    assert "Kept under 3000 characters" in dump and len(dump) <= 3000
    assert snapshot.model_dump_json() == before
    assert recovery.for_model(snap, snapshot, 3000) == dump


@pytest.mark.parametrize("budget", [None, 8000, 3000, 1500])
def test_a_cut_in_place_is_the_cut_of_a_copy(snap: Snapshotter, budget: int | None):
    # resume reads the version for the cut alone and lets the steps cut it, not a copy of it:
    # the same dump, the version as stored untouched
    version = snap.take("cut").header.version
    copied = recovery.for_model(snap, snap.store.get_snapshot("cut", version), budget)
    read = snap.store.get_snapshot("cut", version)
    assert recovery.for_model(snap, read, budget, in_place=True) == copied
    if budget is not None and budget < 8000:
        assert read.model_dump_json() != snap.store.get_snapshot("cut", version).model_dump_json()
    if budget is not None:  # resume's own cut, of the version it reads: the same text
        assert recovery.resume(snap, "cut", fresh=False, max_chars=budget) == copied
