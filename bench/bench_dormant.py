"""Idle cost by number of sessions (issue 43): dormant sessions are not probed.

Run: .venv/bin/python -m bench.bench_dormant [--sessions 10 100 1000] [--live 10]
                                            [--seconds 60] [--windows 3]

Each session watches a process, a log, an artifact folder and a port, as the issue measured.
`--live` of them (at most) watch a sleeping process that is alive; the others one that has
ended, so that, idle past CTXD_DORMANT_AFTER_S (20 s here), they go dormant. After a settle,
the server's CPU over `--windows` windows of `--seconds` (% of one core, their median) and
its RSS after them; then, in live sessions, the time from a log's error line, a process's
exit and a port's opening to the event version that tells it (each in its own session, so
no debounce of one delays another; each cause in every third live session, the median).

The figures are appended to bench/results.jsonl (mode "dormant"), with the issue's floors
beside them: idle CPU at most 0.5 % of a core, RSS at 1,000 sessions at most 150 MB, an
event version at most 2 s after its cause.
"""

import argparse
import functools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from bench import table
from bench.scenario import free_port, start_server
from bench.timing import cpu_percent

DORMANT_AFTER_S = 20
SETTLE_S = 40
CAUSES = ("log error", "process exit", "port open")
CPU_FLOOR_PCT = 0.5  # the floors: idle CPU at any number of sessions,
RSS_FLOOR_MIB = 150e6 / 2**20  # the server's RSS at 1,000 sessions (150 MB),
LATENCY_FLOOR_S = 2.0  # and a live session's event version after its cause


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
    """Each cause in every third live session: a log error in s0, s3, …, an exit in s1,
    s4, …, a port opening in s2, s5, …; {cause: [seconds, …]}."""
    told: dict[str, list[float]] = {cause: [] for cause in CAUSES}
    listeners: list[socket.socket] = []

    def error(n: int) -> None:
        with (root / f"s{sessions}-{n}" / "run.log").open("a") as out:
            out.write("RuntimeError: CUDA error: an illegal memory access was encountered\n")

    def listen(n: int) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listeners.append(listener)
        listener.bind(("127.0.0.1", ports[n]))
        listener.listen()

    try:
        for n in range(len(live) - len(live) % 3):
            cause = CAUSES[n % 3]
            word, act = {
                "log error": ("log-error", functools.partial(error, n)),
                "process exit": ("process-exit", functools.partial(end, live[n])),
                "port open": ("port-open", functools.partial(listen, n)),
            }[cause]
            told[cause].append(event_after(client, f"s{n}", word, act))
        return told
    finally:
        for listener in listeners:
            listener.close()


def measure(
    sessions: int, live: int, seconds: float, windows: int, root: Path
) -> tuple[list[float], float, int, dict]:
    """(server CPU % of a core in each window, its RSS in MiB, how many sessions were live,
    event latencies)."""
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
                cpu = [cpu_percent(server.process.pid, seconds) for _ in range(windows)]
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
    parser.add_argument("--windows", type=int, default=3)
    args = parser.parse_args()
    print(f"idle cost by sessions (dormant ones are not probed), medians of {args.windows}")
    figures: dict[str, float | int] = {
        "dormant_windows": args.windows,
        "dormant_window_s": args.seconds,
        "cpus": os.cpu_count() or 0,
    }
    for sessions in args.sessions:
        with tempfile.TemporaryDirectory() as root:
            cpu, rss, live, told = measure(
                sessions, args.live, args.seconds, args.windows, Path(root)
            )
        median = statistics.median(cpu)
        verdict = "meets" if median <= CPU_FLOOR_PCT else "misses"
        print(f"  {sessions:5d} sessions ({live} live, {sessions - live} dormant)"
              f"   {median:5.2f} % of a core ({verdict} {CPU_FLOOR_PCT} %;"
              f" windows {', '.join(f'{c:.2f}' for c in cpu)})"
              f"   RSS {rss:6.1f} MiB")  # fmt: skip
        figures[f"dormant_{sessions}_live"] = live
        figures[f"dormant_{sessions}_cpu_pct"] = median
        figures[f"dormant_{sessions}_cpu_max_pct"] = max(cpu)
        figures[f"dormant_{sessions}_rss_mb"] = rss
        for what, took in told.items():
            if not took:
                continue
            verdict = "meets" if statistics.median(took) <= LATENCY_FLOOR_S else "misses"
            print(f"        {what} to its event version: {statistics.median(took):.2f} s"
                  f" (max {max(took):.2f} s of {len(took)};"
                  f" {verdict} {LATENCY_FLOOR_S} s)")  # fmt: skip
            name = what.replace(" ", "_")
            figures[f"dormant_{sessions}_{name}_s"] = statistics.median(took)
            figures[f"dormant_{sessions}_{name}_max_s"] = max(took)
    if 1000 in args.sessions:
        rss = figures["dormant_1000_rss_mb"]
        verdict = "meets" if rss <= RSS_FLOOR_MIB else "misses"
        print(f"  RSS at 1,000 sessions {rss:.1f} MiB ({verdict} 150 MB, {RSS_FLOOR_MIB:.1f} MiB)")
    table.append_results(figures, "dormant")


if __name__ == "__main__":
    main()
