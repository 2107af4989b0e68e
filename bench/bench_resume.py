"""Resume throughput alone: wrk's requests/s and the server's CPU microseconds per request.

wrk shares the machine's cores with the server, so its requests/s moves with the load; the
server's own CPU time (user + system) over the run, divided by the requests wrk counted, does
not: that is the figure to drive down.

Run: .venv/bin/python -m bench.bench_resume [--seconds 5] [--rounds 3] [--token]
"""

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import psutil

from bench.scenario import start_server, write_log

URL = "/api/sessions/bench/resume?fresh=false"
NO_RATE_LIMIT = {"CTXD_RATE_PER_S": "1e9", "CTXD_RATE_BURST": "1000000000"}
TOKEN = "bench-token-0123456789abcdefXYZ"


def prepare(client: httpx.Client, root: Path) -> int:
    """One session with a log watch and a stored dump; returns the dump's size in bytes."""
    log = root / "server.log"
    write_log(log, 200_000)
    client.put("/api/sessions/bench", json={"title": "bench", "objective": "measure"})
    client.post("/api/sessions/bench/watches", json={"kind": "log", "path": str(log)})
    client.post("/api/sessions/bench/snapshots").raise_for_status()
    return len(client.get(URL).raise_for_status().content)


def wrk_round(url: str, pid: int, seconds: int, token: str | None) -> tuple[float, float, int]:
    """(requests/s, server CPU µs per request, non-2xx answers) of one wrk run."""
    proc = psutil.Process(pid)
    header = ["-H", f"Authorization: Bearer {token}"] if token else []
    before = proc.cpu_times()
    out = subprocess.run(
        ["wrk", "-t2", "-c16", f"-d{seconds}s", *header, url + URL],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    after = proc.cpu_times()
    cpu_s = after.user + after.system - before.user - before.system
    requests = int(re.search(r"(\d+) requests in", out)[1])  # type: ignore[index]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1])  # type: ignore[index]
    refused = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, cpu_s / max(requests, 1) * 1e6, int(refused[1]) if refused else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--token", action="store_true", help="serve with a bearer token")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk)")
    root = Path(tempfile.mkdtemp(prefix="ctxd-bench-resume-"))
    env = dict(NO_RATE_LIMIT, CTXD_TOKEN=TOKEN) if args.token else NO_RATE_LIMIT
    server = start_server(root / "data", env=env)
    token = TOKEN if args.token else None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            size = prepare(client, root)
        print(f"resume of a stored dump of {size:,} bytes, wrk -t2 -c16 -d{args.seconds}s")
        wrk_round(server.url, server.process.pid, 1, token)  # warm-up
        rounds = [
            wrk_round(server.url, server.process.pid, args.seconds, token)
            for _ in range(args.rounds)
        ]
        for rps, cpu_us, refused in rounds:
            cpu = f"{cpu_us:>6.1f} µs server CPU/request"
            print(f"  {rps:>9,.0f} requests/s  {cpu}  {refused} not 2xx")
        print(
            f"  median {statistics.median(r[0] for r in rounds):,.0f} requests/s, "
            f"{statistics.median(r[1] for r in rounds):.1f} µs server CPU per request"
        )
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
