"""Storage growth alone: `make bench`'s storage figure without the rest of the bench.

Run: .venv/bin/python -m bench.bench_storage [--versions 1000] [--breakdown] [--keep]
One session with a log watch (a 200 KB log), a process watch (a launcher with 8 workers) and a
port watch; N times: append one line to the log, take a snapshot. Prints the growth of the
database (with its WAL and shm) and of the Markdown files, per 1,000 versions and per version,
the median read of one version, and with --breakdown the bytes of each table and index.
"""

import argparse
import contextlib
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.scenario import LAUNCHER, free_port, start_server, write_log


def sizes(data_dir: Path) -> tuple[int, int]:
    """What `make bench` counts: ctxd.db* and the Markdown files one folder down."""
    db = sum(p.stat().st_size for p in data_dir.glob("ctxd.db*"))
    md = sum(p.stat().st_size for p in data_dir.glob("*/*.md"))
    return db, md


def breakdown(db_path: Path) -> list[tuple[str, int, int, int]]:
    """(table or index, pages, bytes on pages, payload bytes), largest first, via dbstat."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "select name, count(*), sum(pgsize), sum(payload) from dbstat"
            " group by name order by sum(pgsize) desc"
        ).fetchall()
    finally:
        conn.close()
    return [(str(n), int(p), int(s), int(u or 0)) for n, p, s, u in rows]


def print_breakdown(before: list, after: list, versions: int) -> None:
    old = {name: size for name, _pages, size, _payload in before}
    print(f"  {'table / index':<34} {'bytes':>10} {'grew':>10} {'per version':>12} {'payload':>10}")
    for name, _pages, size, payload in after:
        grew = size - old.get(name, 0)
        print(f"  {name:<34} {size:>10,} {grew:>10,} {grew / versions:>12,.0f} {payload:>10,}")


def growth(what: str, grew: int, versions: int) -> None:
    per_1000 = grew * 1000 / versions / 2**20
    print(f"  {what:<28} {per_1000:6.2f} MB per 1,000   {grew / versions:8,.0f} B per version")


def launcher(root: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    script = root / "bench_launcher.py"
    script.write_text(LAUNCHER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(port), "--tp", "8"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc, port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=1000)
    parser.add_argument("--breakdown", action="store_true", help="bytes per table and index")
    parser.add_argument("--keep", action="store_true", help="keep the data dir; print its path")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ctxd-bench-storage-"))
    log_path = root / "server1.log"
    write_log(log_path, 200_000)
    proc, port = launcher(root)
    data_dir = root / "data"
    server = start_server(data_dir, env={"CTXD_RATE_PER_S": "1e9", "CTXD_RATE_BURST": "1000000000"})
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            client.put("/api/sessions/store", json={"objective": "storage growth"})
            for spec in (
                {"kind": "log", "path": str(log_path)},
                # its own launcher's path: other benches' launchers on a shared machine must not
                # join this table
                {"kind": "process", "match": str(root / "bench_launcher.py")},
                {"kind": "port", "port": port},
            ):
                client.post("/api/sessions/store/watches", json=spec).raise_for_status()
            take = lambda: client.post("/api/sessions/store/snapshots").raise_for_status()  # noqa: E731
            take()
            first = len(client.get("/api/sessions/store/snapshots").json()) + 1
            db0, md0 = sizes(data_dir)
            tables0 = breakdown(data_dir / "ctxd.db") if args.breakdown else []
            cpu0 = time.process_time()
            started = time.perf_counter()
            with open(log_path, "a") as log:
                for _ in range(args.versions):
                    log.write(f"step ok at {time.time()}\n")
                    log.flush()
                    take()
            wall = time.perf_counter() - started
            db1, md1 = sizes(data_dir)
            last = len(client.get("/api/sessions/store/snapshots").json())
            versions = last - first + 1
            cpu = time.process_time() - cpu0
            print(f"{versions} versions in {wall:.1f} s (client CPU {cpu:.1f} s)")
            growth("database growth (with WAL)", db1 - db0, versions)
            growth("Markdown files growth", md1 - md0, versions)
            growth("total growth", db1 + md1 - db0 - md0, versions)
            files = {p.name: p.stat().st_size for p in data_dir.glob("ctxd.db*")}
            print(f"  database files now           {files}")
            took, bad = [], 0
            for version in range(first, last + 1):
                t0 = time.perf_counter()
                answer = client.get(f"/api/sessions/store/snapshots/{version}/markdown")
                took.append((time.perf_counter() - t0) * 1000)
                if answer.status_code != 200 or not answer.text.startswith(
                    f"# store · v{version} "
                ):
                    bad += 1
            print(f"  versions read back           {len(took) - bad}/{len(took)}")
            print(f"  read of one version, median  {statistics.median(took):.2f} ms")
            if args.breakdown:
                print_breakdown(tables0, breakdown(data_dir / "ctxd.db"), versions)
    finally:
        server.stop()
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if args.keep:
            print(f"data dir kept: {data_dir}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
