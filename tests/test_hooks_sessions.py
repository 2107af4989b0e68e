"""Sessions keyed the way Claude Code works: by its `session_id` within the checkout, through
the real hook command against a real server. Two agents at once get two sessions; `/clear`
and a restart after a crash continue the checkout's latest; sub-agents count as their parent."""

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server

A, B, C = (f"{n}f1c2a9e-5b7d-4c1e-9a0b-7e2d8c6f4a1{n}" for n in (1, 2, 3))


def hook(url: str, body: dict, through_gone_parent: bool = False) -> dict:
    """`ctxd hook claude` as Claude Code runs it. Its harness process is this test's, which
    stays; `through_gone_parent` runs it under a process that exits right after: a Claude
    Code that crashed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    argv = [sys.executable, "-m", "service", "--url", url, "hook", "claude"]
    if through_gone_parent:
        argv = [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])", *argv]
    done = subprocess.run(
        argv, input=json.dumps(body), capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else {}


def event(name: str, conversation: str, cwd: Path, **fields: str) -> dict:
    return {"session_id": conversation, "transcript_path": "", "cwd": str(cwd),
            "hook_event_name": name, **fields}  # fmt: skip


def bash(conversation: str, cwd: Path, command: str, **fields: str) -> dict:
    return {
        **event("PostToolUse", conversation, cwd, tool_name="Bash", **fields),
        "tool_input": {"command": command},
        "tool_response": {"stdout": "", "stderr": ""},
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    top = tmp_path / "api-server"
    (top / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    return top


def commands_of(client: httpx.Client, sid: str) -> str:
    return client.get(f"/api/sessions/{sid}/resume", params={"fresh": "true"}, timeout=60).text


def test_two_agents_in_one_checkout_get_a_session_each(
    server: Server, client: httpx.Client, repo: Path
):
    assert hook(server.url, event("SessionStart", A, repo, source="startup")) == {}
    hook(server.url, event("UserPromptSubmit", A, repo / "src", prompt="fix the OOM in the loader"))
    second = hook(server.url, event("SessionStart", B, repo, source="startup"))
    assert "another agent is recording in `api-server`" in second["systemMessage"]
    hook(server.url, event("UserPromptSubmit", B, repo, prompt="write the deployment docs"))
    hook(server.url, bash(A, repo, "pytest tests/test_loader.py -x"))
    hook(server.url, bash(B, repo, "mkdocs build --strict"))
    # a sub-agent of A reports under A's session_id, with its own agent_id
    hook(server.url, bash(A, repo, "rg -n 'pin_memory' src", agent_id="a1b2", agent_type="Explore"))

    sessions = client.get("/api/sessions", params={"cwd": str(repo)}).json()
    ids = sorted(s["id"] for s in sessions)
    assert len(ids) == 2 and ids[0] == "api-server" and ids[1].startswith("api-server-")
    mine, theirs = commands_of(client, "api-server"), commands_of(client, ids[1])
    assert "pytest tests/test_loader.py" in mine and "rg -n 'pin_memory' src" in mine
    assert "mkdocs build" not in mine
    assert "mkdocs build --strict" in theirs and "pytest tests/test_loader.py" not in theirs


def test_clear_and_a_restart_after_a_crash_continue_the_latest_session(
    server: Server, client: httpx.Client, repo: Path
):
    hook(server.url, event("SessionStart", A, repo, source="startup"))
    hook(server.url, event("UserPromptSubmit", A, repo, prompt="make the p99 latency < 50 ms"))
    hook(server.url, bash(A, repo, "nohup ./bench.sh --rps 2000 > bench.log 2>&1 &"))
    # /clear: Claude Code ends the conversation, then starts a new one with source "clear"
    assert hook(server.url, event("SessionEnd", A, repo, reason="clear")) == {}
    cleared = hook(
        server.url, event("SessionStart", B, repo, source="clear"), through_gone_parent=True
    )
    said = cleared["hookSpecificOutput"]["additionalContext"]
    assert "session `api-server`" in said and "make the p99 latency < 50 ms" in said
    assert "bench.sh --rps 2000" in said
    hook(server.url, bash(B, repo, "./bench.sh --rps 4000"), through_gone_parent=True)

    # B's Claude Code is gone without a SessionEnd (a crash); a fresh start continues it
    restarted = hook(server.url, event("SessionStart", C, repo, source="startup"))
    assert restarted["systemMessage"].startswith(
        "ctxd: recording in `api-server`, this checkout's latest session"
    )
    assert "hookSpecificOutput" not in restarted  # a pointer, not a dump, at a fresh start
    hook(server.url, bash(C, repo, "git stash"))
    sessions = client.get("/api/sessions", params={"cwd": str(repo)}).json()
    assert [s["id"] for s in sessions] == ["api-server"]
    assert "git stash" in commands_of(client, "api-server")
