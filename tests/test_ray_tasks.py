"""Long Ray tasks as the dump says them, from the state API's rows: a task on another node
(which no test here can run: Ray stays on loopback) says how its stack is taken there, and
alike tasks fold into one line per node and place, the odd ones first."""

import time

from ctxd.collectors import CollectContext
from ctxd.collectors.ray import _long_tasks
from ctxd.models import RayTask
from ctxd.render.ray_tasks import lines
from ctxd.settings import Settings

FAR = "203.0.113.7"  # TEST-NET-3: never an address of this machine


def _row(name: str, pid: int, node: str, running_s: float) -> dict:
    """A task as /api/v0/tasks?detail=1 lists it (the fields the collector reads)."""
    started = int((time.time() - running_s) * 1000)
    return {"name": name, "state": "RUNNING", "worker_pid": pid, "node_id": node,
            "start_time_ms": started, "func_or_class_name": name}  # fmt: skip


def test_a_long_task_on_another_node_says_how_to_take_its_stack_there() -> None:
    ctx = CollectContext(settings=Settings())
    rows = [_row("Worker.generate", 4100 + n, "far-node", 600) for n in range(2)]
    rows.append(_row("quick", 4200, "far-node", 1))  # not long: not listed
    tasks = _long_tasks(rows, {"far-node": FAR}, ctx)
    assert [(t.name, t.pid, t.node_ip) for t in tasks] == [
        ("Worker.generate", 4100, FAR),
        ("Worker.generate", 4101, FAR),
    ]
    assert all(t.stack == [] for t in tasks)
    # a node the state API does not list: no address to say, and no note naming none
    (unknown,) = _long_tasks([_row("Worker.generate", 4300, "gone", 600)], {}, ctx)
    assert (unknown.node_ip, unknown.stack_note) == (None, None), unknown
    ((line, stack),) = lines(tasks)
    assert line == (
        f"{FAR}: tasks `Worker.generate` (pids 4100, 4101) RUNNING for 10 min: stacks on node "
        f"{FAR} are taken there: `py-spy dump --pid PID` (ctxd takes them on this machine only)"
    ), line
    assert stack == []


def test_alike_tasks_fold_and_the_one_apart_comes_first() -> None:
    """Three workers wait in the same line of the job's code, one in another: two lines,
    the one apart first, each with its stack once."""
    waiting = ['thread "MainThread" (idle)', "  Shard.pull (serve.py:40)", "  main (serve.py:9)"]
    apart = ['thread "MainThread" (idle)', "  Shard.load (serve.py:22)", "  main (serve.py:9)"]
    source = {"serve.py:40": "batch = queue.get()", "serve.py:22": "torch.load(path)"}
    tasks = [
        RayTask(
            name="Shard.pull",
            state="RUNNING",
            pid=10 + n,
            running_s=300,
            node_ip="127.0.0.1",
            stack=waiting,
            source=source,
        )
        for n in range(3)
    ]
    tasks.append(
        RayTask(
            name="Shard.load",
            state="RUNNING",
            pid=20,
            running_s=320,
            node_ip="127.0.0.1",
            stack=apart,
            source=source,
            waits_in="do_sys_openat2 (openat)",
            blocked_on="/data/s3.bin",
        )
    )
    said = lines(tasks)  # fmt: skip
    assert [line for line, _ in said] == [
        "127.0.0.1: task `Shard.load` (pid 20) RUNNING for 5 min, waits in `torch.load(path)` "
        "at serve.py:22; in the kernel, do_sys_openat2 (openat) on `/data/s3.bin`",
        "127.0.0.1: tasks `Shard.pull` (pids 10, 11, 12) RUNNING for 5 min, wait in "
        "`batch = queue.get()` at serve.py:40",
    ], said
    assert [stack for _, stack in said] == [apart, waiting]
