"""A watched process that has not run since its last row keeps what only it can change."""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ctxd.collectors import CollectContext, processes
from ctxd.collectors.proc import procfs, procrows
from ctxd.models import ProcessWatch, Watch
from ctxd.settings import Settings

from tests.conftest import asleep, settled, wait_until

# One thread, asleep; on SIGUSR1 it moves to another directory and opens a file there.
MOVER = """
import os, signal, sys, time
def move(*_):
    os.chdir(sys.argv[1])
    move.kept = open("opened-after", "w")
signal.signal(signal.SIGUSR1, move)
print("ready", flush=True)
while True:
    time.sleep(60)
"""


# A background sampler that samples once an hour, where this test starts the shared one: it
# has no CPU figure of its own during a test.
QUIET_SAMPLER = Settings(cpu_sample_s=0, sample_interval_s=3600)


@pytest.fixture
def mover(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    tag = f"ctxd-unmoved-{uuid.uuid4().hex[:12]}"
    argv = [sys.executable, "-c", MOVER, str(tmp_path), tag]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        wait_until(lambda: asleep(proc.pid, "nanosleep"), "the mover asleep")
        yield proc, tag
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()  # type: ignore[union-attr]


@pytest.fixture
def counted_cmdlines(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids whose command line or stat line a row read. Rows are read on the caller's
    thread; the shared background sampler, which an earlier test may have started with a
    short interval, reads stat lines on its own and is not counted."""
    reads: list[int] = []
    caller = threading.get_ident()
    for name in ("cmdline", "stat_fields"):
        real = getattr(procfs, name)

        def counted(pid: int, *args: object, real: Any = real) -> Any:
            if threading.get_ident() == caller:
                reads.append(pid)
            return real(pid)

        monkeypatch.setattr(procfs, name, counted)
    return reads


def collect(tag: str, ctx: CollectContext) -> list:
    spec = ProcessWatch(match=tag)
    watch = Watch(id=1, session="t", created_at=datetime.now(UTC), spec=spec)
    return processes.collect([watch], ctx).items


def test_an_unmoved_process_is_not_read_again_and_a_moved_one_is(
    mover: tuple[subprocess.Popen[str], str], tmp_path: Path, counted_cmdlines: list[int]
) -> None:
    proc, tag = mover
    ctx = CollectContext(settings=QUIET_SAMPLER, memory={})
    first = collect(tag, ctx)
    assert [r.pid for r in first] == [proc.pid] and first[0].cwd != str(tmp_path)
    assert first[0].waiting and counted_cmdlines.count(proc.pid) >= 2
    read_first = len(counted_cmdlines)
    kept = collect(tag, ctx)
    assert len(counted_cmdlines) == read_first  # asleep since: nothing it could change read
    assert (kept[0].cwd, kept[0].open_files, kept[0].argv, kept[0].waiting) == (
        first[0].cwd,
        first[0].open_files,
        first[0].argv,
        first[0].waiting,
    )
    os.kill(proc.pid, signal.SIGUSR1)
    wait_until(lambda: (tmp_path / "opened-after").exists(), "the mover to move")
    wait_until(lambda: asleep(proc.pid, "nanosleep"), "the mover back asleep")
    moved = collect(tag, ctx)
    assert moved[0].cwd == str(tmp_path) and moved[0].open_files == first[0].open_files + 1
    assert len(counted_cmdlines) == read_first + 2  # its stat line and command line


def test_what_is_kept_is_read_again_after_a_while(
    mover: tuple[subprocess.Popen[str], str],
    counted_cmdlines: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, tag = mover
    monkeypatch.setattr(procrows, "KEEP_UNMOVED_S", 0.0)
    ctx = CollectContext(settings=QUIET_SAMPLER, memory={})
    collect(tag, ctx)
    read_first = len(counted_cmdlines)
    collect(tag, ctx)
    assert len(counted_cmdlines) == read_first + 2


def test_cpu_between_two_rows_comes_from_the_stat_line_before_the_sampler_has_it() -> None:
    """Until the background sampler has two samples of a process, its CPU figure is the
    time it ran between two rows, from the stat line each row reads (psutil's arithmetic)."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    spec = ProcessWatch(pid=busy.pid)
    watch = Watch(id=1, session="t", created_at=datetime.now(UTC), spec=spec)
    # a sampler that samples once an hour has no figure for it during this test
    ctx = CollectContext(settings=QUIET_SAMPLER, memory={})
    try:
        processes.collect([watch], ctx)

        def busy_cpu() -> float | None:  # a shared machine may lend it little CPU for a while
            cpu = processes.collect([watch], ctx).items[0].cpu_percent
            return cpu if cpu is not None and cpu > 10 else None

        cpu = wait_until(busy_cpu, "a busy figure between two rows", every=0.2)
        assert cpu <= 100 * (os.cpu_count() or 1)
    finally:
        busy.kill()
        busy.wait(timeout=10)


def test_an_unmoved_process_shows_its_new_parent_when_the_old_one_dies(tmp_path: Path) -> None:
    """Re-parenting does not make a process run: its parent comes from the process table."""
    tag = f"{60 + int(uuid.uuid4().int % 10**6) / 10**7:.7f}"  # `sleep` sums its arguments
    pidfile = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time; "
        f"c = subprocess.Popen(['sleep', {tag!r}]); "
        f"open({str(pidfile)!r}, 'w').write(str(c.pid)); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code])
    wait_until(lambda: pidfile.exists() and pidfile.read_text(), "the child's pid")
    child = int(pidfile.read_text())
    try:
        wait_until(lambda: asleep(child, "nanosleep") and settled(child), "the child settled")
        ctx = CollectContext(settings=Settings(cpu_sample_s=0), memory={})
        pattern = "^sleep " + tag.replace(".", r"\.")
        assert [r.ppid for r in collect(pattern, ctx)] == [parent.pid]
        assert [r.ppid for r in collect(pattern, ctx)] == [parent.pid]
        assert ctx.memory[processes.NAME].unmoved  # kept: it has not run
        parent.kill()
        parent.wait()
        rows = collect(pattern, ctx)
        assert [r.pid for r in rows] == [child] and rows[0].ppid != parent.pid
    finally:
        parent.kill()
        parent.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_a_probe_row_names_its_tree_and_keeps_the_process_sampled(tmp_path: Path) -> None:
    """A probe's row comes from the process table alone; it still says which tree it belongs
    to (events compare trees) and keeps the sampler following the process (idle history)."""
    from ctxd.collectors.proc import proctree, sampler

    tag = f"ctxd-glimpse-{uuid.uuid4().hex[:12]}"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", tag])
    try:
        wait_until(lambda: asleep(proc.pid, "nanosleep") and settled(proc.pid), "it settled")
        proctree.shared(0.0)  # a probe may use a table read within the last second
        settings = Settings(cpu_sample_s=0, sample_interval_s=1800)  # a sampler of its own
        probe = CollectContext(settings=settings, probe=True, memory={})
        rows = collect(tag, probe)
        assert [(r.pid, r.tree, r.root) for r in rows] == [(proc.pid, proc.pid, True)]
        assert rows[0].state == "unknown"  # glimpsed, not read
        key = (proc.pid, rows[0].started_at.timestamp())
        assert sampler.shared(1800).reading(key) is not None
    finally:
        proc.kill()
        proc.wait(timeout=10)
