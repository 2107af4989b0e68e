"""The agent never waits blind (issue 40): `ctxd hook claude --wake`, the waiter Claude Code
runs in the background after a launch, long-polls ctxd and exits 2 with the attempt's news as
soon as it comes (Claude Code then wakes the idle model with that text), once per outcome.

Real servers, real processes and real waiter commands; the trigger loop is made quick so an
exit is seen within a second or two."""

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import Server, start_server, stop_server, tagged

QUICK = {"CTXD_EVENT_PROBE_S": "0.5", "CTXD_TRIGGER_INTERVAL_S": "0.25",
         "CTXD_EVENT_MIN_GAP_S": "0", "CTXD_STUCK_AFTER_S": "4"}  # fmt: skip

# Up for a while, then dies with its error in its log, as an OOM'd server does.
DIES = """\
import sys, time
print("loading weights", flush=True)
time.sleep(float(sys.argv[1]))
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr)
sys.exit(1)
"""


@pytest.fixture
def quick_server(tmp_path: Path) -> Iterator[Server]:
    env = {**QUICK, "CTXD_WATCH_ROOTS": f'["{tmp_path}"]'}
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        yield srv
    finally:
        stop_server(srv)


def tool_call(work: Path, command: str, n: int = 1) -> dict:
    return {"hook_event_name": "PostToolUse", "session_id": "conv-wake", "cwd": str(work),
            "tool_name": "Bash", "tool_use_id": f"toolu_{n}",
            "tool_input": {"command": command, "run_in_background": False},
            "tool_response": {"stdout": "", "stderr": "", "interrupted": False}}  # fmt: skip


def launch(server: Server, work: Path, command: str, n: int = 1) -> dict:
    """Run `command` for real and report it as Claude Code's PostToolUse hook does."""
    subprocess.run(["bash", "-c", command], cwd=work, check=True, timeout=30)
    payload = tool_call(work, command, n)
    answer = httpx.post(f"{server.url}/api/hooks/claude", json={"payload": payload}, timeout=30)
    assert answer.status_code == 200, answer.text
    return payload


def waiter(server: Server, payload: dict, home: Path, **env: str) -> subprocess.Popen:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    return subprocess.Popen(
        [sys.executable, "-m", "ctxd", "--url", server.url, "hook", "claude", "--wake"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**environ, "HOME": str(home), **env},
    )  # fmt: skip


def started(proc: subprocess.Popen, payload: dict) -> subprocess.Popen:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(payload))
    proc.stdin.close()
    proc.stdin = None  # closed: communicate() must not flush it
    return proc


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    top = tmp_path / "work"
    top.mkdir()
    (top / "serve.py").write_text(DIES)
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    yield top
    for proc in psutil.process_iter(["cwd"]):  # this test's own: they work in its folder
        if proc.info["cwd"] and Path(proc.info["cwd"]).is_relative_to(top):
            proc.kill()


def test_a_launch_that_dies_wakes_the_agent_once_with_its_error(
    quick_server: Server, work: Path, tmp_path: Path, tag: str
) -> None:
    server = quick_server
    command = f"nohup {sys.executable} serve.py 3 --tag {tag} > serve.log 2>&1 &"
    payload = launch(server, work, command)
    first = started(waiter(server, payload, tmp_path), payload)
    time.sleep(1)  # it holds the conversation's waiter lock by now
    # a second waiter of the same conversation goes at once: one waiter per session
    second = started(waiter(server, payload, tmp_path), payload)
    assert second.wait(timeout=20) == 0 and first.poll() is None, second.stderr.read()
    (pid,) = tagged(tag)
    psutil.Process(pid).wait(timeout=30)
    died = time.monotonic()
    _, said = first.communicate(timeout=60)
    assert first.returncode == 2, said  # exit 2: Claude Code wakes the model with stderr
    took = time.monotonic() - died
    assert "attempt 1" in said and "died" in said and "OutOfMemoryError" in said, said
    assert f"pid {pid}" in said and "serve.log" in said and "ctxd resume" in said, said
    assert took < 15, took  # generous: the bench measures it (seconds after the death)
    # delivered once: the waiter of the turn's end has nothing pending and nothing to tell
    stop = {"hook_event_name": "Stop", "session_id": "conv-wake", "cwd": str(work),
            "stop_hook_active": True, "last_assistant_message": "It died; looking."}  # fmt: skip
    again = started(waiter(server, stop, tmp_path), stop)
    assert again.wait(timeout=30) == 0 and again.stderr is not None and not again.stderr.read()


def test_an_attempt_the_agent_killed_itself_wakes_nobody(
    quick_server: Server, work: Path, tmp_path: Path, tag: str
) -> None:
    server = quick_server
    command = f"nohup {sys.executable} serve.py 600 --tag {tag} > serve.log 2>&1 &"
    payload = launch(server, work, command)
    proc = started(waiter(server, payload, tmp_path, CTXD_WAKE_MAX_S="12"), payload)
    time.sleep(2)
    (pid,) = tagged(tag)
    launch(server, work, f"kill {pid}", n=2)
    assert proc.wait(timeout=60) == 0  # its ceiling passed with no news
    assert proc.stderr is not None and not proc.stderr.read()


def test_no_waiter_with_ctxd_wake_0_nor_for_a_command_that_launches_nothing(
    quick_server: Server, work: Path, tmp_path: Path
) -> None:
    server = quick_server
    off = started(waiter(server, tool_call(work, "sleep 1 &"), tmp_path, CTXD_WAKE="0"),
                  tool_call(work, "sleep 1 &"))  # fmt: skip
    plain = started(waiter(server, tool_call(work, "ls -l"), tmp_path), tool_call(work, "ls -l"))
    assert off.wait(timeout=20) == 0 and plain.wait(timeout=20) == 0
