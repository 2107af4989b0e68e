"""An attempt is up when its log prints the line the agent said it waits for (issue 40): the
agent says it with its own wait command (`until grep -q P LOG; do sleep 5; done` sent to the
background, `tail -f LOG | grep -m1 P`), and the idle agent is woken with that line, once.
The reading of wait commands is pure and tested on lines as agents write them; the wake, on a
real server with real processes and the real waiter."""

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from ctxd.snapshotter.line_waits import line_waits

from tests.conftest import Server
from tests.test_wake import (
    launch,
    quick_server,  # noqa: F401  (ctxd with quick event probes, a fixture)
    started,
    tool_call,
    waiter,
    work,  # noqa: F401  (a checkout whose serve.py dies with an OOM error, a fixture)
)

AT = "2026-12-06T10:00:00+00:00"

# Loads for 3 s, says it is ready (writing when, for the test), then serves nothing for a while.
READY = """\
import sys, time
print("loading the model", flush=True)
time.sleep(3)
print("INFO:     Application startup complete.", flush=True)
open("ready_at", "w").write(repr(time.time()))
print("GET /health 200", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize(
    ("command", "path", "line", "other"),
    [
        ('until grep -q "startup complete" serve.log; do sleep 5; done', "/w/serve.log",
         "INFO: Application startup complete.", "INFO: loading"),
        ("while ! grep -qE 'ready|listening on' logs/a.log 2>/dev/null; do sleep 1; done",
         "/w/logs/a.log", "now listening on :8000", "loading"),
        ("tail -f serve.log | grep -m1 'Uvicorn running'", "/w/serve.log",
         "Uvicorn running on http://0.0.0.0:8000", "Uvicorn starting"),
        ("tail -n +1 -F /tmp/x/s.log | grep -q --max-count=1 -i READY", "/tmp/x/s.log",
         "server ready", "server loading"),
        ("timeout 600 bash -c 'until grep -q \"Ready \\(v[0-9]\\)\" ../s.log; do sleep 2; done'",
         "/s.log", "Ready v2", "Ready w2"),  # BRE: \( \) group
        ("until grep -q 'Ready (v2)' s.log; do sleep 1; done", "/w/s.log", "Ready (v2) up",
         "Ready v2"),  # BRE: bare parentheses are themselves
        ("until grep -Fq 'a.b' x.log; do sleep 1; done", "/w/x.log", "got a.b", "got aXb"),
    ],
)  # fmt: skip
def test_the_wait_commands_agents_write_are_read_as_waits_for_a_line(
    command: str, path: str, line: str, other: str
) -> None:
    (wait,) = line_waits([{"at": AT, "command": command, "cwd": "/w", "background": True}])
    assert wait.path == path
    assert wait.printed([other, line, "after"]) == line and wait.printed([other]) is None


@pytest.mark.parametrize(
    "command",
    [
        "grep -q Ready serve.log && echo up",  # a check, not a wait
        "until curl -s localhost:8000; do sleep 1; done",  # a port: ctxd sees it opening
        "until grep -q -f patterns.txt serve.log; do sleep 1; done",  # patterns in a file
        "until grep -q 'unclosed serve.log",  # not a shell line
        "tail serve.log | grep -m1 Ready",  # no -f: it does not wait
    ],
)
def test_lines_that_wait_for_no_log_line_are_not_waits(command: str) -> None:
    assert line_waits([{"at": AT, "command": command, "cwd": "/w", "background": True}]) == []


def test_a_wait_the_agent_saw_end_in_the_foreground_is_no_news() -> None:
    command = 'until grep -q "Ready" serve.log; do sleep 5; done'
    seen = {"at": AT, "command": command, "cwd": "/w", "exit_status": 0}
    assert line_waits([seen]) == []
    given_up = {**seen, "command": f"timeout 60 bash -c '{command}'", "exit_status": 124}
    assert [w.written for w in line_waits([given_up])] == ["Ready"]


def test_the_line_the_agent_waits_for_wakes_it_once_with_that_line(
    quick_server: Server,  # noqa: F811  (the fixture imported above)
    work: Path,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    tag: str,
) -> None:
    """The agent launches a server that listens on no port, then sends off its own wait for
    the server's ready line and ends its turn; the waiter exits 2 with that line soon after
    the server prints it; the news long-poll says the attempt serves; nothing more wakes it."""
    server = quick_server
    (work / "ready.py").write_text(READY)
    payload = launch(
        server, work, f"nohup {sys.executable} ready.py --tag {tag} > ready.log 2>&1 &"
    )
    wait_line = "until grep -q 'Application startup complete' ready.log; do sleep 1; done"
    looping = subprocess.Popen(["bash", "-c", wait_line], cwd=work)  # the agent's, sent off
    call = tool_call(work, wait_line, n=2)
    call["tool_input"]["run_in_background"] = True
    call["tool_response"] = {"backgroundTaskId": "b1", "stdout": "", "stderr": ""}
    answer = httpx.post(f"{server.url}/api/hooks/claude", json={"payload": call}, timeout=30)
    assert answer.status_code == 200, answer.text
    proc = started(waiter(server, payload, tmp_path), payload)
    _, said = proc.communicate(timeout=90)
    told = time.time()
    looping.wait(timeout=30)
    assert proc.returncode == 2, said
    assert "attempt 1" in said and "is up: its log printed" in said, said
    assert "Application startup complete" in said and "(ready.log)" in said, said
    took = told - float((work / "ready_at").read_text())
    # generous, yet under the 15 s after which a waited session is looked at anyway (a
    # quarter of its stuck threshold): only the line's own notice comes this soon
    assert took < 10, took
    got = httpx.get(f"{server.url}/api/sessions/work/news", params={"since": 0, "attempt": 1},
                    timeout=30).json()  # fmt: skip
    assert [n["kind"] for n in got["news"]] == ["serving"], got
    assert got["pending"] is False, got  # up: nothing more to wait for, though no port opened
    # told once: the turn's-end waiter has nothing pending, so it goes at once, saying nothing
    stop = {"hook_event_name": "Stop", "session_id": "conv-wake", "cwd": str(work),
            "stop_hook_active": False, "last_assistant_message": "Up."}  # fmt: skip
    again = started(waiter(server, stop, tmp_path, CTXD_WAKE_MAX_S="120"), stop)
    _, more = again.communicate(timeout=60)
    assert again.returncode == 0 and more == "", more


def test_a_wait_loop_sent_off_whole_launches_nothing() -> None:
    """Claude Code's run_in_background sends the whole line off: the agent's own wait loop is
    no attempt (its `done` or `until` is the shell's word, not a program)."""
    from ctxd.discovery.rules import launched
    from ctxd.discovery.shellparse import parse_command

    loop = "until grep -q 'startup complete' serve.log; do sleep 5; done"
    assert launched(parse_command(loop), background=True) == []
    served = launched(parse_command("cd app && python serve.py --port 8000"), background=True)
    assert [c.argv[:2] for c in served] == [("python", "serve.py")]
    # a program a loop or a condition sends off is the launch, not the shell's word before it
    loop = "for s in 1 2; do nohup python train.py --seed $s > t$s.log 2>&1 & done"
    assert [c.argv[:2] for c in launched(parse_command(loop))] == [("python", "train.py")]
    branch = "if [ -f ok ]; then setsid python serve.py > s.log 2>&1 & fi"
    assert [(c.argv[:2], c.background) for c in launched(parse_command(branch))] == [
        (("python", "serve.py"), "setsid")
    ]
