"""A hang diagnosed rank by rank, through what ctxd watches by itself: a launcher started with
`nohup … &` whose ranks (real processes, RANK in their environment) meet in a real barrier,
but for one rank that never arrives. The dump names the rank that is apart, with its stack."""

import contextlib
import os
import signal
import sys
import textwrap
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from ctxd.collectors.proc.pystacks import py_spy
from ctxd.models import ProcessInfo, StuckStack
from ctxd.signals import ranks

from tests.conftest import Server, claude_hooks, start_server, stop_server, wait_until

LAUNCH = textwrap.dedent(
    """
    import multiprocessing as mp, os, sys, time

    def all_reduce(barrier):
        barrier.wait()  # a collective: every rank must arrive

    def load_shard():
        time.sleep(600)  # this rank never gets to the collective

    def rank_main(rank, barrier):
        print(f"rank {rank} ready", flush=True)
        if rank == 3:
            load_shard()
        else:
            all_reduce(barrier)

    if __name__ == "__main__":
        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(4)
        ranks = []
        for rank in range(4):
            os.environ["RANK"] = str(rank)
            ranks.append(ctx.Process(target=rank_main, args=(rank, barrier)))
            ranks[-1].start()
        print("waiting for all ranks", flush=True)
        for p in ranks:
            p.join()
    """
)


@pytest.fixture
def tag() -> Iterator[str]:
    mark = f"ctxd-ranks-{uuid.uuid4().hex[:10]}"
    yield mark
    for pid in _tree_of(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _tree_of(mark: str) -> list[int]:
    """The launcher (tagged) and every process below it: this test's own, by descent."""
    parents: dict[int, int] = {}
    tagged = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            parents[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
            if mark.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                tagged.append(int(entry))
    found, frontier = set(tagged), list(tagged)
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in found:
                found.add(child)
                frontier.append(child)
    return sorted(found)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    env = {"CTXD_WATCH_ROOTS": f'["{tmp_path}"]', "CTXD_STUCK_AFTER_S": "1",
           "CTXD_SAMPLE_INTERVAL_S": "0.2"}  # fmt: skip
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        yield srv
    finally:
        stop_server(srv)


@pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed")
def test_the_rank_that_never_reaches_the_collective_is_named_with_its_stack(
    server: Server, tmp_path: Path, tag: str
):
    workspace = tmp_path / "tp4"
    workspace.mkdir()
    (workspace / "launch.py").write_text(LAUNCH)
    line = f"nohup {sys.executable} launch.py --tag {tag} > ranks.log 2>&1 &"
    os.system(f"cd {workspace} && {line}")  # as the agent's shell ran it
    client = httpx.Client(base_url=server.url, timeout=60)

    hook = claude_hooks(client, "c", workspace)

    hook("UserPromptSubmit", prompt="The 4-rank job hangs after start; find the rank at fault")
    hook("PostToolUse", tool_name="Bash", tool_use_id="toolu_1", tool_input={"command": line},
         tool_response={"stdout": "", "stderr": "", "interrupted": False})  # fmt: skip
    wait_until(lambda: len(_tree_of(tag)) >= 6, "the launcher, its 4 ranks and its tracker")
    ranks = {}
    for pid in _tree_of(tag):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        rank = next((v[5:].decode() for v in environ if v.startswith(b"RANK=")), None)
        if rank is not None:
            ranks[rank] = pid

    def diagnosed() -> str | None:
        dump = hook("UserPromptSubmit", prompt="continue").get("context") or ""
        return dump if "ranks 0\N{EN DASH}2 (pid by rank: " in dump else None

    dump = wait_until(diagnosed, "a dump that compares the ranks", limit=60, every=1.0)
    # the handover says where the ranks wait, and Now points there instead of saying it again
    now = next(line for line in dump.splitlines() if "**critical**: stuck:" in line)
    assert "where each waits: as the handover says" in now, now
    stuck = next(line for line in dump.splitlines() if "**Running now**" in line)
    Path(os.environ.get("CTXD_TEST_OUT", os.devnull)).write_text(stuck)
    together = ", ".join(f"{r}={ranks[r]}" for r in "012")  # each pid beside its rank
    # where the job's own code waits, with the text of its line and the library call it is in
    assert (
        f"ranks 0\N{EN DASH}2 (pid by rank: {together}) wait in `barrier.wait()` in all_reduce"
        " at launch.py:5 (threading Barrier.wait)" in stuck
    )
    assert f"rank 3 (pid {ranks['3']}) in `time.sleep(600)` in load_shard at launch.py:8" in stuck
    # the launcher waits for its ranks by design: said apart, not counted among them
    assert "; the launcher (pid " in stuck and ") in `p.join()` at launch.py:" in stuck
    assert "as it does while they run" not in stuck  # the job's own code: no launcher's loop


T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
# py-spy's frames as ctxd keeps them (innermost first): torch's decorator between the job's
# call and the collective it makes; torchrun (the root) polls its ranks.
TORCH_RANK = [
    'thread "MainThread" (idle)',
    "  wrapper (torch/distributed/c10d_logger.py:83)",
    "  all_reduce (torch/distributed/distributed_c10d.py:2501)",
    "  _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)",
    "  main (serve_tp.py:12)",
    "  <module> (serve_tp.py:20)",
    'thread "pt_nccl_watchdog" (idle)',
    "  run (torch/distributed/watchdog.py:9)",
]
LATE_RANK = ['thread "MainThread" (idle)', "  main (serve_tp.py:11)", "  <module> (serve_tp.py:20)"]
TORCHRUN = [
    'thread "MainThread" (idle)',
    "  _invoke_run (torch/distributed/elastic/agent/server/api.py:835)",
    "  run (torch/distributed/elastic/agent/server/api.py:680)",
    "  main (torch/distributed/run.py:879)",
    "  <module> (torchrun:8)",
]


def _member(pid: int, rank: str | None, root: bool = False, name: str = "python") -> ProcessInfo:
    return ProcessInfo(watch_id=1, pid=pid, ppid=10, name=name, state="sleeping", started_at=T0,
                       age_s=900, root=root, tree=10,
                       env={"RANK": rank} if rank else {})  # fmt: skip


def test_ranks_are_named_by_the_job_line_they_wait_at_with_its_text_and_library_call():
    members = [_member(10, None, root=True, name="torchrun")] + [
        _member(11 + r, str(r)) for r in range(4)
    ]
    source = {"serve_tp.py:12": "dist.all_reduce(t)", "serve_tp.py:20": "main()"}
    stacks = [
        StuckStack(tree=10, pids=[11, 12, 13], lines=TORCH_RANK, source=source),
        StuckStack(tree=10, pids=[14], lines=LATE_RANK,
                   source={"serve_tp.py:11": "time.sleep(3600)", "serve_tp.py:20": "main()"}),
        StuckStack(tree=10, pids=[10], lines=TORCHRUN, source={"torchrun:8": "sys.exit(main())"}),
    ]  # fmt: skip
    (line,) = ranks.apart(members, stacks, "10")
    assert line == (
        "ranks 0\N{EN DASH}2 (pid by rank: 0=11, 1=12, 2=13) wait in `dist.all_reduce(t)` in main"
        " at serve_tp.py:12 (torch.distributed all_reduce); rank 3 (pid 14) in `time.sleep(3600)`"
        " in main at serve_tp.py:11; the launcher (pid 10, torchrun) waits on its workers, as it"
        " does while they run, in _invoke_run at api.py:835 "
        "(torch.distributed)"  # its own loop: torchrun's entry point script is no job code
    )


def test_without_the_source_text_the_job_frame_is_named_and_not_a_decorator():
    stack = StuckStack(tree=10, pids=[11], lines=TORCH_RANK)
    assert ranks.where(stack) == "main at serve_tp.py:12 (torch.distributed all_reduce)"
    # a backtick in the line does not close the code span early
    stack.source = {"serve_tp.py:12": "run(`x`)"}
    assert ranks.where(stack) == (
        "``run(`x`)`` in main at serve_tp.py:12 (torch.distributed all_reduce)"
    )


def test_workers_without_ranks_and_all_ranks_in_one_place():
    members = [_member(10, None, root=True)] + [_member(11 + i, None) for i in range(3)]
    stacks = [
        StuckStack(tree=10, pids=[11, 12], lines=TORCH_RANK),
        StuckStack(tree=10, pids=[13], lines=LATE_RANK),
    ]
    (line,) = ranks.apart(members, stacks, "10")
    assert line.startswith("2 of its 3 workers (pids 11, 12) wait in main at serve_tp.py:12")
    assert "; pid 13 in main at serve_tp.py:11" in line
    together = [StuckStack(tree=10, pids=[11, 12, 13], lines=TORCH_RANK)]
    assert ranks.apart(members, together, "10") == []


def test_a_fifo_older_than_the_run_that_waits_to_open_it_says_so():
    """Rank 3 waits to open a FIFO no process writes: one last written 15 h before its tree's
    top started is older than the run (an earlier one left it, and nothing here will write
    it); one the launcher made as it started says nothing more."""
    members = [_member(10, None, root=True)] + [_member(11 + r, str(r)) for r in range(4)]
    for m in members[1:]:
        m.waiting = "hrtimer_nanosleep (clock_nanosleep)"
    rank3 = members[4]
    rank3.waiting, rank3.waiting_on = "wait_for_partner (openat)", "/w/.cache/tp3.safetensors"
    stacks = [
        StuckStack(tree=10, pids=[11, 12, 13], lines=TORCH_RANK),
        StuckStack(tree=10, pids=[14], lines=LATE_RANK),
    ]
    rank3.waiting_on_written_at = T0 - timedelta(hours=15, minutes=3)
    (line,) = ranks.apart(members, stacks, "10")
    assert (
        "rank 3 (pid 14) in main at serve_tp.py:11, opening /w/.cache/tp3.safetensors, a FIFO no"
        " process writes (the open waits for a writer); the FIFO is older than this run: unchanged"
        " since 2026-11-29 20:57:00 UTC, 15 h 3 min before pid 10 (the top of its tree) started"
        in line
    ), line
    rank3.waiting_on_written_at = T0 + timedelta(seconds=1)  # made by its launcher
    (line,) = ranks.apart(members, stacks, "10")
    assert line.endswith("a FIFO no process writes (the open waits for a writer)"), line


def test_the_time_a_fifo_waited_on_was_last_written_is_read_from_a_real_process(tmp_path):
    """A real process blocked opening a FIFO nothing writes: ctxd reads where it waits and
    what it opens from /proc, and the FIFO's last write from the file; a regular file, or
    another wait, is not stat'ed."""
    import subprocess
    import time

    from ctxd.collectors.proc import procfs

    fifo = tmp_path / "tp3.safetensors"
    os.mkfifo(fifo)
    made = time.time() - 15 * 3600
    os.utime(fifo, (made, made))
    opener = subprocess.Popen([sys.executable, "-c", f"open({str(fifo)!r}, 'rb')"])
    try:

        def blocked() -> tuple[str | None, str | None] | None:
            waiting, on = procfs.waiting(opener.pid)
            fifo_open = waiting is not None and ("fifo" in waiting or "partner" in waiting)
            return (waiting, on) if fifo_open and on == str(fifo) else None

        waiting, on = wait_until(blocked, "the opener blocked in the FIFO's open")
        assert on == str(fifo), (waiting, on)
        written = procfs.fifo_written_at(waiting, on)
        assert written is not None and abs(written.timestamp() - made) < 1, written
        assert procfs.fifo_written_at("hrtimer_nanosleep (clock_nanosleep)", on) is None
        plain = tmp_path / "plain"
        plain.write_text("x")
        assert procfs.fifo_written_at(waiting, str(plain)) is None
    finally:
        opener.kill()
        opener.wait()
