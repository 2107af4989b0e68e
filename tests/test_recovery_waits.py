"""Where a stuck tree waits: the kernel's view of each sleeping member, folded per point."""

import os
import platform
import random
import signal as signals_module
import subprocess
import sys
from datetime import UTC, datetime

from ctxd.collectors import CollectContext, processes
from ctxd.models import (
    LogInfo,
    LogsSection,
    Observations,
    PortInfo,
    PortsSection,
    ProcessesSection,
    ProcessInfo,
    ProcessWatch,
    Watch,
)
from ctxd.settings import Settings
from ctxd.signals import derive as signals

from tests.conftest import asleep, wait_until

BLOCKED = """
import subprocess, sys, time
code = "import threading; threading.Event().wait()"  # blocked in one call, like NCCL waiting
kids = [subprocess.Popen([sys.executable, "-c", code, "--rank", str(r)]) for r in range(8)]
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(60)
"""


def test_blocked_workers_show_one_kernel_waiting_point(spawn) -> None:
    tag = f"ctxd-wait-{random.randrange(10**9)}"
    root = spawn(sys.executable, "-c", BLOCKED, tag, stdout=subprocess.PIPE, text=True)
    kids = [int(pid) for pid in root.stdout.readline().split()]
    try:
        wait_until(lambda: all(asleep(pid, "futex") for pid in kids), "every worker in its wait")
        wait_until(lambda: asleep(root.pid, "nanosleep"), "the root in its sleep")
        watch = Watch(id=1, session="s", created_at=datetime.now(UTC),
                      spec=ProcessWatch(match=tag))  # fmt: skip
        section = processes.collect([watch], CollectContext(settings=Settings(cpu_sample_s=0)))
    finally:
        for pid in kids:
            os.kill(pid, signals_module.SIGKILL)
    rows = {p.pid: p for p in section.items}
    waits = {rows[pid].waiting for pid in kids}
    assert len(waits) == 1 and None not in waits  # one point for all eight
    if platform.machine() == "x86_64":
        assert waits.pop().endswith("(futex)")
    assert rows[root.pid].waiting is not None and "futex" not in rows[root.pid].waiting


def test_the_stuck_signal_folds_waiting_points() -> None:
    t0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

    def member(pid: int, waiting: str) -> ProcessInfo:
        return ProcessInfo(watch_id=1, pid=pid, ppid=10, name="python", state="sleeping",
                           cpu_percent=0.0, started_at=t0, age_s=900, root=pid == 10, tree=10,
                           idle_for_s=600, waiting=waiting)  # fmt: skip

    current = Observations(
        processes=ProcessesSection(
            items=[
                member(10, "hrtimer_nanosleep (clock_nanosleep)"),
                *(member(11 + r, "futex_do_wait (futex)") for r in range(8)),
            ],
            stuck_after_s=120,
        ),
        ports=PortsSection(
            items=[PortInfo(host="127.0.0.1", port=30000, listening=False, expected_by=1)]
        ),
        logs=LogsSection(
            items=[LogInfo(watch_id=2, path="/x.log", size=1, modified_at=t0, silent_for_s=600)]
        ),
    )
    (stuck,) = signals.stuck_trees(current)
    assert stuck.text.startswith("stuck: all 9 processes in tree 10 idle for 10 min of its 15 min")
    assert stuck.text.endswith(
        "waiting in futex_do_wait (futex) \N{MULTIPLICATION SIGN}8, "
        "hrtimer_nanosleep (clock_nanosleep)"
    )
