"""A peer's observations merged into this host's: pure, no server; each item keeps its host."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxd.models import ProcessesSection


def test_a_peers_gpus_join_this_hosts_with_its_name() -> None:
    from ctxd.models import GpuInfo, GpusSection, Observations
    from ctxd.peers.merge import merge_answer

    here = Observations()  # a host without GPUs: its section says so until a peer has some
    there = Observations(
        gpus=GpusSection(
            source="nvml", driver_version="570.1", items=[GpuInfo(index=0, name="H200")]
        )
    )

    merge_answer(here, "node2", there)

    (gpu,) = here.gpus.items
    assert (gpu.name, gpu.host, here.gpus.source) == ("node2:H200", "node2", "nvml")
    assert here.gpus.driver_version == "570.1"


def _tree(pid: int, idle: float | None, alike: int = 0) -> "ProcessesSection":
    """A tree rooted at `pid` with `alike` idle workers, each idle for `idle` seconds."""
    from datetime import UTC, datetime

    from ctxd.models import ProcessesSection, ProcessInfo, StuckStack, WorkerGroup

    def row(n: int, root: bool) -> ProcessInfo:
        return ProcessInfo(
            watch_id=1, pid=n, ppid=1, name="python", state="sleeping", cpu_percent=0.0,
            started_at=datetime(2026, 1, 1, tzinfo=UTC), age_s=600, root=root, tree=pid,
            idle_for_s=idle, argv=["python", "train.py", f"--rank={n - pid}"],
        )  # fmt: skip

    workers = [row(pid + 1 + n, False) for n in range(alike)]
    return ProcessesSection(
        items=[row(pid, True), *workers],
        matched=1 + alike,
        workers=[
            WorkerGroup(tree=pid, count=alike, command="python train.py --rank={1..2}",
                        pids=[p.pid for p in workers], ranks="1-2")
        ] if alike else [],
        stuck_stacks=[StuckStack(tree=pid, pids=[pid], lines=["Thread 1", "  wait (train.py:9)"])],
    )  # fmt: skip


def test_a_peers_trees_stacks_and_workers_stay_its_own() -> None:
    from datetime import UTC, datetime

    from ctxd.models import LogInfo, LogsSection, Observations, Snapshot, SnapshotHeader
    from ctxd.peers.merge import merge_answer
    from ctxd.render.markdown import render_dump
    from ctxd.signals import derive as signals

    silent = LogInfo(
        watch_id=1, path="/x.log", size=1, modified_at=datetime(2026, 1, 1, tzinfo=UTC),
        silent_for_s=600,
    )  # fmt: skip
    # the same pids on both hosts: here a busy tree, there a stuck one with two alike workers
    here = Observations(processes=_tree(100, None), logs=LogsSection(items=[silent]))
    here.processes.stuck_stacks = []
    there = Observations(processes=_tree(100, 600.0, alike=2))

    merge_answer(here, "node2", there)

    (stack,) = here.processes.stuck_stacks
    assert (stack.host, stack.tree_ref) == ("node2", "node2:100")
    (group,) = here.processes.workers
    assert group.host == "node2" and group.refs == ["node2:101", "node2:102"]
    (stuck,) = signals.stuck_trees(here)  # this host's busy tree 100 does not hide node2's
    assert stuck.subject == "node2:100"
    assert stuck.text.startswith(
        "stuck: all 3 processes in tree node2:100 (its top and 2 below it) idle for 10 min"
    )
    assert "Python stack wait (train.py:9)" in stuck.text
    header = SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="t")
    markdown = render_dump(Snapshot(header=header, observations=here))
    assert "| 2 alike workers of node2:100, ranks 1-2: pids 101, 102 |" in markdown
    assert "Where the stuck tree of node2:100 waits" in markdown
    assert markdown.count("Workers:") == 1  # under node2's root only, not under this host's


def test_a_peers_featured_rows_hide_none_of_this_hosts() -> None:
    from ctxd.models import Observations
    from ctxd.peers.merge import merge_answer

    here = Observations(processes=_tree(100, None, alike=2))  # few rows: all shown, none featured
    there = Observations(processes=_tree(200, None, alike=2))
    there.processes.featured = [200]  # many rows there: only the telling ones

    merge_answer(here, "node2", there)

    assert here.processes.featured == [100, 101, 102, 200]
