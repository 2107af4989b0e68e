"""`make bench`: the standard scenario measured end to end; prints medians and ratios.

Run: .venv/bin/python -m bench [--runs 15] [--idle-seconds 60] [--storage 1000] [--quick]
"""

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

from bench import bench_search
from bench.scenario import Scenario, Server, build, register, shell_collection, start_server
from bench.timing import p95, timed


def row(name: str, value: str, note: str = "") -> None:
    print(f"  {name:<44} {value:>14}  {note}")


def bench_snapshot(client: httpx.Client, scenario: Scenario, runs: int) -> None:
    print("snapshot (HTTP end to end: collect, redact, store with commit, write Markdown)")
    take = lambda: client.post("/api/sessions/bench/snapshots", json={"force": True})  # noqa: E731
    take()  # first one primes CPU baselines and fingerprint caches
    ctxd = timed(lambda: take().raise_for_status(), runs)
    shell = timed(lambda: subprocess.run(shell_collection(scenario), capture_output=True), runs)
    row(
        "ctxd snapshot median / p95", f"{statistics.median(ctxd):.1f} ms", f"p95 {p95(ctxd):.1f} ms"
    )
    row("shell (ps, tail x5, find -printf, ss) median", f"{statistics.median(shell):.1f} ms")
    row("ratio ctxd / shell", f"{statistics.median(ctxd) / statistics.median(shell):.2f}")


def bench_resume(server: Server, client: httpx.Client, runs: int) -> None:
    print("resume of the latest stored dump")
    url = "/api/sessions/bench/resume?fresh=false"
    latencies = timed(lambda: client.get(url).raise_for_status(), runs * 20)
    row("sequential median", f"{statistics.median(latencies):.2f} ms", "(httpx client)")
    if not shutil.which("wrk"):
        row("wrk", "not installed", "apt-get install wrk")
        return
    out = subprocess.run(
        ["wrk", "-t2", "-c16", "-d5s", "--latency", server.url + url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = next(line.split()[-1] for line in out.splitlines() if "Requests/sec" in line)
    median = next(line.split()[-1] for line in out.splitlines() if line.strip().startswith("50%"))
    row("wrk 16 connections: requests/s", rps)
    row("wrk 16 connections: median latency", median)


def bench_idle(server: Server, seconds: float) -> None:
    print(f"idle footprint over {seconds:.0f} s (watches sampled at the default interval)")
    proc = psutil.Process(server.process.pid)
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    cpu = (after.user + after.system - before.user - before.system) / seconds * 100
    hwm = _peak_rss(proc)
    row("CPU of one core", f"{cpu:.2f} %")
    row("peak RSS (VmHWM)", f"{hwm / 2**20:.1f} MB")


def _peak_rss(proc: psutil.Process) -> int:
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return int(proc.memory_info().rss)


def bench_storage(client: httpx.Client, server: Server, scenario: Scenario, count: int) -> None:
    print(f"storage: {count} snapshots of a session whose state barely changes")
    client.put("/api/sessions/store", json={"objective": "storage growth"})
    for spec in (
        {"kind": "log", "path": str(scenario.logs[1])},
        {"kind": "process", "match": "bench_launcher.py"},
        {"kind": "port", "port": scenario.listening_port},
    ):
        client.post("/api/sessions/store/watches", json=spec).raise_for_status()
    take = lambda: client.post("/api/sessions/store/snapshots").raise_for_status()  # noqa: E731
    take()
    _report_growth(server, client, "only times, ages and CPU jitter change", count, take)

    with open(scenario.logs[1], "a") as log:

        def append_and_take() -> None:
            log.write(f"step ok at {time.time()}\n")
            log.flush()
            take()

        _report_growth(server, client, "plus one new log line each time", count, append_and_take)


def _report_growth(
    server: Server, client: httpx.Client, what: str, count: int, take: Callable[[], object]
) -> None:
    versions_before = len(client.get("/api/sessions/store/snapshots").json())
    db0, md0 = _sizes(server.data_dir)
    for _ in range(count):
        take()
    db1, md1 = _sizes(server.data_dir)
    versions = len(client.get("/api/sessions/store/snapshots").json()) - versions_before
    print(f"  {what}:")
    row("  new versions", str(versions))
    row("  database growth (with WAL)", f"{(db1 - db0) / 2**20:.2f} MB")
    row("  Markdown files growth", f"{(md1 - md0) / 2**20:.2f} MB")
    row("  total growth", f"{(db1 + md1 - db0 - md0) / 2**20:.2f} MB")


def _sizes(data_dir: Path) -> tuple[int, int]:
    db = sum(p.stat().st_size for p in data_dir.glob("ctxd.db*"))
    md = sum(p.stat().st_size for p in data_dir.glob("*/*.md"))
    return db, md


def bench_scaling(client: httpx.Client, scenario: Scenario, runs: int, sizes: list[int]) -> None:
    print("scaling: snapshot median against host processes and log size")
    take = lambda: client.post("/api/sessions/bench/snapshots", json={"force": True})  # noqa: E731
    for count in (100, 1000, 5000):
        scenario.spawn_others(count)
        take()
        row(f"{count} host processes", f"{statistics.median(timed(take, runs)):.1f} ms")
    scenario.spawn_others(1000)
    from bench.scenario import write_log

    log = scenario.root / "scaling.log"
    client.put("/api/sessions/logsize", json={})
    client.post("/api/sessions/logsize/watches", json={"kind": "log", "path": str(log)})
    for size in sizes:
        write_log(log, size)
        one = lambda: client.post(  # noqa: E731
            "/api/sessions/logsize/snapshots", json={"force": True}
        )
        one()
        row(f"log of {size / 2**20:,.0f} MB", f"{statistics.median(timed(one, runs)):.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--idle-seconds", type=float, default=60)
    parser.add_argument("--storage", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="fewer runs, shorter idle, 200 snaps")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.idle_seconds, args.storage = 5, 10, 200
    print("building the scenario (1,000 processes, 5 logs incl. 1 GB, 5,000 files + 100 GB)...")
    scenario = build()
    data_dir = Path(tempfile.mkdtemp(prefix="ctxd-bench-data-"))
    server = start_server(data_dir)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            register(client, "bench", scenario)
            bench_snapshot(client, scenario, args.runs)
            bench_resume(server, client, args.runs)
            bench_idle(server, args.idle_seconds)
            bench_storage(client, server, scenario, args.storage)
            bench_scaling(client, scenario, args.runs, [2**20, 2**30, 10 * 2**30])
    finally:
        server.stop()
        scenario.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    bench_search.run(2000 if args.quick else 10_000)


if __name__ == "__main__":
    main()
