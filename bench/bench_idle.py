"""The idle row alone: 10 sessions x 8 watches on one scenario, then the server's idle CPU.

Run: `.venv/bin/python -m bench.bench_idle [--windows 3] [--seconds 20] [--others 1000]`.
Prints the server's pid (for py-spy or strace while it idles), then each window's CPU
seconds (user + system), their share of one core and the snapshots taken meanwhile (an
event snapshot is work, not idling), then the median share.
"""

import argparse
import shutil
import sqlite3
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil

from bench.crowd import SETTLE_S
from bench.scenario import Scenario, build, register, start_server

SESSIONS = 10


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def pin_launcher(client: httpx.Client, sid: str, scenario: Scenario) -> None:
    """The process watch matches this scenario's launcher by its full path: on a shared
    machine another bench's launchers also match `bench_launcher.py`, and their exits would
    fire events in what should be an idle window."""
    for watch in client.get(f"/api/sessions/{sid}/watches").raise_for_status().json():
        spec = watch["spec"]
        if spec["kind"] == "process":
            client.delete(f"/api/sessions/{sid}/watches/{watch['id']}").raise_for_status()
            spec = {**spec, "match": str(scenario.root / "bench_launcher.py")}
            spec = {k: v for k, v in spec.items() if v is not None}
            client.post(f"/api/sessions/{sid}/watches", json=spec).raise_for_status()


def snapshots_between(data: Path, start: datetime, end: datetime) -> int:
    with sqlite3.connect(f"file:{data / 'ctxd.db'}?mode=ro", uri=True) as db:
        row = db.execute(
            "select count(*) from snapshots where taken_at >= ? and taken_at < ?",
            [start.isoformat(), end.isoformat()],
        ).fetchone()
    return int(row[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--others", type=int, default=1000, help="unrelated host processes")
    parser.add_argument("--hold", type=float, default=0.0, help="idle this long before windows")
    parser.add_argument(
        "--shared-match", action="store_true", help="keep the standard `bench_launcher.py` match"
    )
    args = parser.parse_args()
    scenario = build(others=args.others)
    data = Path(tempfile.mkdtemp(prefix="ctxd-bench-idle-"))
    server = start_server(data)
    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            for i in range(SESSIONS):
                sid = f"idle{i}"
                register(client, sid, scenario)
                if not args.shared_match:
                    pin_launcher(client, sid, scenario)
                client.post(f"/api/sessions/{sid}/snapshots").raise_for_status()
        print(f"server pid {server.process.pid}; settling {SETTLE_S + args.hold:.0f} s", flush=True)
        time.sleep(SETTLE_S + args.hold)
        proc = psutil.Process(server.process.pid)
        shares = []
        for window in range(args.windows):
            start, before = datetime.now(UTC), cpu_seconds(proc)
            time.sleep(args.seconds)
            spent = cpu_seconds(proc) - before
            taken = snapshots_between(data, start, datetime.now(UTC))
            shares.append(spent / args.seconds * 100)
            print(
                f"window {window + 1}: {spent:.3f} CPU s in {args.seconds:.0f} s = "
                f"{shares[-1]:.2f} % of one core; {taken} snapshots taken",
                flush=True,
            )
        print(f"idle CPU median: {statistics.median(shares):.2f} % of one core")
    finally:
        server.stop()
        scenario.stop()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
