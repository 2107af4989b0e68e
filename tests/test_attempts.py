"""Attempts are the dump's spine: an attempt is born with the agent's command, so one that dies
before ctxd sees its process is still there, with its flags and its own log's error; an old
error is never pinned on the live attempt; a same-named process of another directory never
enters this session's dump. Real processes, started by real shell lines, reported through
the hook endpoint as Claude Code reports them."""

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx

from tests.conftest import Server, tagged, wait_until

# A stand-in for an inference server: with --max-model-len 32768 it dies at once with the
# error a real one prints; otherwise it waits for workers that never report.
SERVER = textwrap.dedent(
    """
    import sys, time
    args = sys.argv[1:]
    if "32768" in args:
        print("Loading model...", flush=True)
        print("Traceback (most recent call last):", file=sys.stderr)
        print('  File "serve.py", line 9, in <module>', file=sys.stderr)
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB",
              file=sys.stderr)
        sys.exit(1)
    print("Waiting for workers to report ready", flush=True)
    time.sleep(600)
    """
)


def _hook(server: Server, workspace: Path, event: str, **fields: object) -> httpx.Response:
    payload = {"hook_event_name": event, "session_id": "conv-1", "cwd": str(workspace), **fields}
    answer = httpx.post(f"{server.url}/api/hooks/claude", json={"payload": payload}, timeout=60)
    answer.raise_for_status()
    return answer


def _run(server: Server, workspace: Path, command: str, n: int) -> None:
    """Run the line for real, as the agent's Bash tool would, then report it as Claude Code
    does (PostToolUse); the background launch goes on by itself."""
    subprocess.run(["bash", "-c", command], cwd=workspace, check=True, timeout=30)
    _hook(server, workspace, "PostToolUse", tool_name="Bash", tool_use_id=f"toolu_{n}",
          tool_input={"command": command},
          tool_response={"stdout": "", "stderr": "", "interrupted": False})  # fmt: skip


def _versions(server: Server, sid: str) -> int:
    return len(httpx.get(f"{server.url}/api/sessions/{sid}/snapshots").json())


def _workspace(tmp_path: Path, name: str) -> Path:
    workspace = tmp_path / name
    (workspace / "logs").mkdir(parents=True)
    (workspace / "serve.py").write_text(SERVER)
    return workspace


def test_a_launch_that_dies_at_once_is_an_attempt_with_its_command_and_its_logs_error(
    rooted_server: Server, tmp_path: Path, tag: str
):
    server = rooted_server
    workspace = _workspace(tmp_path, "kimi")
    _hook(server, workspace, "UserPromptSubmit", prompt="Serve Kimi with a longer context")
    sid = "kimi"
    first = (f"nohup {sys.executable} serve.py --max-model-len 32768 --port 30777 --tag {tag}"
             " > logs/attempt1.log 2>&1 &")  # fmt: skip
    _run(server, workspace, first, 1)
    wait_until(lambda: _versions(server, sid) >= 1, "the settling snapshot of the first launch")
    time.sleep(1.5)  # the agent reads the log a moment; a kernel start time is 1 s coarse
    second = (f"nohup {sys.executable} serve.py --max-model-len 8192 --port 30777 --tag {tag}"
              " > logs/attempt2.log 2>&1 &")  # fmt: skip
    before = _versions(server, sid)
    _run(server, workspace, second, 2)
    wait_until(lambda: _versions(server, sid) > before, "the settling snapshot of the relaunch")
    (live,) = [pid for pid in tagged(tag) if b"8192" in Path(f"/proc/{pid}/cmdline").read_bytes()]

    dump = _hook(server, workspace, "UserPromptSubmit", prompt="continue").json()["context"]
    attempts = dump.split("## Attempts", 1)[1].split("\n## ", 1)[0]
    one, two = [line for line in attempts.splitlines() if line.startswith("| **attempt")]
    # the first launch was never seen running, and still is an attempt, with its flags
    failed = attempts.split("Attempt 1 (the newest that died), as you wrote it:", 1)[1]
    assert (
        "--max-model-len 32768" in failed.split("```")[1]
        and "its process gone before ctxd first scanned for it" in one
    )
    assert "torch.OutOfMemoryError: CUDA out of memory" in one and "attempt1.log" in one
    # the relaunch is attempt 2, running, with its pid and what changed from attempt 1
    assert f"(pid {live})" in two and "running for" in two and "--max-model-len 32768 → 8192" in two
    assert "OutOfMemoryError" not in two
    # Now never blames the dead attempt's error on the live one
    now = dump.split("## Now", 1)[1].split("\n## ", 1)[0]
    for line in now.splitlines():
        if f"pid {live}" in line or "30777 not listening" in line:
            assert "OutOfMemoryError" not in line, line


def test_a_same_named_launcher_of_another_directory_stays_out_of_this_sessions_dump(
    rooted_server: Server, tmp_path: Path, tag: str
):
    server = rooted_server
    mine, theirs = _workspace(tmp_path, "mine"), _workspace(tmp_path, "theirs")
    # someone else's job, started by hand in another directory, with the same program name
    subprocess.Popen([sys.executable, "serve.py", "--port", "30778", "--tag", tag],
                     cwd=theirs, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)  # fmt: skip
    _hook(server, mine, "UserPromptSubmit", prompt="Serve the model here")
    line = (f"nohup {sys.executable} serve.py --port 30779 --tag {tag}"
            " > logs/serve.log 2>&1 &")  # fmt: skip
    _run(server, mine, line, 1)
    wait_until(lambda: _versions(server, "mine") >= 1, "the settling snapshot")
    wait_until(lambda: len(tagged(tag)) == 2, "both launchers running")
    pids = {pid: Path(f"/proc/{pid}/cwd").resolve() for pid in tagged(tag)}
    (my_pid,) = [pid for pid, cwd in pids.items() if cwd == mine]
    (their_pid,) = [pid for pid, cwd in pids.items() if cwd == theirs]

    dump = _hook(server, mine, "UserPromptSubmit", prompt="continue").json()["context"]
    assert f"pid {my_pid}" in dump and f"| {my_pid} " in dump  # its attempt and its row
    assert str(their_pid) not in dump
    watches = httpx.get(f"{server.url}/api/sessions/mine/watches").json()
    process = [w["spec"] for w in watches if w["spec"]["kind"] == "process"]
    assert process and all(spec["cwd"] == str(mine) for spec in process)
