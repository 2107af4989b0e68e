"""The case ctxd was made for, with real processes: a launcher, 8 workers that load, then hang."""

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from ctxd.collectors.proc import sampler
from ctxd.fmt import human_duration
from ctxd.models import LogWatch, ProcessWatch, SessionIn
from ctxd.settings import Settings
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.database import Store

from .conftest import free_port, wait_until

# Burns CPU briefly ("loads weights"), then sleeps without ever serving.
WORKER = "import time\nend = time.time() + 0.3\nwhile time.time() < end: pass\ntime.sleep(300)\n"
# Starts 8 ranks, reaps any that die, opens its port only when told to (SIGUSR1).
LAUNCHER = f"""
import os, signal, socket, subprocess, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
def reap(*_):
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
signal.signal(signal.SIGCHLD, reap)
opened = []
signal.signal(signal.SIGUSR1, lambda *_: opened.append(True))
workers = [subprocess.Popen([sys.executable, "-c", {WORKER!r}, "--rank", str(r),
                            "--port", str(port)]) for r in range(8)]
print(" ".join(str(w.pid) for w in workers), flush=True)
sock = None
while True:
    time.sleep(0.05)
    if opened and sock is None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()
"""
INTERVAL = 0.2
STUCK_AFTER = 1.0


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], list[int], int, str]]:
    tag = f"ctxd-launch-{uuid.uuid4().hex[:12]}"
    port = free_port()
    argv = [sys.executable, "-c", LAUNCHER, "--tp", "8", "--disable-cuda-graph"]
    argv += ["--log-level", "debug", "--port", str(port), "--tag", tag]
    env = {**os.environ, "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        assert proc.stdout is not None
        workers = [int(pid) for pid in proc.stdout.readline().split()]
        yield proc, workers, port, tag
    finally:
        for pid in workers:
            try:
                worker = psutil.Process(pid)
                if worker.ppid() == proc.pid:  # not a stranger that reused the pid
                    worker.kill()
            except psutil.Error:
                pass
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()  # type: ignore[union-attr]


@pytest.fixture
def snapshotter(tmp_path: Path) -> Iterator[Snapshotter]:
    store = Store(tmp_path / "ctxd.db")
    settings = Settings(
        data_dir=tmp_path / "data", sample_interval_s=INTERVAL, stuck_after_s=STUCK_AFTER
    )
    snap = Snapshotter(settings, store)
    try:
        yield snap
    finally:
        snap.close()
        store.close()


def test_launcher_with_8_idle_workers_is_stuck_then_loses_one_then_listens(
    launcher, snapshotter: Snapshotter, tmp_path: Path
) -> None:
    proc, workers, port, tag = launcher
    store = snapshotter.store
    log = tmp_path / "server.log"
    log.write_text("Load weight end. elapsed=22.1 s\n")
    store.put_session("hang", SessionIn(title="stuck server"))
    store.add_watch("hang", ProcessWatch(match=tag, expect_ports=[port]), limit=100)
    store.add_watch("hang", LogWatch(path=str(log)), limit=100)

    first = snapshotter.take("hang")
    assert {p.pid for p in first.observations.processes.items} == {proc.pid, *workers}

    # Wait for the background sampler (not a timer in the test) to see every member idle.
    keys = [(p.pid, p.started_at.timestamp()) for p in first.observations.processes.items]
    shared = sampler.shared(INTERVAL)

    def all_idle() -> bool:
        readings = [shared.reading(k) for k in keys]
        return all(r and r.idle_for_s and r.idle_for_s > STUCK_AFTER + 0.5 for r in readings)

    wait_until(all_idle, "all 9 processes idle")
    wait_until(lambda: time.time() - log.stat().st_mtime > STUCK_AFTER + 0.5, "log silent")

    second = snapshotter.take("hang")
    markdown = store.get_markdown("hang", second.header.version)
    rows = {p.pid: p for p in second.observations.processes.items}
    assert set(rows) == {proc.pid, *workers}
    assert all(p.idle_for_s and p.idle_for_s > STUCK_AFTER for p in rows.values())
    stuck = [s for s in second.signals if s.code == "stuck"]
    assert len(stuck) == 1, second.signals
    assert f"all 9 processes in tree {proc.pid} (its top and 8 below it) idle for " in stuck[0].text
    # the span from the least idle member's to the most idle's, each as its row shows it
    low = human_duration(min(p.idle_for_s or 0 for p in rows.values()))
    assert f"idle for {low.split()[0]}" in stuck[0].text, (low, stuck[0].text)
    assert f"port {port} expected, not listening" in stuck[0].text
    assert f"log {log} silent" in stuck[0].text and "Load weight end" in stuck[0].text
    assert second.signals[0].code == "stuck"
    assert f"| {proc.pid} (top of its tree)" in markdown
    table = markdown.split("## Processes")[1][:3000]
    assert f"8 alike workers of {proc.pid}, ranks 0-7: pids " in markdown, table
    assert all(str(pid) in markdown for pid in workers)
    assert "--tp 8" in markdown and "--disable-cuda-graph" in markdown
    assert "--log-level debug" in markdown
    assert "NCCL_DEBUG=INFO" in markdown and "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in markdown
    assert (
        f"8 \N{MULTIPLICATION SIGN} `{Path(sys.executable).name} -c" in markdown  # as typed
        and "--rank {0..7}" in markdown
    ), table
    assert f"127.0.0.1:{port} | **no**" in markdown
    assert (
        markdown.index("## Now") < markdown.index("stuck: all 9") < markdown.index("## Processes")
    )

    victim = workers[3]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: not psutil.pid_exists(victim), "the launcher reaps the killed worker")
    third = snapshotter.take("hang")
    assert victim not in {p.pid for p in third.observations.processes.items}
    (gone,) = third.observations.processes.exited
    assert gone.pid == victim and gone.last_seen_at is not None
    exits = [s for s in third.signals if s.code == "process_exited"]
    assert [s.subject.split("@")[0] for s in exits] == [str(victim)]
    assert f"process {victim} (python" in exits[0].text and "last seen alive" in exits[0].text
    changes = store.get_markdown("hang", third.header.version).split("## Changes since")[1]
    assert f"exited: {victim}" in changes

    proc.send_signal(signal.SIGUSR1)

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    wait_until(listening, "the launcher opens its port")
    fourth = snapshotter.take("hang")
    (row,) = [p for p in fourth.observations.ports.items if p.port == port]
    assert row.listening and row.owner_pid == proc.pid
    opened = [s for s in fourth.signals if s.code == "port_opened"]
    assert opened and f"127.0.0.1:{port} now listening (pid {proc.pid})" in opened[0].text
    launcher_row = next(p for p in fourth.observations.processes.items if p.pid == proc.pid)
    assert launcher_row.listening == [port]
    # Still idle with a silent log it may be, but its port is no longer evidence of it.
    still = [s.text for s in fourth.signals if s.code == "stuck"]
    assert not [t for t in still if f"port {port} expected" in t], still
