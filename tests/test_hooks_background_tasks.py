"""Attempts reconciled with Claude Code's own list of its background shells in flight
(`background_tasks` on Stop and SubagentStop, as its 2.1.197 binary builds it: id, type,
status "running" or "pending", command): a call the harness says runs is running though ctxd
never saw its process; a call that left the list has ended; an attempt bound to a process is
the kernel's to judge; a line that sends something off itself is not judged by its task."""

import json
import os
import subprocess
import sys
import threading
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psutil
import pytest
from ctxd.attempts import reconcile
from ctxd.attempts.binding import LogFiles
from ctxd.attempts.model import Attempt, AttemptUpdate, reported
from ctxd.harness.claude import ADAPTER as CLAUDE
from ctxd.models import SessionIn
from ctxd.settings import Limits
from ctxd.store.database import Store

from tests.conftest import Server, wait_until
from tests.scripted_model import ScriptedModel, Step
from tests.test_harness_claude import CLAUDE as CLAUDE_CLI
from tests.test_harness_claude import claude

CONVERSATION = "0f4c2a9e-7b1d-4e55-9a3c-5d2e8f6b7c10"
TRAIN = "python3 train.py --epochs 3 --lr 3e-4"


def post(client: httpx.Client, name: str, cwd: Path, **fields: object) -> dict:
    """One event as Claude Code's HTTP hook posts it: its own JSON, no process in between."""
    payload = {"hook_event_name": name, "session_id": CONVERSATION, "cwd": str(cwd),
               "transcript_path": "", **fields}  # fmt: skip
    said = client.post("/api/hooks/claude/http", json=payload)
    assert said.status_code == 200, said.text
    return dict(said.json())


def shell(task_id: str, command: str, status: str = "running") -> dict[str, str]:
    return {"id": task_id, "type": "shell", "status": status, "description": "train",
            "command": command}  # fmt: skip


def the_attempt(server: Server, sid: str) -> Attempt:
    (attempt,) = Store(server.data_dir / "ctxd.db").list_attempts(sid)
    return attempt


def test_a_background_call_runs_while_claude_code_lists_it_and_ends_when_it_leaves_the_list(
    server: Server, client: httpx.Client, tmp_path: Path
) -> None:
    work = tmp_path / "trainer"
    work.mkdir()
    post(client, "UserPromptSubmit", work, prompt="train the model in the background")
    # its process runs where ctxd cannot see it (a container, another pid namespace): ctxd
    # judges the attempt by what it sees, and ends it as never seen running
    post(client, "PostToolUse", work, tool_name="Bash", tool_use_id="toolu_train",
         tool_input={"command": TRAIN, "run_in_background": True},
         tool_response={"stdout": "", "stderr": "", "interrupted": False,
                        "backgroundTaskId": "b7x2k"})  # fmt: skip
    sid = client.get("/api/sessions").json()[0]["id"]
    wait_until(lambda: the_attempt(server, sid).ended_at is not None, "ctxd ending it unseen")
    assert not the_attempt(server, sid).seen

    # Claude Code says it is in flight: it runs, and a snapshot does not end it again
    post(client, "Stop", work, stop_hook_active=False, last_assistant_message="Training.",
         background_tasks=[shell("b7x2k", TRAIN),
                           {"id": "a1", "type": "subagent", "status": "running",
                            "description": "review", "agent_type": "reviewer"}])  # fmt: skip
    running = the_attempt(server, sid)
    assert running.ended_at is None and running.seen and running.pid is None
    taken = client.post(f"/api/sessions/{sid}/snapshots", json={"force": True})
    assert taken.status_code == 201, taken.text
    assert the_attempt(server, sid).ended_at is None
    dump = client.get(f"/api/sessions/{sid}/resume").text
    assert "running for" in dump and "its process gone before ctxd first scanned" not in dump

    # a subagent's stop lists it still: nothing changes
    post(client, "SubagentStop", work, stop_hook_active=False, agent_id="a1",
         agent_transcript_path="", agent_type="reviewer",
         background_tasks=[shell("b7x2k", TRAIN, "pending")])  # fmt: skip
    assert the_attempt(server, sid).ended_at is None

    # gone from the list: it ended, by the moment Claude Code said so
    before = datetime.now(UTC)
    post(client, "Stop", work, stop_hook_active=False, background_tasks=[])
    ended = the_attempt(server, sid).ended_at
    assert ended is not None and ended >= before - timedelta(seconds=1)

    # a Stop that carries no list (an older release) changes nothing
    post(client, "Stop", work, stop_hook_active=False)
    assert the_attempt(server, sid).ended_at == ended


def test_the_adapter_reads_only_shells_in_flight() -> None:
    tasks = [
        shell("b1", "sleep 100"),
        shell("b2", "make", "pending"),
        shell("b3", "done already", "completed"),
        {"id": "a1", "type": "subagent", "status": "running", "description": "x"},
        {"id": "b4", "type": "shell", "status": "running"},  # no command
        "not a task",
    ]
    stop = {"hook_event_name": "Stop", "session_id": "c", "background_tasks": tasks}
    assert CLAUDE.event(stop).in_flight == ("sleep 100", "make")
    assert CLAUDE.event({**stop, "background_tasks": None}).in_flight is None
    assert CLAUDE.event({"hook_event_name": "Stop", "session_id": "c"}).in_flight is None
    sub = {**stop, "hook_event_name": "SubagentStop"}
    assert CLAUDE.event(sub).in_flight == ("sleep 100", "make")


def a_store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())
    return store


def launch(store: Store, command: str, tool_id: str, at: datetime, *, ended: bool = False,
           pid: int | None = None) -> str:  # fmt: skip
    """A background call as the harness reported it, and its attempt (ended unseen, or bound
    to a process `pid`)."""
    body = {"kind": "command", "command": command, "background": True, "tool_id": tool_id,
            "harness": "claude", "cwd": "/w"}  # fmt: skip
    store.add_action("s", "command", at, body)
    key = f"cmd:{uuid.uuid4().hex}"
    attempt = Attempt(pid=None, argv=tuple(command.split()), started_at=at, cwd="/w",
                      command=command, tool_id=tool_id, start_key=key, seen=False)  # fmt: skip
    store.save_attempts("s", [reported(attempt)])
    if ended:
        store.save_attempts("s", [AttemptUpdate(start_key=key, ended_at=at)])
    if pid is not None:
        store.save_attempts("s", [AttemptUpdate(start_key=f"p:{pid}", bound_from=key, pid=pid,
                                                seen=True, watch_id=1)])  # fmt: skip
    return tool_id


FILES = LogFiles((Path("/"),), Limits())


def by_tool(store: Store) -> dict[str | None, Attempt]:
    return {a.tool_id: a for a in store.list_attempts("s")}


def test_a_line_cut_by_the_harness_and_a_line_run_twice_are_matched_to_the_right_calls(
    tmp_path: Path,
) -> None:
    store = a_store(tmp_path)
    at = datetime.now(UTC) - timedelta(minutes=5)
    long_line = "python3 sweep.py " + " ".join(f"--arg{i} {i}" for i in range(150))
    launch(store, long_line, "t_long", at, ended=True)
    launch(store, TRAIN, "t_old", at, ended=True)
    launch(store, TRAIN, "t_new", at + timedelta(seconds=30), ended=True)
    told_line = long_line[:1000] + f"… [+{len(long_line) - 1000} chars]"  # Claude Code's cut
    updates = reconcile.told(store, "s", "claude", [told_line, TRAIN], datetime.now(UTC), FILES)
    reconcile.save(store, "s", updates)
    attempts = by_tool(store)
    assert attempts["t_long"].ended_at is None and attempts["t_long"].seen
    # one of the two runs of the line is in flight: the newest
    assert attempts["t_new"].ended_at is None and attempts["t_old"].ended_at is not None
    # another harness's list says nothing of Claude Code's calls
    assert reconcile.told(store, "s", "codex", [], datetime.now(UTC), FILES) == []


def test_what_the_kernel_follows_and_what_a_line_sent_off_itself_are_not_the_tasks_to_end(
    tmp_path: Path,
) -> None:
    store = a_store(tmp_path)
    at = datetime.now(UTC) - timedelta(seconds=30)
    launch(store, "python3 serve.py --port 18555", "t_bound", at, pid=424242)
    launch(store, "nohup python3 worker.py > worker.log 2>&1 &", "t_nohup", at)
    launch(store, "pytest -q tests", "t_tests", at)
    updates = reconcile.told(store, "s", "claude", [], datetime.now(UTC), FILES)
    reconcile.save(store, "s", updates)
    attempts = by_tool(store)
    assert attempts["t_bound"].ended_at is None  # its process is the kernel's to judge
    assert attempts["t_nohup"].ended_at is None  # the task's shell went; what it sent off may not
    assert attempts["t_tests"].ended_at is not None  # the task was the run: it ended


def test_an_ended_call_takes_the_error_its_log_ended_with(tmp_path: Path) -> None:
    store = a_store(tmp_path)
    log = tmp_path / "train.log"
    at = datetime.now(UTC) - timedelta(seconds=30)
    launch(store, f"python3 train.py > {log} 2>&1", "t_log", at)
    key = by_tool(store)["t_log"].start_key
    store.save_attempts("s", [AttemptUpdate(start_key=key, logs=(str(log),))])
    log.write_text("epoch 1\nTraceback (most recent call last):\n  File \"train.py\", line 3\n"
                   "RuntimeError: CUDA out of memory\n")  # fmt: skip
    files = LogFiles((tmp_path,), Limits())
    reconcile.save(store, "s", reconcile.told(store, "s", "claude", [], datetime.now(UTC), files))
    ended = by_tool(store)["t_log"]
    assert ended.ended_at is not None and ended.error and "CUDA out of memory" in ended.error
    assert ended.error_log == str(log)


class Recorder(ThreadingHTTPServer):
    """A pass-through in front of ctxd that keeps the JSON Claude Code posts to its hooks, so a
    test reads the payload the real CLI sent as ctxd received it."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.posted = upstream, []
        recorder = self

        class Forward(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.command == "POST" and self.path == "/api/hooks/claude/http":
                    recorder.posted.append(json.loads(body))
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length")}  # fmt: skip
                answer = httpx.request(self.command, upstream + self.path, content=body,
                                       headers=headers, timeout=60)  # fmt: skip
                self.send_response(answer.status_code)
                for name, value in answer.headers.items():
                    if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(name, value)
                self.send_header("content-length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = do_POST = do_DELETE = _forward

        super().__init__(("127.0.0.1", 0), Forward)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


SLEEPER = "python3 -c 'import time; time.sleep(40)'"


def test_the_real_cli_lists_a_background_call_by_the_line_ctxd_recorded_it_by(
    server: Server, tmp_path: Path
) -> None:
    """Claude Code 2.1.197 itself, offline: a Bash call sent to the background is in the Stop's
    `background_tasks` under the very line its PostToolUse reported, which ctxd matches."""
    if not CLAUDE_CLI.exists():
        pytest.skip("the Claude Code CLI is not installed (make test installs it with npm)")
    home, work = tmp_path / "home", tmp_path / "trainer"
    home.mkdir()
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    recorder = Recorder(server.url)
    model = ScriptedModel([Step(bash=SLEEPER, background=True), Step(text="It runs.")])
    try:
        subprocess.run(
            [sys.executable, "-m", "ctxd", "--url", recorder.url, "install", "claude"],
            capture_output=True, text=True, check=True, env={**os.environ, "HOME": str(home)},
        )  # fmt: skip
        claude(["-p", "Start the trainer in the background."], work, home, model)
    finally:
        model.close()
        recorder.shutdown()
        recorder.server_close()
        for proc in psutil.process_iter(["cmdline", "cwd"]):  # the sleeper, if it outlived -p
            if proc.info["cwd"] == str(work) and "time.sleep(40)" in " ".join(
                proc.info["cmdline"] or []
            ):
                proc.kill()
    stops = [p for p in recorder.posted if p.get("hook_event_name") == "Stop"]
    assert stops, [p.get("hook_event_name") for p in recorder.posted]
    (shell_task,) = [t for t in stops[-1]["background_tasks"] if t["type"] == "shell"]
    assert shell_task["status"] == "running" and shell_task["command"] == SLEEPER
    in_flight = CLAUDE.event(stops[-1]).in_flight
    assert in_flight == (SLEEPER,)
    sid = httpx.get(f"{server.url}/api/sessions").json()[0]["id"]
    store = Store(server.data_dir / "ctxd.db")
    calls = store.list_actions(sid, "command")
    (call,) = [c for c in calls if c["command"] == SLEEPER]
    assert call["background"] and call["harness"] == "claude"
    assert reconcile.calls_in_flight(calls, in_flight) == {call["tool_id"]}
