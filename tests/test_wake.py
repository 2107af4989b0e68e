"""The agent never waits blind (issue 40): `ctxd hook claude --wake`, the waiter Claude Code
runs in the background after a launch, long-polls ctxd and exits 2 with the attempt's news as
soon as it comes (Claude Code then wakes the idle model with that text), once per outcome.

Real servers, real processes and real waiter commands; the trigger loop is made quick so an
exit is seen within a second or two."""

import json
import os
import socket
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
         "CTXD_EVENT_MIN_GAP_S": "0", "CTXD_STUCK_AFTER_S": "60"}  # fmt: skip

# Up for a while, then dies with its error in its log, as an OOM'd server does.
DIES = """\
import sys, time
print("loading weights", flush=True)
time.sleep(float(sys.argv[1]))
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr)
sys.exit(1)
"""

# Loads for a second, then serves on --port until killed.
UP = """\
import socket, sys, time
time.sleep(1)
listener = socket.create_server(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])))
print("serving", flush=True)
while True:
    listener.accept()[0].close()
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
    (pid,) = tagged(tag)  # the waiter's command line names nothing of the agent's
    # it waits as a small shell: a blocked read, some MiB, holding the lock
    waiting = psutil.Process(first.pid)
    assert waiting.name() == "bash" and waiting.memory_info().rss < 8 * 2**20
    psutil.Process(pid).wait(timeout=30)
    died = time.monotonic()
    _, said = first.communicate(timeout=60)
    assert first.returncode == 2, said  # exit 2: Claude Code wakes the model with stderr
    took = time.monotonic() - died
    assert "attempt 1" in said and "died" in said and "OutOfMemoryError" in said, said
    assert f"pid {pid}" in said and "serve.log" in said and "ctxd resume" in said, said
    assert took < 15, took  # generous: the bench measures it (seconds after the death)
    # the dump says what the agent was woken with
    dump = httpx.get(f"{server.url}/api/sessions/work/resume", timeout=60).text
    handover = dump.split("## Handover", 1)[1].split("\n## ", 1)[0]
    assert "**News ctxd sent to wake you**" in handover and "attempt 1 died" in handover, handover
    # and so does the session's page
    page = httpx.get(f"{server.url}/s/work", timeout=60).text
    assert "News ctxd sent to wake the agent" in page and "attempt 1 died" in page
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


def claude_kept_open(
    work: Path, home: Path, model_url: str, prompt: str, extra: dict[str, str]
) -> subprocess.Popen:
    """The real Claude Code CLI in stream-json mode with its stdin held open: a session that
    stays alive after its turn ends, as an interactive one does, so that it can be woken."""
    from tests.test_harness_claude import CLAUDE

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "ANTHROPIC_"))},
        "HOME": str(home), "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "sk-ant-scripted-model", "IS_SANDBOX": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", **extra,
    }  # fmt: skip
    argv = [str(CLAUDE), "-p", "--input-format", "stream-json", "--output-format", "stream-json",
            "--verbose", "--dangerously-skip-permissions"]  # fmt: skip
    quiet = subprocess.DEVNULL
    proc = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.PIPE, stdout=quiet,
                            stderr=quiet, text=True)  # fmt: skip
    assert proc.stdin is not None
    message = {"type": "user", "message": {"role": "user", "content": prompt}}
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()
    return proc


def woken_with(model, words: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The texts of the requests whose newest user message carries `words` (a wake's)."""
    found = []
    for body in list(model.requests):
        last = body["messages"][-1]
        text = model.texts(last) if last["role"] == "user" else ""
        if words in text:
            found.append(text)
    return found


OFF = ["woken", "CTXD_WAKE=0", "--no-wake"]  # how waking is left on, or turned off


@pytest.mark.parametrize("off", OFF)
def test_the_real_claude_code_is_woken_once_when_its_launch_dies(
    quick_server: Server, work: Path, tmp_path: Path, tag: str, off: str
) -> None:
    """The scripted model launches a server in the background and ends its turn; the server
    dies 8 s later; Claude Code, idle, sends the model a new request carrying ctxd's news
    (the attempt, its error, its log) within seconds of the death, once; the relaunch it
    sends off then comes up, and that wakes it once more ("serving on :PORT"). With
    CTXD_WAKE=0 in the agent's environment, or installed with `--no-wake`, no request comes."""
    from tests.scripted_model import ScriptedModel, Step
    from tests.test_harness_claude import CLAUDE

    if not CLAUDE.exists():
        pytest.skip("Claude Code not installed (`make test` does, with npm)")
    server, home = quick_server, tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "CTXD_URL": server.url}
    wake = off == "woken"
    install = [sys.executable, "-m", "ctxd", "install", "claude"]
    subprocess.run(install + (["--no-wake"] if off == "--no-wake" else []), env=env, check=True,
                   capture_output=True)  # fmt: skip
    wired = (home / ".claude" / "settings.json").read_text()
    assert ("--wake" in wired) == (off != "--no-wake"), wired
    from tests.conftest import free_port

    launch = f"nohup python3 serve.py 8 --tag {tag} > serve.log 2>&1 &"
    port = free_port()
    (work / "up.py").write_text(UP)
    relaunch = f"nohup python3 up.py --port {port} --tag {tag} > up.log 2>&1 &"
    model = ScriptedModel([Step(bash=launch), Step(text="Launched; waiting for it to load."),
                           Step(bash=relaunch), Step(text="It died: relaunched the other one."),
                           Step(text="It serves.")])  # fmt: skip
    proc = None
    extra = {"CTXD_WAKE": "0"} if off == "CTXD_WAKE=0" else {}  # the CLI passes it to hooks
    try:
        proc = claude_kept_open(work, home, model.url, "Start the server and tell me.", extra)
        pid = wait_until_one(tag)
        psutil.Process(pid).wait(timeout=60)
        died = time.monotonic()
        if wake:
            said = wait_for(lambda: woken_with(model, "ctxd: attempt 1"), 20)
            took = time.monotonic() - died
            assert len(said) == 1 and "died" in said[0] and "OutOfMemoryError" in said[0], said
            assert "serve.log" in said[0] and f"pid {pid}" in said[0], said
            assert took < 5, took
            # the relaunch, sent off in the woken turn, comes up: that news wakes it once too
            up = wait_for(lambda: woken_with(model, f"is serving on :{port}"), 30)
            assert len(up) == 1 and "ctxd: attempt 2" in up[0], up
            time.sleep(3)  # no second wake for the same death nor the same opening
            assert len(woken_with(model, f"is serving on :{port}")) == 1
        else:
            time.sleep(8)
        assert len(woken_with(model, "ctxd: attempt 1")) == (1 if wake else 0)
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        model.close()


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def wait_until_one(tag: str) -> int:
    pids = wait_for(lambda: tagged(tag), 30)
    return pids[0]


def wait_for(check, limit: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {limit} s")


def test_a_launch_that_comes_up_wakes_the_agent_with_its_port(
    quick_server: Server, work: Path, tmp_path: Path, tag: str
) -> None:
    from tests.conftest import free_port

    server, port = quick_server, free_port()
    (work / "up.py").write_text(UP)
    command = f"nohup {sys.executable} up.py --port {port} --tag {tag} > up.log 2>&1 &"
    payload = launch(server, work, command)
    proc = started(waiter(server, payload, tmp_path), payload)
    _, said = proc.communicate(timeout=60)
    assert proc.returncode == 2, said
    assert "attempt 1" in said and f"is serving on :{port}" in said, said


def test_a_launch_that_hangs_wakes_the_agent_with_where_it_waits(
    work: Path, tmp_path: Path, tag: str
) -> None:
    """Past the stuck threshold, idle with its log silent: the waiter's session is looked at
    while it waits, and the hang is told with where the process sits."""
    env = {**QUICK, "CTXD_STUCK_AFTER_S": "3", "CTXD_WATCH_ROOTS": f'["{tmp_path}"]'}
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        command = f"nohup {sys.executable} serve.py 600 --tag {tag} > serve.log 2>&1 &"
        payload = launch(server, work, command)
        proc = started(waiter(server, payload, tmp_path), payload)
        _, said = proc.communicate(timeout=90)
        assert proc.returncode == 2, said
        assert "attempt 1" in said and "is stuck" in said and "serve.py" in said, said
    finally:
        stop_server(server)


def test_news_for_a_harness_that_is_gone_is_kept_for_the_next_one(
    quick_server: Server, work: Path, tag: str
) -> None:
    """A waiter outliving its harness (plain `claude -p` exits before any wake) must not use
    up the news: it is handed back, and the next waiter of the session gets it."""
    server = quick_server
    command = f"nohup {sys.executable} serve.py 1 --tag {tag} > serve.log 2>&1 &"
    payload = launch(server, work, command)
    (pid,) = tagged(tag)
    psutil.Process(pid).wait(timeout=30)
    gone = subprocess.Popen(["true"])
    gone.wait()
    url = f"{server.url}/api/hooks/claude/wake"
    ask = {"payload": payload, "launched": True, "wait_s": 20}
    dead = httpx.post(url, json={**ask, "harness_pid": gone.pid}, timeout=60).json()
    assert dead["text"] is None and not dead["pending"], dead
    alive = httpx.post(url, json={**ask, "harness_pid": os.getpid()}, timeout=60).json()
    assert "attempt 1" in (alive["text"] or "") and "died" in alive["text"], alive


@pytest.mark.parametrize("off", OFF)
def test_the_real_opencode_is_woken_when_its_launch_dies(
    quick_server: Server, work: Path, tmp_path: Path, tag: str, off: str
) -> None:
    """`opencode serve`, driven through its HTTP API: the scripted model launches a server in
    the background and ends its turn; the server dies 8 s later; ctxd's plugin hands the
    idle session the news as a user message, and the model receives it in a new request,
    once. With CTXD_WAKE=0 in opencode's environment, or installed with `--no-wake`, none
    comes."""
    from tests.conftest import free_port
    from tests.scripted_model import Step
    from tests.scripted_openai import MODEL, ScriptedOpenAI
    from tests.test_harness_opencode import OPENCODE, offline_env, provider_config

    if not OPENCODE.exists():
        pytest.skip("opencode not installed (`make test` does, with npm)")
    server, home = quick_server, tmp_path / "home"
    home.mkdir()
    wake = off == "woken"
    env = {
        **offline_env(home, work),
        "CTXD_URL": server.url,
        **({"CTXD_WAKE": "0"} if off == "CTXD_WAKE=0" else {}),
    }
    launch = f"nohup python3 serve.py 8 --tag {tag} > serve.log 2>&1 &"
    up_port = free_port()
    (work / "up.py").write_text(UP)
    relaunch = f"nohup python3 up.py --port {up_port} --tag {tag} > up.log 2>&1 &"
    model = ScriptedOpenAI([Step(bash=launch), Step(text="Launched; waiting for it to load."),
                            Step(bash=relaunch), Step(text="It died: relaunched the other one."),
                            Step(text="It serves.")])  # fmt: skip
    config = home / ".config" / "opencode" / "opencode.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps(provider_config(model)))
    install = [sys.executable, "-m", "ctxd", "--url", server.url, "install", "opencode"]
    subprocess.run(install + (["--no-wake"] if off == "--no-wake" else []), env=env, cwd=work,
                   check=True, capture_output=True)  # fmt: skip
    plugin = (home / ".config" / "opencode" / "plugins" / "ctxd.js").read_text()
    assert ("const WAKES_INSTALLED = true" in plugin) == (off != "--no-wake")
    port = free_port()
    serve = subprocess.Popen(
        [str(OPENCODE), "serve", "--port", str(port), "--hostname", "127.0.0.1"],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert serve.stdout is not None
        deadline = time.monotonic() + 120
        while "listening" not in (line := serve.stdout.readline()):
            assert line and time.monotonic() < deadline, "opencode serve did not start"
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=240,
                           params={"directory": str(work)})  # fmt: skip
        session = api.post("/session", json={}).json()["id"]
        turn = {"parts": [{"type": "text", "text": "Start the server and tell me."}],
                "model": {"providerID": "scripted", "modelID": MODEL}}  # fmt: skip
        api.post(f"/session/{session}/message", json=turn).raise_for_status()
        (pid,) = wait_for(lambda: tagged(tag), 30)
        psutil.Process(pid).wait(timeout=60)
        died = time.monotonic()
        if not wake:
            time.sleep(10)
            assert not woken_with(model, "ctxd: attempt 1")
            return
        said = wait_for(lambda: woken_with(model, "ctxd: attempt 1"), 30)
        took = time.monotonic() - died
        assert "died" in said[0] and "OutOfMemoryError" in said[0], said
        assert took < 10, took
        # the relaunch, sent off in the woken turn, comes up: told once, within 5 s
        wait_for(lambda: accepts(up_port), 60)
        opened = time.monotonic()
        up = wait_for(lambda: woken_with(model, f"is serving on :{up_port}"), 30)
        took = time.monotonic() - opened
        assert len(up) == 1 and "ctxd: attempt 2" in up[0], up
        assert took < 5, took
        time.sleep(3)
        assert len(woken_with(model, "ctxd: attempt 1")) == 1  # once
        assert len(woken_with(model, f"is serving on :{up_port}")) == 1
    finally:
        serve.kill()
        serve.wait()
        model.close()


def test_an_idle_agent_is_told_once_that_its_attempt_is_still_starting(
    quick_server: Server, work: Path, tmp_path: Path, tag: str
) -> None:
    """The quiet rule: the agent idle for the session's quiet time with its attempt neither up,
    stuck nor dead is woken once to say so."""
    server = quick_server
    command = f"nohup {sys.executable} serve.py 600 --tag {tag} > serve.log 2>&1 &"
    payload = launch(server, work, command)
    sid = httpx.get(f"{server.url}/api/sessions", timeout=10).json()[0]["id"]
    httpx.put(f"{server.url}/api/sessions/{sid}", json={"quiet_after_s": 2}, timeout=10)
    proc = started(waiter(server, payload, tmp_path), payload)
    _, said = proc.communicate(timeout=60)
    assert proc.returncode == 2, said
    assert "attempt 1" in said and "is still starting, launched" in said, said
    assert "no outcome yet" in said, said
    # told once: the next waiter waits (still pending) and is told nothing more by then
    again = started(waiter(server, payload, tmp_path, CTXD_WAKE_MAX_S="6"), payload)
    assert again.wait(timeout=60) == 0


def test_a_storm_of_snapshots_tells_one_death_once(
    quick_server: Server, work: Path, tmp_path: Path, tag: str
) -> None:
    """Twenty forced snapshots after a death (a storm of hooks and page views): the news is
    made by the version that first saw the death, and told once."""
    server = quick_server
    command = f"nohup {sys.executable} serve.py 1 --tag {tag} > serve.log 2>&1 &"
    payload = launch(server, work, command)
    (pid,) = tagged(tag)
    psutil.Process(pid).wait(timeout=30)
    sid = httpx.get(f"{server.url}/api/sessions", timeout=10).json()[0]["id"]
    for _ in range(20):
        httpx.post(f"{server.url}/api/sessions/{sid}/snapshots", json={"force": True}, timeout=60)
    url = f"{server.url}/api/hooks/claude/wake"
    ask = {"payload": payload, "launched": True, "wait_s": 10}
    first = httpx.post(url, json=ask, timeout=60).json()
    assert first["text"] and first["text"].count("died") == 1, first
    again = httpx.post(url, json={**ask, "launched": False}, timeout=60).json()
    assert again["text"] is None and not again["pending"], again


def test_one_waiter_per_session_whatever_the_number_of_launches_costing_nothing_while_it_waits(
    quick_server: Server, work: Path, tmp_path: Path, tag: str
) -> None:
    """Five launches in one conversation, each starting a waiter as Claude Code does after
    every background launch: the first waits, the four others go at once; the one that waits
    is a small shell blocked in a read: its RSS and CPU are measured while it waits."""
    server, procs = quick_server, []
    for n in range(1, 6):
        line = f"nohup {sys.executable} serve.py 600 --tag {tag} > serve{n}.log 2>&1 &"
        payload = launch(server, work, line, n=n)
        procs.append(started(waiter(server, payload, tmp_path), payload))
        time.sleep(0.3 if n == 1 else 0)  # the first holds the conversation's lock by now
    for extra in procs[1:]:
        assert extra.wait(timeout=30) == 0 and extra.stderr is not None
        assert not extra.stderr.read()
    first = psutil.Process(procs[0].pid)
    assert procs[0].poll() is None and first.name() == "bash"
    before, at = first.cpu_times(), time.monotonic()
    time.sleep(5)
    after, spent = first.cpu_times(), time.monotonic() - at
    used = (after.user + after.system) - (before.user + before.system)
    rss = first.memory_info().rss
    print(f"the waiter: RSS {rss / 2**20:.1f} MiB, CPU {used:.3f} s over {spent:.1f} s")
    assert rss < 8 * 2**20, rss  # a shell, not a Python interpreter
    assert used <= 0.05, used  # blocked in a read: no loop runs while nothing happens
    procs[0].kill()
    procs[0].wait()


def test_the_waiter_exits_quietly_at_its_ceiling(
    quick_server: Server, work: Path, tmp_path: Path, tag: str
) -> None:
    """An attempt that neither comes up, dies nor is called stuck (threshold 60 s here): the
    waiter gives up at its ceiling (CTXD_WAKE_MAX_S, 6 s) with exit 0 and nothing said, not
    before and not long after it."""
    server = quick_server
    line = f"nohup {sys.executable} serve.py 600 --tag {tag} > serve.log 2>&1 &"
    payload = launch(server, work, line)
    begun = time.monotonic()
    proc = started(waiter(server, payload, tmp_path, CTXD_WAKE_MAX_S="6"), payload)
    _, said = proc.communicate(timeout=60)
    took = time.monotonic() - begun
    assert proc.returncode == 0 and said == "", said
    assert 5 <= took <= 6 + 15, took  # near the ceiling, with a generous margin
