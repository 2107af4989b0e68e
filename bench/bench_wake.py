"""Waking the idle agent (issue 40): how soon the waiter tells a death, and what waiting costs.

Run: .venv/bin/python -m bench.bench_wake [--runs 5] [--waiters 50] [--idle-seconds 60]

- latency: a launch reported as Claude Code reports it, dying 2 s later with its error; the
  seconds from its death (seen by polling its pid) to the exit of `ctxd hook claude --wake`
  (exit 2, the news on stderr), with ctxd's default settings (event probes every 5 s);
- idle: `--waiters` sessions, each with a waiter long-polling for a launch that sleeps; the
  server's CPU (% of one core) over `--idle-seconds`, its resident memory then, and the
  waiters' resident memory.

The figures are appended to bench/results.jsonl (mode "wake").
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from bench import table
from bench.scenario import Server, start_server
from bench.timing import cpu_percent

# Dies 2 s after its start, writing the moment it dies (the wall clock) where the bench reads it.
DIES = (
    "import sys, time\ntime.sleep(2)\nprint('RuntimeError: boom', file=sys.stderr)\n"
    "open('died_at', 'w').write(repr(time.time()))\nsys.exit(1)\n"
)


def report(server: Server, work: Path, conversation: str, command: str) -> dict:
    subprocess.run(["bash", "-c", command], cwd=work, check=True)
    payload = {"hook_event_name": "PostToolUse", "session_id": conversation, "cwd": str(work),
               "tool_name": "Bash", "tool_input": {"command": command},
               "tool_response": {"stdout": "", "stderr": ""}}  # fmt: skip
    httpx.post(f"{server.url}/api/hooks/claude", json={"payload": payload}, timeout=60)
    return payload


def waiter(server: Server, payload: dict, home: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxd", "--url", server.url, "hook", "claude", "--wake"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**env, "HOME": str(home)},
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(payload))
    proc.stdin.close()
    return proc


def the_one(mark: str) -> psutil.Process:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline"]):
            if mark in " ".join(proc.info["cmdline"] or []):
                return proc
        time.sleep(0.05)
    raise SystemExit(f"{mark} never started")


def bench_latency(runs: int, root: Path) -> list[float]:
    took = []
    with tempfile.TemporaryDirectory() as data:
        server = start_server(Path(data), {"CTXD_WATCH_ROOTS": json.dumps([str(root)])})
        try:
            for run in range(runs):
                work = root / f"w{run}"
                work.mkdir()
                (work / "dies.py").write_text(DIES)
                mark = f"bench-wake-{os.getpid()}-{run}"
                line = f"nohup {sys.executable} dies.py {mark} > dies.log 2>&1 &"
                proc = waiter(server, report(server, work, f"c{run}", line), root)
                the_one(mark).wait(timeout=60)
                proc.wait(timeout=120)
                told = time.time()
                said = proc.stderr.read() if proc.stderr else ""
                assert proc.returncode == 2 and (work / "died_at").exists(), said
                took.append(told - float((work / "died_at").read_text()))
        finally:
            server.stop()
    return took


def bench_idle(waiters: int, seconds: float, root: Path) -> tuple[float, float, float]:
    """(server CPU % of one core while `waiters` wait, the server's RSS in MiB then, the
    waiters' RSS in MiB in all)."""
    sleeper = root / "sleeps.py"
    sleeper.write_text("import time\ntime.sleep(3600)\n")
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as data:
        server = start_server(Path(data), {"CTXD_WATCH_ROOTS": json.dumps([str(root)])})
        try:
            for n in range(waiters):
                work = root / f"idle{n}"
                work.mkdir()
                line = f"nohup {sys.executable} {sleeper} bench-idle-{os.getpid()}-{n} &"
                procs.append(waiter(server, report(server, work, f"i{n}", line), root))
            time.sleep(20)  # settle: the launches' snapshots and the first looks are done
            cpu = cpu_percent(server.process.pid, seconds)
            served = psutil.Process(server.process.pid).memory_info().rss / 2**20
            rss = sum(psutil.Process(p.pid).memory_info().rss for p in procs) / 2**20
            return cpu, served, rss
        finally:
            for proc in procs:
                proc.kill()
            server.stop()
            for proc in psutil.process_iter(["cmdline"]):
                if f"bench-idle-{os.getpid()}-" in " ".join(proc.info["cmdline"] or []):
                    proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--waiters", type=int, default=50)
    parser.add_argument("--idle-seconds", type=float, default=60)
    args = parser.parse_args()
    print("waking the idle agent (medians)")
    with tempfile.TemporaryDirectory() as root:
        took = bench_latency(args.runs, Path(root))
        print(
            f"  death to waiter exit (default settings)        {statistics.median(took):6.2f} s"
            f"  (max {max(took):.2f} s of {len(took)})"
        )
        cpu, served, rss = bench_idle(args.waiters, args.idle_seconds, Path(root))
        print(f"  server CPU, {args.waiters} sessions each with a waiter  {cpu:6.2f} % of a core")
        print(f"  the server's RSS meanwhile                       {served:6.1f} MiB")
        print(f"  the {args.waiters} waiters' RSS in all                  {rss:6.1f} MiB")
    figures = {
        "wake_latency_s": statistics.median(took),
        "wake_latency_max_s": max(took),
        "wake_runs": len(took),
        "wake_waiters": args.waiters,
        "wake_idle_seconds": args.idle_seconds,
        "wake_idle_server_cpu_pct": cpu,
        "wake_idle_server_rss_mb": served,
        "wake_idle_waiters_rss_mb": rss,
        "cpus": os.cpu_count(),
    }
    table.append_results(figures, "wake")


if __name__ == "__main__":
    main()
