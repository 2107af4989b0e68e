"""The process table read incrementally: only what changed since the last listing is read."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ctxd.collectors.proc import procselect, proctree

from tests.conftest import wait_until


@pytest.fixture
def counted_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids the table reads from /proc, in order; turns of the refresh are kept out."""
    reads: list[int] = []
    real = proctree._read

    def counted(pid: int, now_ticks: float = float("inf")) -> proctree.Entry | None:
        reads.append(pid)
        return real(pid, now_ticks)

    monkeypatch.setattr(proctree, "_read", counted)
    monkeypatch.setattr(proctree, "REFRESH_GAP_S", float("inf"))
    return reads


def test_a_table_nothing_changed_in_reads_no_process(counted_reads: list[int]) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(proctree.SETTLED_S + 0.1)
        first = proctree.scan()
        assert sleeper.pid in first
        proctree.scan()  # settles whatever was still young in the first
        counted_reads.clear()
        again = proctree.scan()
        assert sleeper.pid not in counted_reads
        assert again[sleeper.pid].text == "sleep 60"
    finally:
        sleeper.kill()
        sleeper.wait()
    after = proctree.scan()
    assert sleeper.pid not in after  # gone from the listing: gone from the table


def test_a_new_process_is_read_and_a_reparented_child_read_again(
    tmp_path: Path, counted_reads: list[int]
) -> None:
    """When a parent dies its children get a new parent: the table reads them again, though
    their own /proc entries did not change."""
    pidfile = tmp_path / "child.pid"
    code = (
        "import subprocess, time; "
        "c = subprocess.Popen(['sleep', '60']); "
        f"open({str(pidfile)!r}, 'w').write(str(c.pid)); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code])
    wait_until(lambda: pidfile.exists() and pidfile.read_text(), "the child's pid")
    child = int(pidfile.read_text())
    try:
        wait_until(lambda: proctree.scan()[child].text == "sleep 60", "the child's exec")
        time.sleep(proctree.SETTLED_S + 0.1)
        proctree.scan()  # settled: not read again for being young
        assert proctree.scan()[child].ppid == parent.pid
        parent.kill()
        parent.wait()
        counted_reads.clear()
        table = proctree.scan()
        assert parent.pid not in table
        assert child in counted_reads and table[child].ppid != parent.pid
        assert child in proctree.children_map(table)[table[child].ppid]
    finally:
        parent.kill()
        parent.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_a_pattern_follows_the_table_as_processes_come_and_go() -> None:
    """A pattern's matches are kept per table and brought up to date from what changed: a
    process started later joins them, one that ended leaves them."""
    from ctxd.models import ProcessWatch

    tag = f"ctxd-proctree-{os.getpid()}-{time.monotonic_ns()}"
    spec = ProcessWatch(match=tag)
    code = "import time; time.sleep(60)"

    def matched() -> list[int]:
        table = proctree.scan()
        return procselect._matches(spec, table, frozenset())

    assert matched() == []
    first = subprocess.Popen([sys.executable, "-c", code, tag])
    try:
        wait_until(lambda: matched() == [first.pid], "the first matched")
        time.sleep(proctree.SETTLED_S + 0.1)
        assert matched() == [first.pid] == matched()  # the same table: the same answer
        second = subprocess.Popen([sys.executable, "-c", code, tag])
        try:
            wait_until(lambda: matched() == sorted([first.pid, second.pid]), "both matched")
        finally:
            second.kill()
            second.wait()
        assert matched() == [first.pid]
    finally:
        first.kill()
        first.wait()
    assert matched() == []
