"""Idle cost by number of sessions (issue 43): dormant sessions are not probed.

Run: .venv/bin/python -m bench.bench_dormant [--sessions 10 100 1000] [--live 10] [--seconds 60]

Each session watches a process, a log, an artifact folder and a port, as the issue measured.
`--live` of them (at most) watch a sleeping process that is alive; the others one that has
ended, so that, idle past CTXD_DORMANT_AFTER_S (20 s here), they go dormant. After a settle,
the server's CPU over `--seconds` (% of one core) and its RSS; then, in live sessions, the
time from a log's error line, a process's exit and a port's opening to the event version
that tells it (each in its own session, so no debounce of one delays another).
"""

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from bench.scenario import free_port, start_server
from bench.timing import cpu_percent

DORMANT_AFTER_S = 20
SETTLE_S = 40


def event_after(client: httpx.Client, sid: str, word: str, cause) -> float:
    """Seconds from `cause()` to the first version of `sid` whose trigger names `word`."""
    before = {v["version"] for v in client.get(f"/api/sessions/{sid}/snapshots").json()}
    started = time.monotonic()
    cause()
    while time.monotonic() - started < 30:
        for v in client.get(f"/api/sessions/{sid}/snapshots").json():
            if v["version"] not in before and word in v["trigger"]:
                return time.monotonic() - started
        time.sleep(0.02)
    return float("nan")


def end(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()  # reaped, as its parent would: a zombie is still in the process table


def latencies(client: httpx.Client, root: Path, sessions: int, live: list, ports: list) -> dict:
    """Log error, exit and port opening, each told in its own live session (s0, s1, s2)."""
    log = root / f"s{sessions}-0" / "run.log"

    def error() -> None:
        with log.open("a") as out:
            out.write("RuntimeError: CUDA error: an illegal memory access was encountered\n")

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen() -> None:
        listener.bind(("127.0.0.1", ports[2]))
        listener.listen()

    try:
        return {
            "log error": event_after(client, "s0", "log-error", error),
            "process exit": event_after(client, "s1", "process-exit", lambda: end(live[1])),
            "port open": event_after(client, "s2", "port-open", listen),
        }
    finally:
        listener.close()


def measure(sessions: int, live: int, seconds: float, root: Path) -> tuple[float, float, int, dict]:
    """(server CPU % of a core, its RSS in MiB, how many sessions were live, event latencies)."""
    sleepers: list[subprocess.Popen] = []
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with tempfile.TemporaryDirectory() as data:
        env = {"CTXD_DORMANT_AFTER_S": str(DORMANT_AFTER_S), "CTXD_WATCH_ROOTS": f'["{root}"]'}
        server = start_server(Path(data), env)
        try:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                ports = []
                for n in range(sessions):
                    work = root / f"s{sessions}-{n}"
                    (work / "dist").mkdir(parents=True)
                    (work / "run.log").write_text("started\n")
                    pid = gone.pid
                    if n < live:
                        sleepers.append(subprocess.Popen(["sleep", "3600"]))
                        pid = sleepers[-1].pid
                    sid = f"s{n}"
                    ports.append(free_port())
                    client.put(f"/api/sessions/{sid}", json={"cwd": str(work)})
                    for spec in (
                        {"kind": "process", "pid": pid},
                        {"kind": "log", "path": str(work / "run.log")},
                        {"kind": "artifact", "path": str(work / "dist")},
                        {"kind": "port", "port": ports[-1]},
                    ):
                        client.post(f"/api/sessions/{sid}/watches", json=spec)
                time.sleep(SETTLE_S)
                cpu = cpu_percent(server.process.pid, seconds)
                rss = psutil.Process(server.process.pid).memory_info().rss
                told = latencies(client, root, sessions, sleepers, ports) if live >= 3 else {}
            return cpu, rss / 2**20, min(live, sessions), told
        finally:
            server.stop()
            for sleeper in sleepers:
                sleeper.kill()
                sleeper.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--live", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    print("idle cost by sessions (dormant ones are not probed)")
    for sessions in args.sessions:
        with tempfile.TemporaryDirectory() as root:
            cpu, rss, live, told = measure(sessions, args.live, args.seconds, Path(root))
        print(f"  {sessions:5d} sessions ({live} live, {sessions - live} dormant)"
              f"   {cpu:5.2f} % of a core   RSS {rss:6.1f} MiB")  # fmt: skip
        for what, seconds in told.items():
            print(f"        {what} to its event version: {seconds:.2f} s")


if __name__ == "__main__":
    main()
