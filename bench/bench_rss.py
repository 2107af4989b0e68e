"""The server's peak RSS alone: where it stands after each stage of the standard workload.

Stages, as `make bench` runs them: start-up, snapshots of the standard scenario (1,000 host
processes, a launcher with 8 workers, 5 logs, 5,000 artifact files), resumes under wrk, and an
MCP client session (initialize, list tools, take_snapshot, resume). Each line shows VmRSS (now)
and VmHWM (the peak so far), in MB. `--imports` instead prints, in a fresh interpreter, the RSS
each top-level dependency adds when imported in the order ctxd imports them, then the app build.

Run: .venv/bin/python -m bench.bench_rss [--snapshots 7] [--wrk-seconds 3] [--imports]
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import psutil

from bench import crowd
from bench.scenario import Scenario, build, register, start_server

NO_RATE_LIMIT = {"CTXD_RATE_PER_S": "1e9", "CTXD_RATE_BURST": "1000000000"}

# Run in a fresh interpreter: RSS after each import, in the order `ctxd serve` meets them.
IMPORTS = """
import sys, tempfile
from pathlib import Path
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
last = rss()
print(f"  {'interpreter':<34} {last:6.1f} MB")
from ctxd.http.footprint import lean_start  # what `ctxd serve` does first
lean_start()
def step(name, run):
    global last
    run()
    now = rss()
    print(f"  {name:<34} {now:6.1f} MB  (+{now - last:.1f})")
    last = now
for module in ("pydantic", "pydantic_settings", "psutil", "sqlite_utils", "jinja2", "httpx",
               "regex", "markdown_it", "watchfiles", "msgspec", "litestar", "uvicorn",
               "ctxd.settings", "ctxd.store.database", "ctxd.snapshotter.snapshotter",
               "ctxd.usecases.operations",
               "ctxd.http.app"):
    step("import " + module, lambda: __import__(module))
from ctxd.http.app import create_app
from ctxd.settings import Settings
holder = []
step("create_app", lambda: holder.append(create_app(Settings(data_dir=Path(tempfile.mkdtemp())))))
step("openapi schema", lambda: holder[0].openapi_schema)
from ctxd.http.mcp import sdk as mcp_sdk
step("import the MCP SDK (as /mcp does)", mcp_sdk.import_server)
step("import ctxd.http.mcp.server", lambda: __import__("ctxd.http.mcp.server"))
"""


def status_mb(pid: int) -> dict[str, float]:
    """VmRSS, VmHWM, RssAnon and RssFile of `pid`, in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def show(stage: str, pid: int) -> float:
    mb = status_mb(pid)
    print(
        f"  {stage:<40} RSS {mb['VmRSS']:6.1f} (anon {mb['RssAnon']:5.1f}, "
        f"files {mb['RssFile']:5.1f})  peak {mb['VmHWM']:6.1f} MB"
    )
    return mb["VmHWM"]


def measure(scenario: Scenario, env: dict[str, str], snapshots: int, wrk_seconds: int) -> float:
    """The server's peak RSS over the workload, each stage printed; a server of its own."""
    data_dir = Path(tempfile.mkdtemp(prefix="ctxd-bench-rss-"))
    server = start_server(data_dir, env=env)
    pid = server.process.pid
    try:
        show("started, /health answered", pid)
        with httpx.Client(base_url=server.url, timeout=60) as client:
            register(client, "bench", scenario)
            cpu = psutil.Process(pid).cpu_times()
            for _ in range(snapshots):
                client.post("/api/sessions/bench/snapshots", json={"force": True})
            after = psutil.Process(pid).cpu_times()
            per = (after.user + after.system - cpu.user - cpu.system) / snapshots * 1000
            show(f"{snapshots} snapshots ({per:.0f} ms CPU each)", pid)
            if shutil.which("wrk"):
                url = f"{server.url}/api/sessions/bench/resume?fresh=false"
                subprocess.run(
                    ["wrk", "-t2", "-c16", f"-d{wrk_seconds}s", url],
                    capture_output=True,
                    check=True,
                )
                show(f"resumes under wrk ({wrk_seconds} s)", pid)
            tools = crowd.use_mcp(server)
            return show(f"MCP session ({tools} tools, snapshot, resume)", pid)
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=7)
    parser.add_argument("--wrk-seconds", type=int, default=3)
    parser.add_argument("--imports", action="store_true", help="RSS added by each import")
    parser.add_argument("--rounds", type=int, default=1, help="servers measured in turn")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server")
    args = parser.parse_args()
    if args.imports:
        subprocess.run([sys.executable, "-c", IMPORTS], check=True)
        return
    print("building the scenario (1,000 processes, 5 logs incl. 1 GB, 5,000 files + 100 GB)...")
    scenario = build()
    env = dict(NO_RATE_LIMIT, **dict(item.split("=", 1) for item in args.env))
    try:
        peaks = [
            measure(scenario, env, args.snapshots, args.wrk_seconds) for _ in range(args.rounds)
        ]
    finally:
        scenario.stop()
    print("peak RSS (VmHWM): " + ", ".join(f"{peak:.1f}" for peak in peaks) + " MB")


if __name__ == "__main__":
    main()
