"""Where a stuck Python tree waits: py-spy stacks, once per stuck episode, folded across workers."""

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ctxd.collectors.proc import pystacks, sampler
from ctxd.models import (
    Observations,
    PortInfo,
    PortsSection,
    ProcessesSection,
    ProcessInfo,
    ProcessWatch,
    SessionIn,
    StuckStack,
)
from ctxd.settings import Settings
from ctxd.signals import derive as signals
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.database import Store

from .conftest import as_nobody, asleep, free_port, wait_until

WORKER = """
import sys, threading

def wait_for_peers():
    threading.Event().wait()  # blocked in one call, as ranks waiting on a collective

wait_for_peers()
"""
LAUNCHER = """
import subprocess, sys, time

def serve_when_ready(workers):
    while True:  # the port it was meant to open never opens
        time.sleep(0.2)

worker = sys.argv[sys.argv.index("--worker") + 1]
kids = [subprocess.Popen([sys.executable, worker, "--rank", str(r)]) for r in range(4)]
print(" ".join(str(k.pid) for k in kids), flush=True)
serve_when_ready(kids)
"""
INTERVAL = 0.2
STUCK_AFTER = 1.0


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], list[int], int, str]]:
    tag = f"ctxd-pystack-{uuid.uuid4().hex[:10]}"
    (tmp_path / "worker.py").write_text(WORKER)
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    port = free_port()
    argv = [sys.executable, str(tmp_path / "launcher.py"), "--worker", str(tmp_path / "worker.py")]
    proc = subprocess.Popen([*argv, "--port", str(port), "--tag", tag], stdout=subprocess.PIPE,
                            text=True, cwd=tmp_path)  # fmt: skip
    assert proc.stdout is not None
    workers = [int(pid) for pid in proc.stdout.readline().split()]
    try:
        # each where it stays: a stack read while a worker still starts folds three of four
        wait_until(lambda: all(asleep(pid, "futex") for pid in workers), "workers waiting")
        wait_until(lambda: asleep(proc.pid, "nanosleep"), "the launcher in its loop")
        yield proc, workers, port, tag
    finally:
        for pid in workers:
            os.kill(pid, 9)
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()


def test_a_stuck_tree_shows_one_python_stack_for_its_four_workers(
    tree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, workers, port, tag = tree
    # five py-spy runs at once on a busy machine may take longer than the production budget
    # (3 s): the fold is what is tested here, the budget below
    monkeypatch.setattr(pystacks, "take", functools.partial(pystacks.take, budget_s=120))
    store = Store(tmp_path / "ctxd.db")
    settings = Settings(data_dir=tmp_path / "data", sample_interval_s=INTERVAL,
                        stuck_after_s=STUCK_AFTER)  # fmt: skip
    snap = Snapshotter(settings, store)
    try:
        store.put_session("hang", SessionIn(title="four ranks that never serve"))
        store.add_watch("hang", ProcessWatch(match=tag, expect_ports=[port]), limit=100)
        first = snap.take("hang")
        assert not first.observations.processes.stuck_stacks  # not stuck yet: no py-spy
        keys = [(p.pid, p.started_at.timestamp()) for p in first.observations.processes.items]
        shared = sampler.shared(INTERVAL)

        def all_idle() -> bool:
            readings = [shared.reading(k) for k in keys]
            return all(r and r.idle_for_s and r.idle_for_s > STUCK_AFTER + 0.3 for r in readings)

        wait_until(all_idle, "all 5 processes idle")
        second = snap.take("hang", trigger="continue")
        markdown = store.get_markdown("hang", second.header.version)
        third = snap.take("hang", force=True)
    finally:
        snap.close()
        store.close()
    (dump_path := tmp_path / "continue.md").write_text(markdown)
    print(f"continue dump: {dump_path}")

    stacks = second.observations.processes.stuck_stacks
    (shared_stack,) = [s for s in stacks if len(s.pids) > 1]
    assert sorted(shared_stack.pids) == sorted(workers)
    assert any("wait_for_peers (worker.py:5)" in line for line in shared_stack.lines)
    # the job's own lines, read from its files (its comment left out); not threading's
    assert shared_stack.source["worker.py:5"] == "threading.Event().wait()"
    assert not any(at.startswith("threading.py") for at in shared_stack.source)
    shown = "  job's code: `worker.py:5` `threading.Event().wait()` \N{LEFTWARDS ARROW} `worker"
    assert shown in markdown
    assert any(s.pids == [proc.pid] and any("serve_when_ready" in x for x in s.lines)
               for s in stacks)  # fmt: skip
    assert "\N{MULTIPLICATION SIGN}4, pids " in markdown
    assert "wait_for_peers (worker.py:5)" in markdown
    assert markdown.index("Where the stuck tree of") < markdown.index("### ")
    if os.geteuid() == 0:  # /proc/PID/stack is readable with root rights only
        assert shared_stack.kernel and shared_stack.kernel[0].startswith("futex")
        assert "  kernel: `futex" in markdown
    (stuck,) = [s for s in second.signals if s.code == "stuck"]
    assert (
        "Python stack " in stuck.text
        and "wait_for_peers (worker.py:5) \N{MULTIPLICATION SIGN}4" in stuck.text
    )
    # Kept for the episode, not taken again on every snapshot.
    again = third.observations.processes.stuck_stacks
    assert [s.taken_at for s in again] == [s.taken_at for s in stacks]


def test_ptrace_refused_says_so(spawn, tmp_path: Path, open_dir: Path) -> None:
    (tmp_path / "worker.py").write_text(WORKER)
    if os.geteuid() != 0:
        pytest.skip("needs root to run py-spy as another user than the target's")
    target = spawn(sys.executable, str(tmp_path / "worker.py"))
    installed = pystacks.py_spy()
    assert installed is not None, "py-spy is a dependency: installed beside ctxd"
    # `nobody` runs it from a folder it may enter: the checkout (and its virtualenv) may sit
    # under a 0700 folder, which would make this "cannot run py-spy", not "ptrace refused"
    program = str(open_dir / "py-spy")
    shutil.copy(installed, program)
    os.chmod(program, 0o755)
    wait_until(lambda: asleep(target.pid, "futex"), "the target in its wait")
    # the refusal is what is tested, not py-spy's speed: a busy machine gets all the time
    # it needs (the production budget, 3 s, made this fail under load)
    taken = as_nobody(lambda: pystacks.take([target.pid], budget_s=120, program=program))
    assert taken[target.pid].lines == ()
    assert "not permitted: ptrace refused" in (taken[target.pid].note or "")


def test_py_spy_missing_says_so() -> None:
    (taken,) = pystacks.take([os.getpid()], program="/nonexistent/py-spy").values()
    assert taken.note == "no Python stack: py-spy is not installed beside ctxd nor on PATH"


def test_parse_keeps_thread_names_and_frames_without_ids() -> None:
    text = (
        "Process 19380: python worker.py --rank 3\n"
        "Python v3.11.7 (/usr/bin/python3.11)\n\n"
        'Thread 19380 (idle): "MainThread"\n'
        "    Condition.wait (threading.py:327)\n"
        "    wait_for_peers (worker.py:5)\n"
        'Thread 0x7F3A2B (active): "pt_nccl_watchdog"\n'
        "    run (watchdog.py:9)\n"
    )
    assert pystacks.parse(text) == [
        'thread "MainThread" (idle)',
        "  Condition.wait (threading.py:327)",
        "  wait_for_peers (worker.py:5)",
        'thread "pt_nccl_watchdog" (active)',
        "  run (watchdog.py:9)",
    ]


def test_the_stuck_signal_says_why_no_python_stack_was_taken() -> None:
    t0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    members = [ProcessInfo(watch_id=1, pid=10 + i, ppid=1, name="python", state="sleeping",
                           started_at=t0, age_s=900, root=i == 0, tree=10, idle_for_s=600)
               for i in range(3)]  # fmt: skip
    refused = "Python stack not permitted: ptrace refused (...)"
    current = Observations(
        processes=ProcessesSection(items=members, stuck_after_s=120, stuck_stacks=[
            StuckStack(tree=10, pids=[10, 11, 12], note=refused, taken_at=t0)]),
        ports=PortsSection(items=[PortInfo(host="127.0.0.1", port=1, listening=False,
                                           expected_by=1)]),
    )  # fmt: skip
    (stuck,) = signals.stuck_trees(current)
    assert stuck.text.endswith("; " + refused)


def test_a_py_spy_that_never_lets_go_costs_the_budget_not_forever(tmp_path: Path) -> None:
    # A child that outlives the killed py-spy keeps its pipe open, as py-spy stuck in D state
    # does: reading until EOF would wait the child's 30 s.
    # Whether take() waited is told by the child, not by a clock: it is still there when
    # take() returns, so take() did not wait for the pipe's end.
    program = tmp_path / "py-spy"
    holder = tmp_path / "holder.pid"
    program.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {holder}\nwait\n")
    program.chmod(0o755)
    try:
        (taken,) = pystacks.take([os.getpid()], budget_s=5, program=str(program)).values()
        assert taken.note is not None and "took longer than" in taken.note
        pid = int(holder.read_text())
        assert Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x00600\x00", "still holds it"
    finally:
        if holder.exists() and holder.read_text().strip():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(holder.read_text()), signal.SIGKILL)


def test_parse_json_keeps_the_text_lines_and_names_the_job_frames() -> None:
    dump = [{"thread_name": "MainThread", "active": False, "frames": [
        {"name": "all_reduce", "line": 2501,
         "filename": "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
         "short_filename": "torch/distributed/distributed_c10d.py"},
        {"name": "main", "filename": "serve_tp.py", "short_filename": "serve_tp.py", "line": 12},
        {"name": "<module>", "filename": "<string>", "short_filename": "<string>", "line": 1},
    ]}]  # fmt: skip
    lines, own = pystacks.parse_json(json.dumps(dump))
    assert lines == [
        'thread "MainThread" (idle)',
        "  all_reduce (torch/distributed/distributed_c10d.py:2501)",
        "  main (serve_tp.py:12)",
        "  <module> (<string>:1)",
    ]
    assert own == [("serve_tp.py:12", "serve_tp.py")]


def test_a_forked_childs_job_frames_stop_where_it_began() -> None:
    """A multiprocessing child's stack goes on past its `_bootstrap` into the frames it was
    forked in (its parent's `w.start()`): those are not where the child waits. (py-spy names
    the frame with its class, `BaseProcess._bootstrap`, as a real fork's dump shows.)"""
    lib = "/usr/lib/python3.11/multiprocessing"
    dump = [{"thread_name": "MainThread", "active": False, "frames": [
        {"name": "wait", "line": 11, "filename": "train.py", "short_filename": "train.py"},
        {"name": "BaseProcess._bootstrap", "line": 314, "filename": f"{lib}/process.py",
         "short_filename": "multiprocessing/process.py"},
        {"name": "_launch", "line": 71, "filename": f"{lib}/popen_fork.py",
         "short_filename": "multiprocessing/popen_fork.py"},
        {"name": "main", "line": 52, "filename": "train.py", "short_filename": "train.py"},
    ]}]  # fmt: skip
    lines, own = pystacks.parse_json(json.dumps(dump))
    assert lines[-2:] == [
        "  BaseProcess._bootstrap (multiprocessing/process.py:314)",
        "  (the frames it was forked in, its parent's, left out)",
    ]
    assert own == [("train.py:11", "train.py")]


def test_source_lines_are_read_confined_bounded_and_redacted(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "serve_tp.py").write_text(
        "import time\n"
        "token = 'ghp_" + "a" * 36 + "'\n"
        "    dist.all_reduce(t)  # every rank must arrive\n"
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.py").write_text("password = 1\n")
    (job / "linked.py").symlink_to(outside / "secret.py")
    own = [("serve_tp.py:3", "serve_tp.py"), ("serve_tp.py:2", str(job / "serve_tp.py")),
           ("serve_tp.py:9", "serve_tp.py"), ("gone.py:1", "gone.py"),
           ("secret.py:1", str(outside / "secret.py")), ("linked.py:1", "linked.py")]  # fmt: skip
    texts = pystacks.source_lines(own, str(job), [job], [16])
    # relative to the process's working directory, its comment left out
    assert texts["serve_tp.py:3"] == "dist.all_reduce(t)"
    assert "ghp_" not in texts["serve_tp.py:2"]  # redacted
    # past the end, missing, outside the roots (also through a link): left out
    assert set(texts) == {"serve_tp.py:3", "serve_tp.py:2"}
    # bounded: past the bytes read, a line is not shown; past the files allowed, none is read
    (job / "long.py").write_text("x = 1\n" * (pystacks.SOURCE_READ_MAX // 6 + 10) + "late()\n")
    late = pystacks.SOURCE_READ_MAX // 6 + 11
    assert pystacks.source_lines([(f"long.py:{late}", "long.py")], str(job), [job], [16]) == {}
    assert pystacks.source_lines([("serve_tp.py:3", "serve_tp.py")], str(job), [job], [0]) == {}
