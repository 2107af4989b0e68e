"""Sessions keyed the way Claude Code works: by its `session_id` within the checkout, through
the real hook command run by stand-ins for Claude Code processes, against a real server. Two
agents at once get two sessions; `/clear` and a restart after a crash continue the checkout's
latest; sub-agents count as their parent."""

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server

A, B, C = (f"{n}f1c2a9e-5b7d-4c1e-9a0b-7e2d8c6f4a1{n}" for n in (1, 2, 3))


# A stand-in for one Claude Code process: it runs `ctxd hook claude` for each event it is
# given, as Claude Code does, and stays alive until it is closed or "crashes" (is killed).
HARNESS = """
import subprocess, sys
for line in sys.stdin:
    done = subprocess.run(sys.argv[1:], input=line, capture_output=True, text=True)
    print(json.dumps([done.returncode, done.stdout, done.stderr]), flush=True)
"""


class ClaudeProcess:
    def __init__(self, url: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
        self.process = subprocess.Popen(
            [sys.executable, "-c", "import json\n" + HARNESS,
             sys.executable, "-m", "ctxd", "--url", url, "hook", "claude"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip

    def hook(self, body: dict) -> dict:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps(body) + "\n")
        self.process.stdin.flush()
        status, out, err = json.loads(self.process.stdout.readline())
        assert status == 0 and not err, err
        return json.loads(out) if out.strip() else {}

    def crash(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def claude(server: Server) -> Iterator[Callable[[], ClaudeProcess]]:
    started: list[ClaudeProcess] = []

    def start() -> ClaudeProcess:
        started.append(ClaudeProcess(server.url))
        return started[-1]

    yield start
    for one in started:
        if one.process.poll() is None:
            one.crash()


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
    claude: Callable[[], ClaudeProcess], client: httpx.Client, repo: Path
):
    first, second = claude(), claude()
    assert first.hook(event("SessionStart", A, repo, source="startup")) == {}
    first.hook(event("UserPromptSubmit", A, repo / "src", prompt="fix the OOM in the loader"))
    told = second.hook(event("SessionStart", B, repo, source="startup"))
    assert "another agent is recording in `api-server`" in told["systemMessage"]
    second.hook(event("UserPromptSubmit", B, repo, prompt="write the deployment docs"))
    first.hook(bash(A, repo, "pytest tests/test_loader.py -x"))
    second.hook(bash(B, repo, "mkdocs build --strict"))
    # a sub-agent of A reports under A's session_id, with its own agent_id
    first.hook(bash(A, repo, "rg -n 'pin_memory' src", agent_id="a1b2", agent_type="Explore"))

    sessions = client.get("/api/sessions", params={"cwd": str(repo)}).json()
    ids = sorted(s["id"] for s in sessions)
    assert len(ids) == 2 and ids[0] == "api-server" and ids[1].startswith("api-server-")
    mine, theirs = commands_of(client, "api-server"), commands_of(client, ids[1])
    assert "pytest tests/test_loader.py" in mine and "rg -n 'pin_memory' src" in mine
    assert "mkdocs build" not in mine
    assert "mkdocs build --strict" in theirs and "pytest tests/test_loader.py" not in theirs


def test_clear_and_a_restart_after_a_crash_continue_the_latest_session(
    claude: Callable[[], ClaudeProcess], client: httpx.Client, repo: Path
):
    first = claude()
    first.hook(event("SessionStart", A, repo, source="startup"))
    first.hook(event("UserPromptSubmit", A, repo, prompt="make the p99 latency < 50 ms"))
    first.hook(bash(A, repo, "nohup ./bench.sh --rps 2000 > bench.log 2>&1 &"))
    # /clear: Claude Code ends the conversation, then starts a new one with source "clear"
    assert first.hook(event("SessionEnd", A, repo, reason="clear")) == {}
    cleared = first.hook(event("SessionStart", B, repo, source="clear"))
    said = cleared["hookSpecificOutput"]["additionalContext"]
    assert "session `api-server`" in said and "make the p99 latency < 50 ms" in said
    assert "bench.sh --rps 2000" in said
    first.hook(bash(B, repo, "./bench.sh --rps 4000"))

    # that Claude Code dies without a SessionEnd; a fresh start continues its session
    first.crash()
    restarted = claude().hook(event("SessionStart", C, repo, source="startup"))
    assert restarted["systemMessage"].startswith(
        "ctxd: recording in `api-server`, this checkout's latest session"
    )
    assert "hookSpecificOutput" not in restarted  # a pointer, not a dump, at a fresh start
    sessions = client.get("/api/sessions", params={"cwd": str(repo)}).json()
    assert [s["id"] for s in sessions] == ["api-server"]


def test_a_conversation_that_moves_to_another_checkout_is_placed_there(
    claude: Callable[[], ClaudeProcess], client: httpx.Client, tmp_path: Path, repo: Path
):
    other = tmp_path / "web-client"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    agent = claude()
    agent.hook(bash(A, repo, "make api"))
    agent.hook(bash(A, other, "npm run build"))
    assert "npm run build" in commands_of(client, "web-client")
    assert "npm run build" not in commands_of(client, "api-server")


SHOW_LIVE_S = "from ctxd.settings import Settings; print(Settings().conversation_live_s)"


@pytest.mark.parametrize(
    ("value", "seconds"), [("120", 120.0), ("ten minutes", 600.0), ("-5", 600.0), ("nan", 600.0)]
)
def test_a_bad_conversation_live_s_is_the_default_not_a_crash(value: str, seconds: float):
    done = subprocess.run(
        [sys.executable, "-c", SHOW_LIVE_S],
        env={**os.environ, "CTXD_CONVERSATION_LIVE_S": value}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == seconds
