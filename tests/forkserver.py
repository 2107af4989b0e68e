"""`ctxd serve` for the tests, forked from one process that imported ctxd once.

Importing what `ctxd serve` runs costs most of a second, and the suite starts a server for some
two hundred tests. This process (`python -m tests.forkserver`) imports it once, then forks a
child per start: that child is `ctxd serve` as the command runs it (`ctxd.cli.main.main` with
the test's arguments, environment, folder and log), a real process on a real port, only
without the imports. `Forked` is the Popen handle the tests hold: the child is this process's,
so this process reaps it and tells its exit status.

Protocol: one JSON object per line each way, on the stdin and stdout it was started with.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

STARTED = "ready"


def main() -> int:
    from ctxd.http.footprint import lean_start

    lean_start()  # as `ctxd serve` does, before its imports
    import ctxd.http.app
    import ctxd.http.serve_loop  # noqa: F401
    import uvicorn  # noqa: F401
    from ctxd.cli.main import main as ctxd_main

    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # nothing of this process's own may reach the protocol
    if threading.active_count() != 1:  # a fork copies one thread: none may hold a lock
        _answer(answers, {"error": f"{threading.active_count()} threads after the imports"})
        return 1
    _answer(answers, {"ready": STARTED})
    children: set[int] = set()
    for line in requests:
        ask = json.loads(line)
        if ask["op"] == "start":
            pid = _fork(ask, ctxd_main)
            children.add(pid)
            _answer(answers, {"pid": pid})
        elif ask["op"] == "poll":
            code = _reap(ask["pid"])
            if code is not None:
                children.discard(ask["pid"])
            _answer(answers, {"returncode": code})
    for pid in children:  # the tests ended: what they left running ends with them
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return 0


def _answer(answers: IO[bytes], body: dict[str, Any]) -> None:
    answers.write(json.dumps(body).encode() + b"\n")
    answers.flush()


def _reap(pid: int) -> int | None:
    """The child's exit status as Popen gives it (-N: ended by signal N); None: it runs."""
    done, status = os.waitpid(pid, os.WNOHANG)
    return os.waitstatus_to_exitcode(status) if done else None


def _fork(ask: dict[str, Any], ctxd_main: Any) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        log = os.open(ask["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the protocol's pipes among them
        os.chdir(ask["cwd"])
        os.environ.clear()
        os.environ.update(ask["env"])
        sys.argv = [sys.executable, "-m", "ctxd", *ask["argv"]]
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        code = ctxd_main(ask["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class ForkServer:
    """The running fork server (one per test session), started on first use."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def start(self, argv: list[str], env: dict[str, str], log: Path) -> "Forked":
        pid = self._ask({"op": "start", "argv": argv, "env": env, "log": str(log),
                         "cwd": os.getcwd()})["pid"]  # fmt: skip
        return Forked(self, pid, argv)

    def poll(self, pid: int) -> int | None:
        code = self._ask({"op": "poll", "pid": pid})["returncode"]
        return None if code is None else int(code)

    def close(self) -> None:
        if self._process is not None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            self._process.wait(timeout=30)
            self._process = None

    def _ask(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            process = self._running()
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps(body).encode() + b"\n")
            process.stdin.flush()
            answer = json.loads(process.stdout.readline())
            assert isinstance(answer, dict)
            return answer

    def _running(self) -> subprocess.Popen:
        if self._process is None or self._process.poll() is not None:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.forkserver"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=Path(__file__).resolve().parent.parent,
            )
            assert process.stdout is not None
            ready = json.loads(process.stdout.readline() or b"{}")
            if ready.get("ready") != STARTED:
                process.kill()
                raise RuntimeError(f"the fork server did not start: {ready}")
            self._process = process
        return self._process


class Forked:
    """A forked `ctxd serve`, held as a Popen is: pid, poll, wait, signals."""

    def __init__(self, server: ForkServer, pid: int, argv: list[str]) -> None:
        self._server = server
        self.pid = pid
        self.args = argv
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.poll(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.01)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not reaped yet: the pid is still this child's
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
