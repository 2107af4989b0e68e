"""`make bench`: the standard scenario measured end to end; prints every figure of issue 16
next to its target, and appends the run to bench/results.jsonl.

Run: .venv/bin/python -m bench [--runs 15] [--idle-seconds 60] [--storage 1000] [--quick]
     [--profile]
"""

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

from bench import bench_long_session, bench_peers, bench_search, crowd, table
from bench.scenario import Scenario, Server, build, register, shell_collection, start_server
from bench.timing import p95, timed


def row(name: str, value: str, note: str = "") -> None:
    print(f"  {name:<44} {value:>14}  {note}")


def bench_snapshot(client: httpx.Client, scenario: Scenario, runs: int, figures: dict) -> None:
    print("snapshot (HTTP end to end: collect, redact, store with commit, write Markdown)")
    take = lambda: client.post("/api/sessions/bench/snapshots", json={"force": True})  # noqa: E731
    # The first two prime: CPU baselines and fingerprint caches, then the artifact tree's
    # watcher, which the first walk starts and the second confirms (walks stop after it).
    take()
    take()
    ctxd: list[float] = []
    shell: list[float] = []
    for _ in range(runs):  # interleaved, so both see the same load on a shared machine
        ctxd += timed(lambda: take().raise_for_status(), 1)
        shell += timed(lambda: subprocess.run(shell_collection(scenario), capture_output=True), 1)
    row(
        "ctxd snapshot median / p95", f"{statistics.median(ctxd):.1f} ms", f"p95 {p95(ctxd):.1f} ms"
    )
    row("shell (ps, tail x5, find -printf, ss) median", f"{statistics.median(shell):.1f} ms")
    row("ratio ctxd / shell", f"{statistics.median(ctxd) / statistics.median(shell):.2f}")
    figures["snapshot_ms"] = statistics.median(ctxd)
    figures["snapshot_p95_ms"] = p95(ctxd)
    figures["shell_ms"] = statistics.median(shell)
    figures["snapshot_ratio"] = statistics.median(ctxd) / statistics.median(shell)


def bench_resume(
    server: Server, client: httpx.Client, runs: int, figures: dict, seconds: int
) -> None:
    print("resume of the latest stored dump")
    url = "/api/sessions/bench/resume?fresh=false"
    latencies = timed(lambda: client.get(url).raise_for_status(), runs * 20)
    row("sequential median", f"{statistics.median(latencies):.2f} ms", "(httpx client)")
    if not shutil.which("wrk"):
        row("wrk", "not installed", "apt-get install wrk")
        return
    out = subprocess.run(
        ["wrk", "-t2", "-c16", f"-d{seconds}s", "--latency", server.url + url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = next(line.split()[-1] for line in out.splitlines() if "Requests/sec" in line)
    median = next(line.split()[-1] for line in out.splitlines() if line.strip().startswith("50%"))
    refused = [line.split()[-1] for line in out.splitlines() if "Non-2xx" in line]
    figures["resume_rps"] = float(rps)
    row("wrk 16 connections: requests/s", rps)
    # a 429 from the rate limiter is no dump served: the bench server runs without one
    row("wrk 16 connections: answers not 2xx", refused[0] if refused else "0")
    row("wrk 16 connections: median latency", median)


def bench_storage(
    client: httpx.Client,
    server: Server,
    scenario: Scenario,
    count: int,
    figures: dict,
    steady: bool = True,
) -> None:
    print(f"storage: {count} snapshots of one session")
    client.put("/api/sessions/store", json={"objective": "storage growth"})
    for spec in (
        {"kind": "log", "path": str(scenario.logs[1])},
        {"kind": "process", "match": scenario.launcher_match},
        {"kind": "port", "port": scenario.listening_port},
    ):
        client.post("/api/sessions/store/watches", json=spec).raise_for_status()
    take = lambda: client.post("/api/sessions/store/snapshots").raise_for_status()  # noqa: E731
    take()
    if steady:
        _report_growth(server, client, "only times, ages and CPU jitter change", count, take)

    with open(scenario.logs[1], "a") as log:

        def append_and_take() -> None:
            log.write(f"step ok at {time.time()}\n")
            log.flush()
            take()

        first = len(client.get("/api/sessions/store/snapshots").json()) + 1
        total = _report_growth(server, client, "one new log line each time", count, append_and_take)
    figures["storage1000_mb"] = total * 1000 / count
    if count != 1000:
        figures.setdefault("notes", []).append(
            f"storage measured over {count} versions, scaled to 1,000"
        )
    _check_readable(client, first, figures)


def _check_readable(client: httpx.Client, first: int, figures: dict) -> None:
    """Every version of the run read back as Markdown through the API, and how long it took."""
    last = len(client.get("/api/sessions/store/snapshots").json())
    took, bad = [], 0
    for version in range(first, last + 1):
        started = time.perf_counter()
        answer = client.get(f"/api/sessions/store/snapshots/{version}/markdown")
        took.append((time.perf_counter() - started) * 1000)
        if answer.status_code != 200 or not answer.text.startswith(f"# store · v{version} "):
            bad += 1
    figures["storage_readable"] = "all" if not bad else f"{bad} unreadable"
    figures["version_read_ms"] = statistics.median(took)
    row("  versions read back as Markdown", f"{len(took) - bad}/{len(took)}")
    row("  read of one version, median", f"{statistics.median(took):.2f} ms")


def _report_growth(
    server: Server, client: httpx.Client, what: str, count: int, take: Callable[[], object]
) -> float:
    """Prints the growth of the data dir over `count` calls of `take`; returns it in MB."""
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
    return (db1 + md1 - db0 - md0) / 2**20


def _sizes(data_dir: Path) -> tuple[int, int]:
    db = sum(p.stat().st_size for p in data_dir.glob("ctxd.db*"))
    md = sum(p.stat().st_size for p in data_dir.glob("*/*.md"))
    return db, md


def bench_scaling(
    client: httpx.Client, scenario: Scenario, runs: int, counts: list[int], figures: dict
) -> None:
    print("scaling: snapshot median against host processes")
    take = lambda: client.post("/api/sessions/bench/snapshots", json={"force": True})  # noqa: E731
    for count in counts:
        scenario.spawn_others(count)
        take()
        median = statistics.median(timed(take, runs))
        figures[f"host{count}_ms"] = median
        row(f"{count} host processes", f"{median:.1f} ms")
        if count == 5000:
            crowd.bench_discovery(client, scenario, runs, figures, median)
    scenario.spawn_others(1000)


def bench_log_sizes(client: httpx.Client, scenario: Scenario, runs: int, sizes: list[int]) -> None:
    print("scaling: snapshot median against the size of a watched log")
    from bench.scenario import write_log

    log = scenario.root / "scaling.log"
    client.put("/api/sessions/logsize", json={})
    added = client.post("/api/sessions/logsize/watches", json={"kind": "log", "path": str(log)})
    for size in sizes:
        write_log(log, size)
        one = lambda: client.post(  # noqa: E731
            "/api/sessions/logsize/snapshots", json={"force": True}
        )
        one()
        row(f"log of {size / 2**20:,.0f} MB", f"{statistics.median(timed(one, runs)):.1f} ms")
    client.delete(f"/api/sessions/logsize/watches/{added.json()['id']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--idle-seconds", type=float, default=60)
    parser.add_argument("--storage", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="fewer runs and versions: ~2 min")
    parser.add_argument("--profile", action="store_true", help="one snapshot's phases, in-process")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.idle_seconds, args.storage = 7, 15, 200
    figures: dict = {"runs": args.runs, "cpus": psutil.cpu_count()}
    print("building the scenario (1,000 processes, 5 logs incl. 1 GB, 5,000 files + 100 GB)...")
    scenario = build()
    data_dir = Path(tempfile.mkdtemp(prefix="ctxd-bench-data-"))
    # no rate limit: the resume figure must count dumps served, not 429s
    server = start_server(data_dir, env={"CTXD_RATE_PER_S": "1e9", "CTXD_RATE_BURST": "1000000000"})
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            register(client, "bench", scenario)
            bench_snapshot(client, scenario, args.runs, figures)
            bench_resume(server, client, args.runs, figures, 3 if args.quick else 5)
            tools = crowd.use_mcp(server)
            print(f"MCP in use: a client session listed {tools} tools, took a snapshot, resumed")
            figures["peak_rss_mb"] = crowd.peak_rss_mb(server.process.pid)
            row("peak RSS (VmHWM): snapshots, resume, MCP", f"{figures['peak_rss_mb']:.1f} MB")
            crowd.bench_watch300(client, scenario, args.runs, figures)
            counts = [5000] if args.quick else [100, 1000, 5000]
            bench_scaling(client, scenario, args.runs, counts, figures)
            crowd.bench_idle_crowd(server, client, scenario, args.idle_seconds, figures)
            figures["peak_rss_10_sessions_mb"] = crowd.peak_rss_mb(server.process.pid)
            rss = f"{figures['peak_rss_10_sessions_mb']:.1f} MB"
            row("peak RSS (VmHWM), then 10 sessions x 8 watches", rss)
            bench_storage(client, server, scenario, args.storage, figures, steady=not args.quick)
            if not args.quick:
                bench_log_sizes(client, scenario, args.runs, [2**20, 2**30, 10 * 2**30])
            figures["peak_rss_end_mb"] = crowd.peak_rss_mb(server.process.pid)
        if args.profile:
            from bench import profile

            profile.run(scenario, args.runs)
    finally:
        server.stop()
        scenario.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    if not args.quick:
        bench_search.run(10_000)
    bench_peers.run(5 if args.quick else args.runs)
    # a hook's wall time per Claude Code event: its own ctxd, its own checkout
    subprocess.run([sys.executable, "-m", "bench.bench_hook_events"], check=False)
    # each harness's hook path per tool call, and a cluster's own engine read (Ray, Slurm)
    subprocess.run([sys.executable, "-m", "bench.bench_hook_paths"], check=False)
    subprocess.run([sys.executable, "-m", "bench.bench_engines"], check=False)
    if not args.quick:  # idle cost and event latency by sessions; waking an idle agent
        subprocess.run([sys.executable, "-m", "bench.bench_dormant"], check=False)
        subprocess.run([sys.executable, "-m", "bench.bench_wake"], check=False)
    if not args.quick:  # last: "continue" after 2,000 launches and 20,000 commands
        figures.update(bench_long_session.run(args.runs))
    table.print_table(figures)
    table.append_results(figures, "quick" if args.quick else "full")


if __name__ == "__main__":
    main()
