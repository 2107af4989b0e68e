"""The process collector's own /proc reads give what psutil gives, value for value."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from ctxd.collectors.proc import procfs
from ctxd.collectors.proc.procstatic import user_name
from psutil import _pslinux

from tests.conftest import asleep, wait_until


@pytest.fixture
def odd_sleeper(tmp_path: Path):
    """A sleeper whose name holds a space and parentheses, as a stat line can."""
    program = tmp_path / "a) b (c"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", program)
    proc = subprocess.Popen([str(program), "60"])
    wait_until(lambda: asleep(proc.pid, "nanosleep"), "the sleeper asleep")
    yield proc
    proc.kill()
    proc.wait()


def _psutil_view(pid: int) -> tuple:
    p = psutil.Process(pid)
    with p.oneshot():
        mem = p.memory_info()
        return p.name(), p.status(), p.ppid(), p.num_threads(), mem.rss, mem.vms, p.cmdline()


def _own_view(pid: int) -> tuple:
    name, letter, ppid, threads, *_ = procfs.stat_fields(pid)
    rss, vms = procfs.memory(pid)
    status = _pslinux.PROC_STATUSES.get(letter, "?")
    return name, status, ppid, threads, rss, vms, procfs.cmdline(pid)


def test_a_sleepers_fields_match_psutils(odd_sleeper) -> None:
    assert _own_view(odd_sleeper.pid) == _psutil_view(odd_sleeper.pid)
    assert procfs.stat_fields(odd_sleeper.pid)[0] == "a) b (c"


def test_a_threaded_python_matches_psutil() -> None:
    code = (
        "import threading, time\n"
        "for _ in range(3): threading.Thread(target=time.sleep, args=(60,)).start()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])

    def settled() -> bool:  # its three threads started, and every thread of it asleep
        tasks = list(Path(f"/proc/{proc.pid}/task").iterdir())
        return len(tasks) == 4 and all(asleep(int(t.name)) for t in tasks)

    try:
        wait_until(settled, "three sleeping threads")
        own, theirs = _own_view(proc.pid), _psutil_view(proc.pid)
        assert own[3] == theirs[3] == 4
        assert own[:4] == theirs[:4] and own[5:] == theirs[5:]
    finally:
        proc.kill()
        proc.wait()


def test_a_retitled_command_line_is_split_on_spaces(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cmdline").write_bytes(b"python\x00-c\x00x y\x00")
    assert procfs.cmdline(7, proc=tmp_path) == ["python", "-c", "x y"]
    (tmp_path / "7" / "cmdline").write_bytes(b"postgres: writer process")
    assert procfs.cmdline(7, proc=tmp_path) == ["postgres:", "writer", "process"]
    (tmp_path / "7" / "cmdline").write_bytes(b"nginx: master process\x00")
    assert procfs.cmdline(7, proc=tmp_path) == ["nginx:", "master", "process"]
    (tmp_path / "7" / "cmdline").write_bytes(b"")
    assert procfs.cmdline(7, proc=tmp_path) == []


def test_a_gone_process_raises() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(OSError):
        procfs.stat_fields(proc.pid)


def test_user_names_are_psutils() -> None:
    assert user_name(os.getuid()) == psutil.Process().username()
    assert user_name(2**31 - 7) == str(2**31 - 7)  # no such account: its number


def test_cpu_start_and_io_figures_match_psutils(tmp_path: Path) -> None:
    """What the sampler reads itself: CPU time, start time and bytes read and written."""
    code = (
        "import os, sys, time\n"
        "t = time.process_time()\n"
        "while time.process_time() - t < 0.2: pass\n"
        "with open(sys.argv[1], 'wb') as f: f.write(os.urandom(1 << 20)); os.fsync(f.fileno())\n"
        "print('done', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "out")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "done\n"
        stat, theirs = procfs.stat_fields(proc.pid), psutil.Process(proc.pid)
        times, io = theirs.cpu_times(), theirs.io_counters()
        ticks = os.sysconf("SC_CLK_TCK")
        assert stat.cpu_ticks / ticks == pytest.approx(times.user + times.system, abs=1e-9)
        assert stat.cpu_ticks / ticks >= 0.1
        started = stat.start_ticks / ticks + psutil.boot_time()
        assert started == pytest.approx(theirs.create_time(), abs=1e-6)
        assert procfs.io_bytes(proc.pid) == (io.read_bytes, io.write_bytes)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]


def test_a_start_shown_is_not_before_the_clock_reading_that_preceded_it():
    """psutil's create_time adds start ticks to /proc/stat's boot time, which is whole
    seconds: a process reads up to a second older than it is, so an attempt launched after a
    prompt read 'launched 06:04:18' beside the prompt's 06:04:19. What a dump shows adds the
    fraction (keys keep psutil's time)."""
    import time
    from datetime import UTC, datetime

    before = time.time()
    proc = subprocess.Popen(["sleep", "5"])
    try:
        created = psutil.Process(proc.pid).create_time()
        shown = procfs.true_start(datetime.fromtimestamp(created, UTC)).timestamp()
        assert 0.0 <= procfs.boot_skew() < 1.0
        assert shown == pytest.approx(created + procfs.boot_skew())
        # a clock tick (1/CLK_TCK) and the fork's own time apart, never a second
        assert before - 2 / procfs.CLOCK_TICKS <= shown <= time.time() + 0.01
        assert (
            procfs.true_start(datetime.fromtimestamp(created, UTC), "node2").timestamp() == created
        )
    finally:
        proc.kill()
        proc.wait()
