"""How long a Claude Code hook keeps the agent waiting when ctxd is down, or up but mute.

Run: .venv/bin/python -m bench.bench_hooks [--runs 5]
Prints the median seconds from start to exit of `ctxd hook claude` (SessionStart, compact) with
the default read timeout against: a port nobody listens on (refused), and a listener that
accepts and never answers (a hung ctxd). The README's "exits 0 at once" is the first row; the
second is bounded by CTXD_HOOK_TIMEOUT (30 s by default), so it is timed with 1 s and 30 s.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

EVENT = json.dumps({"hook_event_name": "SessionStart", "source": "compact", "cwd": "/tmp"})


def hook_seconds(url: str, timeout: str | None) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    env["CTXD_AUTOSTART"] = "0"  # "down" stays down: the hook's own cost is measured
    if timeout is not None:
        env["CTXD_HOOK_TIMEOUT"] = timeout
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", url, "hook", "claude"],
        input=EVENT, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the hook exited {done.returncode}: {done.stderr}")
    return elapsed


def mute_listener() -> tuple[str, socket.socket]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", listener


def refused_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    mute, listener = mute_listener()
    python = statistics.median(
        timed_python() for _ in range(args.runs)
    )  # the floor: a Python start-up with the hook's imports
    rows = [
        ("python start-up with the hook's imports (floor)", python),
        ("ctxd down (connection refused)", _median(refused_url(), None, args.runs)),
        ("ctxd mute, CTXD_HOOK_TIMEOUT=1", _median(mute, "1", args.runs)),
        ("ctxd mute, default timeout (30 s)", _median(mute, None, 1)),
    ]
    listener.close()
    print("hook: seconds from start to exit 0 (median)")
    for name, seconds in rows:
        print(f"  {name:<50} {seconds:>8.2f} s")


def timed_python() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import ctxd.hookclient.hook"], check=True)
    return time.perf_counter() - started


def _median(url: str, timeout: str | None, runs: int) -> float:
    return statistics.median(hook_seconds(url, timeout) for _ in range(runs))


if __name__ == "__main__":
    main()
