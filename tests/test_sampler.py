"""The background sampler on real processes: CPU, idle time, exits and pid identity."""

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest
from ctxd.collectors.proc.sampler import Sampler, steady_growth
from ctxd.thresholds import IDLE_CPU_PERCENT

from tests.conftest import asleep, wait_until


@pytest.fixture
def sampler() -> Iterator[Sampler]:
    s = Sampler(0.1)
    try:
        yield s
    finally:
        s.stop()


def key(proc: subprocess.Popen) -> tuple[int, float]:
    return proc.pid, psutil.Process(proc.pid).create_time()


def wait_for(check, what: str) -> None:
    deadline = time.monotonic() + 20
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.05)


def test_busy_then_idle_process(spawn, sampler: Sampler, tmp_path) -> None:
    # Spins until told to stop, however little CPU a loaded machine lends it, then sleeps.
    stop = tmp_path / "stop"
    code = f"import os, time\nwhile not os.path.exists({str(stop)!r}): pass\ntime.sleep(60)"
    child = spawn(sys.executable, "-c", code)
    k = key(child)
    sampler.track(k)
    sampler.sample()

    def busy_now() -> bool:
        time.sleep(0.05)
        sampler.sample()
        r = sampler.reading(k)
        return bool(r and r.cpu_percent is not None and r.cpu_percent >= IDLE_CPU_PERCENT)

    wait_for(busy_now, "a busy reading")
    busy = sampler.reading(k)
    assert busy and busy.idle_for_s == 0, busy
    stop.touch()
    sampler.start()

    def idle_a_while() -> bool:
        r = sampler.reading(k)
        return bool(r and r.idle_for_s and r.idle_for_s > 0.5)

    wait_for(idle_a_while, "idle for half a second")
    reading = sampler.reading(k)
    assert reading and reading.cpu_percent is not None and reading.cpu_percent < 1
    assert reading.alive


def test_exit_is_remembered_with_last_seen_time(spawn, sampler: Sampler) -> None:
    child = spawn(sys.executable, "-c", "import time; time.sleep(60)")
    k = key(child)
    sampler.track(k)
    child.kill()
    child.wait()
    before = time.time()
    sampler.sample()
    reading = sampler.reading(k)
    assert reading and not reading.alive and 0 < reading.last_alive <= before


def test_a_reused_pid_is_not_tracked_as_the_old_process(spawn, sampler: Sampler) -> None:
    child = spawn(sys.executable, "-c", "import time; time.sleep(60)")
    pid, started = key(child)
    sampler.track((pid, started - 100))  # the same pid with another start time: another process
    assert sampler.reading((pid, started - 100)) is None
    assert sampler.tracked() == 0


def test_vanished_before_tracking(spawn, sampler: Sampler) -> None:
    child = spawn(sys.executable, "-c", "pass")
    k = (child.pid, time.time())
    child.wait()
    sampler.track(k)
    assert sampler.reading(k) is None


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        ([(i * 15, 100 + 10 * i) for i in range(6)], 10 / 15),
        ([(i, 100 + 10 * i) for i in range(6)], None),  # 5 s of growth: a start, not a leak
        ([(i, 100) for i in range(6)], None),
        ([(i, 100 + 10 * i) for i in range(5)], None),
        ([(0, 100), (1, 120), (2, 110), (3, 130), (4, 140), (5, 150)], None),
    ],
)
def test_steady_growth(points, expected) -> None:
    assert steady_growth(points) == expected


def test_a_sleeper_that_has_not_run_is_not_read_again(
    spawn, sampler: Sampler, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """One thread asleep: while the kernel's count of its runs stays the same, a sample reads
    that count alone; once it runs, the next sample reads it whole and sees the CPU it used."""
    from ctxd.collectors.proc import procfs

    wake = tmp_path / "wake"
    code = (
        "import os, signal, time\n"
        "def spin(*_):\n"
        "    t = time.process_time()\n"
        "    while time.process_time() - t < 0.3: pass\n"
        f"    open({str(wake)!r}, 'w').close()\n"
        "signal.signal(signal.SIGUSR1, spin)\n"
        "while True: time.sleep(60)\n"
    )
    child = spawn(sys.executable, "-c", code)
    wait_until(lambda: asleep(child.pid, "nanosleep"), "past its start-up: asleep")
    reads: list[int] = []
    real = procfs.stat_fields
    monkeypatch.setattr(procfs, "stat_fields", lambda pid, *a: reads.append(pid) or real(pid))
    k = key(child)
    sampler.track(k)
    sampler.sample()
    reads.clear()
    time.sleep(0.05)
    sampler.sample()
    quiet = sampler.reading(k)
    assert reads == [] and quiet and quiet.cpu_percent == 0.0 and quiet.alive
    child.send_signal(signal.SIGUSR1)
    wait_for(wake.exists, "the spin")
    sampler.sample()
    woke = sampler.reading(k)
    assert reads == [child.pid] and woke and woke.cpu_percent and woke.cpu_percent > 0


def test_a_clock_step_does_not_blind_the_sampler(spawn, sampler: Sampler, monkeypatch) -> None:
    """The kernel's boot time follows the wall clock: after a step, the process table keys a
    process by the new one while the sampler had cached the old; it reads it again, and the
    process is sampled (it was refused as "a reused pid", and no process was idle ever after)."""
    from ctxd.collectors.proc import sampler as sampler_module

    child = spawn(sys.executable, "-c", "import time; time.sleep(60)")
    pid, started = key(child)
    sampler_module._boot_time()  # cached before the step
    boot = psutil.boot_time()
    monkeypatch.setattr(psutil, "boot_time", lambda: boot + 2.0)  # the clock stepped 2 s on
    stepped = (pid, started + 2.0)
    sampler.track(stepped)
    reading = sampler.reading(stepped)
    assert reading is not None and reading.alive
    sampler_module._boot_time.cache_clear()  # not the stepped value for the tests after
