"""`ctxd serve` on uvicorn with a quiet idle loop: one wakeup a second, a signal heard at once,
and a port already taken still a start-up failure (exit status 3)."""

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import start_server, wait_until


def _main_thread_wakeups(pid: int) -> int:
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


def test_an_idle_server_wakes_about_once_a_second_and_stops_on_a_signal(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log")

    def quiet_second() -> bool:  # start-up work done: a second of next to no wakeups
        before = _main_thread_wakeups(srv.process.pid)
        time.sleep(1)  # a window to count in, not a wait for something to happen
        return _main_thread_wakeups(srv.process.pid) - before <= 3

    try:
        wait_until(quiet_second, "the idle loop", limit=60, every=0)
        before = _main_thread_wakeups(srv.process.pid)
        time.sleep(4)  # the window counted
        woke = _main_thread_wakeups(srv.process.pid) - before
        assert woke < 20, f"{woke} wakeups of the event loop in 4 s (uvicorn's own tick: 40)"
        srv.process.send_signal(signal.SIGTERM)
        srv.process.wait(timeout=10)
        assert "Finished server process" in (tmp_path / "ctxd.log").read_text()
    finally:
        if srv.process.poll() is None:
            srv.process.kill()
            srv.process.wait()


def test_a_port_already_taken_is_a_start_up_failure(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = subprocess.run(
            [sys.executable, "-m", "ctxd", "serve", "--port", port,
             "--data-dir", str(tmp_path / "data")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "address already in use" in done.stderr.lower()
