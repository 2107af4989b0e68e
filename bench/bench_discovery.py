"""Cost of learning by itself: the workspace scan with 1,000 host processes, one agent action,
and the Claude Code hook's own wall time per event (a PostToolUse runs on every tool call).

Run: .venv/bin/python -m bench.bench_discovery [--others 1000] [--runs 15]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import httpx
from ctxd.discovery import procscan, rules
from ctxd.discovery.shellparse import parse_command

from bench.scenario import free_port, start_server
from bench.timing import median_ms, timed

# Commands of the seed story's kind, as an agent types them.
COMMANDS = (
    "cd /srv/sglang && nohup python -m sglang.launch_server --model-path /models/kimi-k2"
    " --tp 8 --port 30000 --disable-cuda-graph --log-level debug > /tmp/sglang.log 2>&1 &",
    "NCCL_DEBUG=INFO CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nproc-per-node 4 train.py"
    " --log-file runs/train.log | tee -a runs/console.log",
    "cmake --build build -j16 && pip wheel --no-deps -w dist ./sgl-kernel",
    "tail -n 100 /tmp/sglang.log | grep -i error",
)


def row(name: str, value: str, note: str = "") -> None:
    print(f"  {name:<52} {value:>12}  {note}")


def bench_scan(others: int, runs: int, workspace: Path) -> None:
    crowd = [subprocess.Popen(["sleep", "600"]) for _ in range(others)]
    mine = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", "serve.py"], cwd=workspace
    )
    try:
        scan = lambda: procscan.workspace_processes([str(workspace)], min_age_s=0)  # noqa: E731
        found = scan()
        assert any(c.pid == mine.pid for c in found), "the workspace process was not found"
        row(f"workspace scan, {others} host processes", f"{median_ms(scan, runs):.1f} ms")
    finally:
        for proc in [*crowd, mine]:
            proc.kill()
        for proc in [*crowd, mine]:
            proc.wait()


def bench_action(runs: int) -> None:
    at = datetime.now(UTC)
    for command in COMMANDS:
        parsed = parse_command(command)
        assert parsed.parsed, command
    per_action = timed(
        lambda: [rules.propose_for_command(parse_command(c), cwd="/srv", at=at) for c in COMMANDS],
        runs,
    )
    row("parse + propose watches, per action", f"{statistics.median(per_action) / 4:.2f} ms")


def bench_crowded_command(runs: int, workspace: Path) -> None:
    """One command line sending off 1,000 programs, recorded over HTTP (issue 39: it took
    22 s for 300 before recording was made linear and capped)."""
    line = " ".join(f"./w{i} >l{i}.log&" for i in range(1000))
    action = {"kind": "command", "command": line, "cwd": str(workspace)}
    with tempfile.TemporaryDirectory() as data:
        server = start_server(Path(data))
        try:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                client.put("/api/sessions/crowd", json={"cwd": str(workspace)})
                post = lambda: client.post(  # noqa: E731
                    "/api/sessions/crowd/actions", json={"actions": [action]}
                ).raise_for_status()
                took = timed(post, runs)
            row("one command with 1,000 launches, recorded", f"{statistics.median(took):.0f} ms")
        finally:
            server.stop()


def bench_hook(runs: int, workspace: Path) -> None:
    payload = {
        "session_id": "3f1c2a9e-5b7d-4c1e-9a0b-7e2d8c6f4a11",
        "cwd": str(workspace),
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": COMMANDS[3]},
        "tool_response": {"stdout": "no errors\n", "stderr": "", "interrupted": False},
    }

    def hook(url: str) -> None:
        argv = [sys.executable, "-m", "ctxd", "--url", url, "hook", "claude"]
        env = {**os.environ, "CTXD_AUTOSTART": "0"}  # "down" stays down
        subprocess.run(
            argv, input=json.dumps(payload), capture_output=True, text=True, check=True, env=env
        )

    with tempfile.TemporaryDirectory() as data:
        server = start_server(Path(data))
        try:
            down = f"http://127.0.0.1:{free_port()}"
            for name, url in (("ctxd up", server.url), ("ctxd down", down)):
                took = timed(lambda u=url: hook(u), runs + 1)[1:]  # the first one warms up
                row(f"hook wall time per PostToolUse, {name}", f"{statistics.median(took):.0f} ms")
            # what Claude Code's HTTP hook costs instead: no process, one POST it makes itself
            posted = f"{server.url}/api/hooks/claude/http"
            with httpx.Client(timeout=30) as client:
                took = timed(lambda: client.post(posted, json=payload).raise_for_status(), runs)
            row("HTTP hook per PostToolUse (no process)", f"{statistics.median(took):.1f} ms")
            bare = timed(lambda: subprocess.run([sys.executable, "-S", "-I", "-c", "pass"]), runs)
            row("bare interpreter start, for scale", f"{statistics.median(bare):.0f} ms")
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--others", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    print("learning by itself (medians)")
    with tempfile.TemporaryDirectory() as workspace:
        bench_scan(args.others, args.runs, Path(workspace))
        bench_action(args.runs * 10)
        bench_hook(args.runs, Path(workspace))
        bench_crowded_command(max(3, args.runs // 3), Path(workspace))


if __name__ == "__main__":
    main()
