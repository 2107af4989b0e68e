"""Where a stuck tree waits: the kernel's view of each sleeping member, folded per point."""

import os
import platform
import random
import signal as signals_module
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

from ctxd.collectors import CollectContext, processes
from ctxd.collectors.proc import procfs
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


def test_the_waiting_point_is_read_once_the_process_is_off_its_cpu(tmp_path: Path) -> None:
    """The kernel answers /proc/PID/syscall only once the process is off its CPU; its wchan,
    read before that, says "0" for one caught going to sleep. A FIFO plays the kernel: the
    syscall line comes only after wchan names the function the process now sleeps in."""
    pid = tmp_path / "4242"
    pid.mkdir()
    (pid / "wchan").write_text("0")  # still on its CPU
    os.mkfifo(pid / "syscall")

    def kernel() -> None:
        with open(pid / "syscall", "w") as syscall:  # waits for the reader, as the kernel does
            (pid / "wchan").write_text("hrtimer_nanosleep")  # it is off its CPU now
            syscall.write("230 0x1 0x0 0x7ffd 0x0 0x0 0x0 0x7ffd 0x7f00\n")

    thread = threading.Thread(target=kernel, daemon=True)  # never holds the run up
    thread.start()
    try:
        point = procfs.waiting_point(4242, proc=tmp_path)
    finally:
        thread.join(timeout=10)
    if platform.machine() == "x86_64":
        assert point == "hrtimer_nanosleep (clock_nanosleep)"
    else:
        assert point == "hrtimer_nanosleep (syscall 230)"


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
    assert stuck.text.startswith(
        "stuck: all 9 processes in tree 10 (its top and 8 below it) idle for 10 min of its 15 min"
    )
    # the launcher's own poll is said apart from where its eight workers wait
    assert stuck.text.endswith(
        "its top (pid 10) waiting in hrtimer_nanosleep (clock_nanosleep); "
        "the others waiting in futex_do_wait (futex) \N{MULTIPLICATION SIGN}8"
    )


X86_64 = platform.machine() == "x86_64"


def test_what_a_blocked_call_waits_on_is_named(tmp_path: Path) -> None:
    """A process blocked opening a FIFO (as on a stalled mount: open() never returns) is said
    to be opening that path, a relative one resolved in its folder; one blocked reading its
    stdin is said to wait on that pipe. Real processes; the kernel's own records."""
    if not X86_64:
        return  # the call numbers read are x86_64's
    os.mkfifo(tmp_path / "tp3.safetensors")
    opener = subprocess.Popen([sys.executable, "-c", "open('tp3.safetensors', 'rb')"], cwd=tmp_path)
    reader = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.buffer.read()"], stdin=subprocess.PIPE
    )
    try:
        wait_until(lambda: procfs.blocked_on(opener.pid) == str(tmp_path / "tp3.safetensors"),
                   "the path being opened")  # fmt: skip
        wait_until(lambda: (procfs.blocked_on(reader.pid) or "").startswith("pipe:["),
                   "the pipe being read")  # fmt: skip
    finally:
        for proc in (opener, reader):
            proc.kill()
            proc.wait()
