"""How long `ctxd hook claude` takes per Claude Code event with ctxd up: the wall time from
start to exit a person or the agent waits (PostToolUse runs asynchronously: nobody waits).

Run: .venv/bin/python -m bench.bench_hook_events [--runs 7]
Against a real `ctxd serve` on a temporary data directory, in a fresh git checkout, with one
conversation (`session_id`) as Claude Code sends them. The floor is a Python start-up that
imports what the hook imports.
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

from bench.bench_hooks import timed_python
from bench.scenario import start_server

CONVERSATION = "9a7c1e52-0b3d-4f6a-8e21-5d4c3b2a1f00"


def event(name: str, cwd: Path, **fields: object) -> dict[str, object]:
    return {"session_id": CONVERSATION, "transcript_path": "", "cwd": str(cwd),
            "hook_event_name": name, **fields}  # fmt: skip


def hook_seconds(url: str, body: dict[str, object]) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", url, "hook", "claude"],
        input=json.dumps(body), capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or done.stderr:
        raise SystemExit(f"the hook failed: {done.returncode} {done.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ctxd-bench-hooks-") as tmp:
        work = Path(tmp) / "checkout"
        work.mkdir()
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        server = start_server(Path(tmp) / "data")
        try:
            rows = measure(server.url, work, args.runs)
        finally:
            server.stop()
    floor = statistics.median(timed_python() for _ in range(args.runs))
    print("hook per event, ctxd up: seconds from start to exit 0 (median)")
    print(f"  {'python start-up with the hook imports (floor)':<52} {floor:>6.3f} s")
    for name, seconds in rows:
        print(f"  {name:<52} {seconds:>6.3f} s")


def measure(url: str, work: Path, runs: int) -> list[tuple[str, float]]:
    bash = {"tool_name": "Bash", "tool_input": {"command": "make test"},
            "tool_response": {"stdout": "ok", "stderr": ""}}  # fmt: skip
    plain = event("UserPromptSubmit", work, prompt="make the loader faster")
    hook_seconds(url, event("SessionStart", work, source="startup"))  # binds the conversation
    hook_seconds(url, plain)  # the first prompt: the objective
    cases = [
        ("SessionStart (startup)", event("SessionStart", work, source="startup")),
        ("UserPromptSubmit (a prompt)", plain),
        ("PostToolUse (Bash; asynchronous)", event("PostToolUse", work, **bash)),
        ("Stop", event("Stop", work)),
        ('UserPromptSubmit ("continue": a fresh dump)', {**plain, "prompt": "continue"}),
        ("SessionEnd", event("SessionEnd", work, reason="other")),
    ]
    return [
        (name, statistics.median(hook_seconds(url, body) for _ in range(runs)))
        for name, body in cases
    ]


if __name__ == "__main__":
    main()
