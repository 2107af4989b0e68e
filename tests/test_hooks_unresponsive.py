"""The hook against a ctxd that accepts connections and never answers: it still exits 0, says
why on stderr and injects nothing. How long it waits is measured in bench/bench_hooks.py."""

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def mute_url() -> Iterator[str]:
    """A listener that accepts every connection, reads what comes, and never replies."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


def run_hook(url: str, event: dict, timeout_s: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    return subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", url, "hook", "claude"],
        input=json.dumps(event), capture_output=True, text=True, timeout=120,
        env={**environ, "CTXD_HOOK_TIMEOUT": timeout_s},
    )  # fmt: skip


@pytest.mark.parametrize(
    "event",
    [
        {"hook_event_name": "SessionStart", "source": "compact"},
        {"hook_event_name": "UserPromptSubmit", "prompt": "continue"},
        {"hook_event_name": "PreCompact", "trigger": "auto"},
        {"hook_event_name": "Stop"},
    ],
)
def test_a_ctxd_that_never_answers_does_not_block_the_agent(
    mute_url: str, event: dict, tmp_path: Path
) -> None:
    # A short read timeout keeps the suite quick; the default (30 s) is what the bench times.
    out = run_hook(mute_url, {**event, "cwd": str(tmp_path), "session_id": "s1"}, "1")
    assert out.returncode == 0, out.stderr
    assert out.stderr.startswith("ctxd hook: ") and "not reachable" in out.stderr, out.stderr
    assert "timed out" in out.stderr and "Traceback" not in out.stderr
    # the person sees why where Claude Code shows hook messages; nothing reaches the model
    told = json.loads(out.stdout) if out.stdout else {}
    assert set(told) <= {"systemMessage"}
    assert ("not reachable" in told.get("systemMessage", "")) == (
        event["hook_event_name"] != "Stop"
    )
