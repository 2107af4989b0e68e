"""What one tool call costs on each harness's hook path, next to a bare interpreter's start.

Run: .venv/bin/python -m bench.bench_hook_paths [--runs 15]

Against a real `ctxd serve`, in a fresh git checkout, one conversation per harness, the tool
call a shell command, as each harness sends it:
- Claude Code posts the hook's JSON itself (an HTTP hook): no process; one POST, timed here;
- opencode's plugin posts from opencode's own process: no process; one POST, timed here;
- Codex and Gemini run a command hook (`ctxd hook codex|gemini`), and wait for it.
The ratio is to `python -S -I -c pass`, the cheapest process a command hook could be.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from bench.scenario import start_server
from bench.timing import timed

COMMAND = "python3 -m pytest -q tests/test_loader.py"
CONVERSATION = "5d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6"


def payloads(work: Path) -> dict[str, dict[str, object]]:
    """A shell tool call, as each harness's hook receives it."""
    common = {"session_id": CONVERSATION, "transcript_path": "", "cwd": str(work)}
    return {
        "claude": {**common, "hook_event_name": "PostToolUse", "tool_name": "Bash",
                   "tool_input": {"command": COMMAND},
                   "tool_response": {"stdout": "3 passed\n", "stderr": "", "interrupted": False}},
        "codex": {**common, "hook_event_name": "PostToolUse", "tool_name": "Bash",
                  "turn_id": "t1", "tool_input": {"command": COMMAND},
                  "tool_response": "3 passed\n"},
        "gemini": {**common, "hook_event_name": "AfterTool", "tool_name": "run_shell_command",
                   "tool_input": {"command": COMMAND},
                   "tool_response": {"llmContent": "3 passed", "returnDisplay": "3 passed"}},
        "opencode": {"root": str(work), "payload": {
            "event": "tool.execute.after", "sessionID": "ses_bench", "cwd": str(work),
            "input": {"tool": "bash", "sessionID": "ses_bench", "callID": "c1",
                      "args": {"command": COMMAND}},
            "output": {"title": COMMAND, "output": "3 passed\n", "metadata": {"exit": 0}},
            "args": {"command": COMMAND}}},
    }  # fmt: skip


def command_hook(url: str, harness: str, body: dict[str, object]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    script = Path(sys.executable).with_name("ctxd")  # the command `ctxd install` writes
    done = subprocess.run(
        [str(script), "--url", url, "hook", harness], input=json.dumps(body),
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"ctxd hook {harness} failed: {done.stderr}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    bare = statistics.median(
        timed(lambda: subprocess.run([sys.executable, "-S", "-I", "-c", "pass"]), args.runs)
    )
    rows: list[tuple[str, str, float]] = []
    with tempfile.TemporaryDirectory(prefix="ctxd-bench-paths-") as tmp:
        work = Path(tmp) / "checkout"
        work.mkdir()
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        server = start_server(Path(tmp) / "data")
        try:
            bodies = payloads(work)
            # the harness's own HTTP client, kept between events as theirs is (a client made
            # per request would time httpx's set-up, not the hook path)
            with httpx.Client(base_url=server.url, timeout=30) as client:
                for harness, route in (("claude", "/api/hooks/claude/http"),
                                       ("opencode", "/api/hooks/opencode")):  # fmt: skip
                    post = lambda r=route, b=bodies[harness]: client.post(  # noqa: E731
                        r, json=b
                    ).raise_for_status()
                    took = timed(post, args.runs + 1)[1:]  # the first binds the conversation
                    rows.append((harness, "POST by the harness, no process",
                                 statistics.median(took)))  # fmt: skip
            for harness in ("codex", "gemini"):
                call = lambda h=harness: command_hook(server.url, h, bodies[h])  # noqa: E731
                took = timed(call, args.runs + 1)[1:]
                rows.append((harness, "`ctxd hook` command, waited for", statistics.median(took)))
        finally:
            server.stop()
    print("one shell tool call on each harness's hook path (median ms; ratio to a bare start)")
    print(f"  {'bare interpreter start (python -S -I -c pass)':<52} {bare:7.1f} ms")
    for harness, how, ms in rows:
        print(f"  {harness + ': ' + how:<52} {ms:7.1f} ms   {ms / bare:4.1f}x")


if __name__ == "__main__":
    main()
