"""Idle cost by number of sessions (issue 43): dormant sessions are not probed.

Run: .venv/bin/python -m bench.bench_dormant [--sessions 10 100 1000] [--live 10] [--seconds 60]

Each session watches a process, a log, an artifact folder and a port, as the issue measured.
`--live` of them (at most) watch a sleeping process that is alive; the others one that has
ended, so that, idle past CTXD_DORMANT_AFTER_S (20 s here), they go dormant. After a settle,
the server's CPU over `--seconds` (% of one core) and its RSS.
"""

import argparse
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


def measure(sessions: int, live: int, seconds: float, root: Path) -> tuple[float, float, int]:
    """(server CPU % of a core, its RSS in MiB, how many sessions were live)."""
    sleepers: list[subprocess.Popen] = []
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with tempfile.TemporaryDirectory() as data:
        env = {"CTXD_DORMANT_AFTER_S": str(DORMANT_AFTER_S), "CTXD_WATCH_ROOTS": f'["{root}"]'}
        server = start_server(Path(data), env)
        try:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                for n in range(sessions):
                    work = root / f"s{sessions}-{n}"
                    (work / "dist").mkdir(parents=True)
                    (work / "run.log").write_text("started\n")
                    pid = gone.pid
                    if n < live:
                        sleepers.append(subprocess.Popen(["sleep", "3600"]))
                        pid = sleepers[-1].pid
                    sid = f"s{n}"
                    client.put(f"/api/sessions/{sid}", json={"cwd": str(work)})
                    for spec in (
                        {"kind": "process", "pid": pid},
                        {"kind": "log", "path": str(work / "run.log")},
                        {"kind": "artifact", "path": str(work / "dist")},
                        {"kind": "port", "port": free_port()},
                    ):
                        client.post(f"/api/sessions/{sid}/watches", json=spec)
            time.sleep(SETTLE_S)
            cpu = cpu_percent(server.process.pid, seconds)
            rss = psutil.Process(server.process.pid).memory_info().rss
            return cpu, rss / 2**20, min(live, sessions)
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
            cpu, rss, live = measure(sessions, args.live, args.seconds, Path(root))
        print(f"  {sessions:5d} sessions ({live} live, {sessions - live} dormant)"
              f"   {cpu:5.2f} % of a core   RSS {rss:6.1f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
