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
from pathlib import Path

import httpx
import pytest
from ctxd.collectors.proc.pystacks import py_spy

from tests.conftest import Server, start_server, stop_server, wait_until

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

    def hook(event: str, **fields: object) -> dict:
        payload = {"hook_event_name": event, "session_id": "c", "cwd": str(workspace), **fields}
        answer = client.post("/api/hooks/claude", json={"payload": payload})
        answer.raise_for_status()
        return answer.json()

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
        return dump if "of 4 ranks wait in" in dump else None

    dump = wait_until(diagnosed, "a dump that compares the ranks", limit=60, every=1.0)
    stuck = next(line for line in dump.splitlines() if "**critical**: stuck:" in line)
    assert "3 of 4 ranks wait in Barrier.wait at launch.py:5 in all_reduce" in stuck
    assert f"rank 3 (pid {ranks['3']}) is elsewhere: load_shard at launch.py:" in stuck
