"""`ctxd doctor` asks rather than assumes: the MCP endpoint by an MCP `initialize` (a port
where something else answers HTTP is said to be no MCP), and ctxd's opencode plugin by whether
an opencode of this home runs and has sent ctxd an event since it started (said plainly when
it cannot be checked: no opencode running)."""

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, free_port, wait_until


def doctor(home: Path, work: Path, url: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), CTXD_AUTOSTART="0")
    return subprocess.run([sys.executable, "-m", "ctxd", "--url", url, "doctor"], cwd=work,
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip


def install(home: Path, work: Path, url: str, harness: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))
    subprocess.run([sys.executable, "-m", "ctxd", "--url", url, "install", harness], cwd=work,
                   env=env, capture_output=True, text=True, timeout=60, check=True)  # fmt: skip


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    return home, work


@pytest.fixture
def plain_http(tmp_path: Path) -> Iterator[str]:
    """A web server that is not ctxd (Python's http.server) on a free port of this machine."""
    port = free_port()
    served = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                               "127.0.0.1"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(answers, "http.server answering")
        yield url
    finally:
        served.terminate()
        served.wait(timeout=10)


def test_the_mcp_endpoint_is_asked_an_mcp_initialize(
    server: Server, folders: tuple[Path, Path], plain_http: str
) -> None:
    home, work = folders
    said = doctor(home, work, server.url).stdout
    assert f"ok   MCP at {server.url}/mcp: ctxd 0.1.0 answers (protocol 2025-06-18)" in said
    assert "answers (4" not in said  # no HTTP status passed off as an answer
    other = doctor(home, work, plain_http)
    assert other.returncode == 1
    assert f"FIX  MCP at {plain_http}/mcp does not answer an MCP initialize (HTTP 501)" in (
        other.stdout
    )


def test_the_opencode_plugin_is_said_to_reach_ctxd_only_once_an_event_came_where_it_runs(
    server: Server, folders: tuple[Path, Path], tmp_path: Path
) -> None:
    home, work = folders
    before = doctor(home, work, server.url).stdout
    assert "opencode's plugin" not in before  # not installed: not checked
    install(home, work, server.url, "opencode")
    idle = doctor(home, work, server.url)
    assert "??   opencode's plugin: cannot be checked now, opencode is not running" in idle.stdout
    assert "ctxd has not heard from it" in idle.stdout

    # a process named `opencode` with this home, as the real CLI's native binary is named
    program = tmp_path / "bin" / "opencode"
    program.parent.mkdir()
    shutil.copy(shutil.which("sleep") or "/bin/sleep", program)
    running = subprocess.Popen([str(program), "300"], cwd=work, env={**os.environ,
                               "HOME": str(home)})  # fmt: skip
    try:
        quiet = doctor(home, work, server.url).stdout
        assert f"opencode (pid {running.pid}, running since" in quiet
        assert "its plugin has sent ctxd nothing since" in quiet
        assert "anomalyco/opencode#44788" in quiet  # what it may mean, said
        # an event as ctxd's plugin posts it from inside opencode
        event = {"event": "session.idle", "sessionID": "ses_doctor", "cwd": str(work)}
        posted = httpx.post(f"{server.url}/api/hooks/opencode",
                            json={"payload": event, "root": ""}, timeout=30)  # fmt: skip
        assert posted.status_code == 200, posted.text
        heard = doctor(home, work, server.url)
        assert f"ok   opencode (pid {running.pid}): its plugin reaches ctxd" in heard.stdout
        assert heard.returncode == 0, heard.stdout
    finally:
        running.send_signal(signal.SIGTERM)
        running.wait(timeout=10)
