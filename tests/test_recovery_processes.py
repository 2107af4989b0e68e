"""The Processes section a resuming agent reads: alike workers folded, empty columns gone,
details that follow the table's selection (real processes, the real renderer)."""

import os
import random
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from ctxd.collectors import CollectContext, processes
from ctxd.models import (
    Observations,
    ProcessesSection,
    ProcessWatch,
    Snapshot,
    SnapshotHeader,
    Watch,
)
from ctxd.render.markdown import render_dump
from ctxd.settings import Settings

from tests.conftest import asleep, wait_until

LAUNCHER = """
import subprocess, sys, time
code = "import time; time.sleep(60)"
kids = [subprocess.Popen([sys.executable, "-c", code, "--rank", str(r)]) for r in range(8)]
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(60)
"""


def section_of(match: str) -> ProcessesSection:
    watch = Watch(id=1, session="s", created_at=datetime.now(UTC), spec=ProcessWatch(match=match))
    ctx = CollectContext(settings=Settings(cpu_sample_s=0))
    processes.collect([watch], ctx)  # the first CPU reading is a baseline
    time.sleep(0.2)
    return processes.collect([watch], ctx)


def processes_part(section: ProcessesSection) -> str:
    header = SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="t")
    markdown = render_dump(Snapshot(header=header, observations=Observations(processes=section)))
    return markdown.split("## Processes\n", 1)[1].split("\n## ", 1)[0]


def start_launcher(spawn, tag: str) -> tuple[subprocess.Popen, list[int]]:
    root = spawn(sys.executable, "-c", LAUNCHER, tag, stdout=subprocess.PIPE, text=True)
    kids = [int(pid) for pid in root.stdout.readline().split()]
    settled = [root.pid, *kids]  # each asleep in time.sleep: alike, not some still starting
    wait_until(lambda: all(asleep(pid, "nanosleep") for pid in settled), "all asleep")
    return root, kids


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2]


def test_alike_workers_are_one_row_with_their_ranks(spawn) -> None:
    tag = f"ctxd-fold-{random.randrange(10**9)}"
    root, kids = start_launcher(spawn, tag)
    try:
        part = processes_part(section_of(tag))
    finally:
        for pid in kids:
            os.kill(pid, signal.SIGKILL)
    table = [line for line in part.splitlines() if line.startswith("| ")]
    assert len(table) == 4  # header, rule, the launcher, one row for its eight workers
    assert table[2].startswith(f"| {root.pid} (top of its tree) |")
    pids = ", ".join(str(p) for p in kids)
    assert table[3].startswith(f"| 8 alike workers of {root.pid}, ranks 0-7: pids {pids} |")
    assert " each |" in table[3]
    assert "(root)" not in part and "virt" not in part


def test_a_worker_that_differs_keeps_its_own_row(spawn) -> None:
    tag = f"ctxd-differ-{random.randrange(10**9)}"
    _, kids = start_launcher(spawn, tag)
    os.kill(kids[3], signal.SIGSTOP)
    try:
        wait_until(lambda: _state(kids[3]) == "T", "the worker stopped")
        part = processes_part(section_of(tag))
    finally:
        for pid in kids:
            os.kill(pid, signal.SIGKILL)
    # the seven alike fold into one row; the stopped one keeps a row of its own
    assert "7 alike workers" in part and f"| {kids[3]} " in part, part
    assert sum(1 for line in part.splitlines() if line.startswith("| ")) == 2 + 1 + 1 + 1


def test_empty_columns_drop_out(spawn) -> None:
    tag = f"ctxd-cols-{random.randrange(10**9)}"
    spawn(sys.executable, "-c", "import time; time.sleep(60)", tag)
    header = processes_part(section_of(tag)).split("\n| ---")[0].splitlines()[-1]
    assert header.startswith("| pid | ppid | user | name | state | CPU % |")
    assert "virt" not in header and "listens" not in header and "I/O" not in header


def test_details_follow_the_tables_selection_and_say_how_many_are_hidden(spawn) -> None:
    tag = f"{60 + random.randrange(10**6) / 10**7:.7f}"  # `sleep` sums its arguments
    for _ in range(40):
        spawn("sleep", tag)
    section = section_of(tag.replace(".", r"\."))
    part = processes_part(section)
    assert section.matched == 40 and 0 < len(section.featured) < 40
    details = [line for line in part.splitlines() if line.startswith("### ")]
    assert len(details) == len(section.featured)
    hidden = 40 - len(section.featured)
    assert f"{hidden} hidden here and in the details below" in part
    assert f"{hidden} more matched and are hidden" in part
    counts = re.search(r"40 described: (\d+) running, (\d+) sleeping, 0 zombie; (\d+)% CPU", part)
    assert counts and int(counts[1]) + int(counts[2]) == 40 and int(counts[3]) < 40
