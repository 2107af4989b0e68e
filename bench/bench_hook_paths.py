"""What one tool call costs on each harness's hook path, next to a bare interpreter's start.

Run: .venv/bin/python -m bench.bench_hook_paths [--runs 15] [--record]

Against a real `ctxd serve`, in a fresh git checkout, one conversation per harness, the tool
call a shell command, as each harness sends it:
- Claude Code posts the hook's JSON itself (an HTTP hook): no process; one POST, timed here;
- opencode's plugin posts from opencode's own process: no process; one POST, timed here;
- Codex and Gemini run the command hook an install writes (`python -S -I
  …/ctxd/hookclient/__main__.py hook codex|gemini`), and wait for it; so does Claude Code's
  SessionStart (a fresh start: no dump to build);
- `ctxd hook codex`, the console script, beside them: what an install wrote before.
A command's process alone is the same command against a listener that answers every request
at once (`Answerer`): what the hook costs beyond the service's own work, which no command can
save. The ratios are to `python -S -I -c pass`, the
cheapest process a command hook could be; all rows are interleaved, so each sees the same load
on a shared machine. `--record` appends the figures to bench/results.jsonl.
"""

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
from ctxd.harness.adapter import hook_command

from bench import table
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


class Answerer:
    """A loopback listener that answers every request `200 {}` at once, on its own thread."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with conn:
                data = b""
                while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                while len(body) < length and (chunk := conn.recv(65536)):
                    body += chunk
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    def close(self) -> None:
        self.sock.close()


def command(url: str, argv: list[str], body: dict[str, object]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    done = subprocess.run(
        argv, input=json.dumps(body), capture_output=True, text=True, env=env, timeout=60
    )
    if done.returncode != 0 or done.stderr:
        raise SystemExit(f"{shlex.join(argv)} failed: {done.stderr}")


def installed(url: str, harness: str) -> list[str]:
    """The hook command `ctxd install` writes for `harness` against `url`."""
    return shlex.split(hook_command(harness, url))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--record", action="store_true", help="append to bench/results.jsonl")
    args = parser.parse_args()
    bare_argv = [sys.executable, "-S", "-I", "-c", "pass"]
    with tempfile.TemporaryDirectory(prefix="ctxd-bench-paths-") as tmp:
        work = Path(tmp) / "checkout"
        work.mkdir()
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        server = start_server(Path(tmp) / "data")
        answers = Answerer()
        try:
            bodies = payloads(work)
            start = {**bodies["claude"], "hook_event_name": "SessionStart", "source": "startup"}
            for drop in ("tool_name", "tool_input", "tool_response"):
                start.pop(drop)
            script = str(Path(sys.executable).with_name("ctxd"))  # the console script
            # the harness's own HTTP client, kept between events as theirs is (a client made
            # per request would time httpx's set-up, not the hook path)
            with httpx.Client(base_url=server.url, timeout=30) as client:

                def posted(route: str, body: dict[str, object]) -> Callable[[], object]:
                    return lambda: client.post(route, json=body).raise_for_status()

                paths: dict[str, Callable[[], object]] = {
                    "bare": lambda: subprocess.run(bare_argv, check=True),
                    "claude": posted("/api/hooks/claude/http", bodies["claude"]),
                    "opencode": posted("/api/hooks/opencode", bodies["opencode"]),
                    "codex": lambda: command(server.url, installed(server.url, "codex"),
                                             bodies["codex"]),
                    "gemini": lambda: command(server.url, installed(server.url, "gemini"),
                                              bodies["gemini"]),
                    "claude-start": lambda: command(server.url, installed(server.url, "claude"),
                                                    start),
                    "codex-script": lambda: command(
                        server.url, [script, "--url", server.url, "hook", "codex"],
                        bodies["codex"]),
                    "codex-alone": lambda: command(answers.url, installed(answers.url, "codex"),
                                                   bodies["codex"]),
                    "gemini-alone": lambda: command(answers.url, installed(answers.url, "gemini"),
                                                    bodies["gemini"]),
                    "claude-start-alone": lambda: command(
                        answers.url, installed(answers.url, "claude"), start),
                    "codex-script-alone": lambda: command(
                        answers.url, [script, "--url", answers.url, "hook", "codex"],
                        bodies["codex"]),
                }  # fmt: skip
                for each in paths.values():  # the first binds each conversation
                    each()
                took: dict[str, list[float]] = {name: [] for name in paths}
                for _ in range(args.runs):
                    for name, each in paths.items():
                        took[name] += timed(each, 1)
        finally:
            server.stop()
            answers.close()
    ms = {name: statistics.median(times) for name, times in took.items()}
    bare = ms["bare"]
    print("one event on each harness's hook path (median ms of", args.runs, "interleaved runs)")
    print(f"  {'bare interpreter start (python -S -I -c pass)':<60} {bare:7.1f} ms")
    rows = [
        ("claude", "claude: PostToolUse, an HTTP hook (Claude Code posts it)"),
        ("opencode", "opencode: its plugin posts, no process"),
        ("codex", "codex: the installed command, waited for"),
        ("gemini", "gemini: the installed command, waited for"),
        ("claude-start", "claude: SessionStart, the installed command"),
        ("codex-script", "codex: `ctxd hook codex` (the console script)"),
    ]
    for name, label in rows:
        print(f"  {label:<60} {ms[name]:7.1f} ms   {ms[name] / bare:4.1f}x")
    print("  the process alone (the same command against a listener that answers at once):")
    figures: dict[str, float] = {"hook_bare_ms": bare}
    for name in ("codex", "gemini", "claude-start", "codex-script"):
        alone = ms[f"{name}-alone"]
        print(f"  {'  ' + name:<60} {alone:7.1f} ms   {alone / bare:4.1f}x")
        key = name.replace("-", "_")
        figures[f"hook_{key}_ms"] = ms[name]
        figures[f"hook_{key}_process_ms"] = alone
        figures[f"hook_{key}_process_ratio"] = alone / bare
    figures["hook_claude_http_ms"] = ms["claude"]
    figures["hook_opencode_ms"] = ms["opencode"]
    if args.record:
        table.append_results(figures, "hook_paths")


if __name__ == "__main__":
    main()
