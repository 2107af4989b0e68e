"""The discovery pieces together on real processes: a Claude Code Bash payload that launches
a server with nohup and a log redirect, then a debug relaunch, with no watch added by hand."""

import os
import shlex
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from ctxd.attempts.flags import flag_diff, summary_line
from ctxd.collectors import CollectContext, processes
from ctxd.discovery import actions, procscan, rules
from ctxd.discovery.actions import CommandAction
from ctxd.discovery.shellparse import parse_command
from ctxd.discovery.workspace import git_section
from ctxd.harness import claude
from ctxd.hookclient.hook import git_root
from ctxd.models import Watch, WatchIn
from ctxd.settings import Settings

from tests.conftest import wait_until

SERVER = """
import socket, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen()
print("listening on", port, flush=True)
time.sleep(120)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(work: Path, args: str) -> tuple[subprocess.Popen, str]:
    """Runs what the agent's `nohup … > server.log 2>&1 &` runs, as a child we can reap."""
    command = f"cd {shlex.quote(str(work))} && nohup python serve.py {args} > server.log 2>&1 &"
    with open(work / "server.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "serve.py", *args.split()],
            cwd=work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    return proc, command


def wait_listening(port: int) -> None:
    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_until(listening, f"port {port} listening")


def bash_payload(command: str, cwd: Path) -> dict:
    return {
        "hook_event_name": "PostToolUse",
        "session_id": "s",
        "cwd": str(cwd),
        "tool_name": "Bash",
        "tool_use_id": "toolu_1",
        "tool_input": {"command": command},
        "tool_response": {"stdout": "", "stderr": "", "interrupted": False},
    }


def roots(work: Path) -> list[procscan.Candidate]:
    return procscan.roots(procscan.workspace_processes([str(work)], min_age_s=0))


def test_launch_then_debug_relaunch_discovered_without_watches(tmp_path: Path) -> None:
    work = tmp_path / "checkout"
    work.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    (work / "serve.py").write_text(SERVER)
    port = free_port()
    first, command = launch(work, f"--port {port} --tp 2")
    second = None
    try:
        (action,) = [
            actions.parse_action(a)
            for a in claude.tool_actions(bash_payload(command, work / "sub" / ".."))
        ]
        assert isinstance(action, CommandAction) and action.exit_status == 0
        workspace = git_root(action.cwd or "")  # the session's scope: the hook's `root`
        assert workspace == str(work)
        facts = parse_command(action.command)
        proposals = rules.propose_for_command(facts, cwd=action.cwd, at=action.at)
        by_kind = {p["kind"]: p for p in proposals}
        assert by_kind["process"]["match"] == r"serve\.py"
        assert by_kind["process"]["expect_ports"] == [port] and "port" not in by_kind
        log_path = by_kind["log"]["path"]

        wait_listening(port)
        # The kernel agrees with the parse: fd 1 of the launched root is the same log file.
        (root,) = procscan.roots(procscan.workspace_processes([workspace], min_age_s=0))
        assert root.pid == first.pid
        assert procscan.stdio_files(root.pid) == [log_path]
        machine = rules.propose_from_machine(
            [(root, procscan.stdio_files(root.pid))], existing=proposals
        )
        assert machine == []  # the command already proposed both

        # The process watch the command proposed shows its root listening on the port.
        fields = {k: v for k, v in by_kind["process"].items() if k not in ("auto", "reason")}
        spec = WatchIn.model_validate(fields).root
        watch = Watch(id=1, session="s", created_at=datetime.now(UTC), spec=spec)
        section = processes.collect([watch], CollectContext(settings=Settings()))
        assert {row.pid: row.listening for row in section.items}[root.pid] == [port]

        os.killpg(first.pid, 9)
        first.wait(timeout=10)
        assert roots(work) == []

        second, _ = launch(work, f"--port {port} --tp 2 --disable-cuda-graph --log-level debug")
        wait_listening(port)
        (relaunched,) = roots(work)
        assert relaunched.pid == second.pid
        assert summary_line(flag_diff(root.argv, relaunched.argv)) == (
            "relaunched with --disable-cuda-graph, --log-level debug added"
        )
        section = git_section(workspace)
        assert section is not None and "server.log" in section.dirty
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=10)


def test_the_workspace_line_tells_source_changes_from_outputs(tmp_path: Path):
    """A tracked file edited since HEAD is named with its line counts, apart from what is not
    in git at all (logs, a build's output), which a reader must not take for code changes."""
    from ctxd.models import Session
    from ctxd.snapshotter.agent_context import _workspace
    from ctxd.store.database import Store

    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "serve.py").write_text("a = 1\nb = 2\n")
    subprocess.run([*git, "add", "serve.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    (tmp_path / "serve.py").write_text("a = 1\nb = 3\nc = 4\n")
    (tmp_path / "server.log").write_text("up\n")
    section = git_section(str(tmp_path))
    assert section is not None
    assert section.lines == {"serve.py": "+2 -1"} and section.untracked == {"server.log"}
    at = datetime.now(UTC)
    times = {"created_at": at, "updated_at": at, "last_activity_at": at}
    session = Session.model_validate({"id": "w", "cwd": str(tmp_path), **times})
    line = _workspace(Store(tmp_path / "ctxd.db"), session, section) or ""
    assert "changed since HEAD: serve.py (+2 -1)" in line and "not in git: server.log" in line
