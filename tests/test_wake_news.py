"""The news long-poll (issue 40): "what happened to attempt N, or to anything in session S,
since version V", answered as soon as it happens and bounded in time, through the API
(`GET /api/sessions/{sid}/news`), `ctxd wait` and the MCP tool `wait_for_news`; reading it
claims nothing, so the agent's wake is still delivered. And the wake text gives a live
attempt's port. Real servers, real processes, the real CLI and the official MCP client."""

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Server, free_port, start_server, stop_server, tagged
from tests.test_wake import (
    QUICK,
    UP,
    launch,
    quick_server,  # noqa: F401  (ctxd with quick event probes, a fixture)
    work,  # noqa: F401  (a checkout whose serve.py dies with an OOM error, a fixture)
)

SID = "work"  # the session the launches' conversation lands in: the checkout's name


def news(server: Server, **params: Any) -> httpx.Response:
    wait = float(params.get("wait", 0))
    return httpx.get(f"{server.url}/api/sessions/{SID}/news", params=params, timeout=wait + 30)


def test_the_long_poll_answers_when_attempt_n_dies_and_claims_nothing(
    quick_server: Server,  # noqa: F811  (the fixture imported above)
    work: Path,  # noqa: F811  (the fixture imported above)
    tag: str,
) -> None:
    server = quick_server
    payload = launch(
        server, work, f"nohup {sys.executable} serve.py 3 --tag {tag} > serve.log 2>&1 &"
    )
    (pid,) = tagged(tag)
    asked = time.monotonic()
    answer = news(server, attempt=1, wait=60)  # from now on: it waits for the death
    took = time.monotonic() - asked
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert took > 1, took  # it waited: the attempt was still loading when asked
    (told,) = got["news"]
    assert told["attempt"] == 1 and told["kind"] == "died", got
    assert "OutOfMemoryError" in told["text"] and f"pid {pid}" in told["text"], got
    assert got["version"] == told["version"] and not got["pending"], got
    # from that version on, nothing more: an empty answer once the time is up
    later = news(server, attempt=1, since=got["version"], wait=1).json()
    assert later["news"] == [] and later["version"] == got["version"], later
    # since an older version, the same death again: reading claims nothing
    again = news(server, since=0).json()
    assert [n["kind"] for n in again["news"]] == ["died"], again
    # so the agent's waiter still gets it, once
    wake = httpx.post(f"{server.url}/api/hooks/claude/wake",
                      json={"payload": payload, "wait_s": 10}, timeout=60).json()  # fmt: skip
    assert wake["text"] and "attempt 1" in wake["text"] and "died" in wake["text"], wake


def test_attempt_n_alone_and_the_wake_text_gives_a_live_attempts_port(
    quick_server: Server,  # noqa: F811  (the fixture imported above)
    work: Path,  # noqa: F811  (the fixture imported above)
    tag: str,
) -> None:
    """Attempt 1 comes up on a port, attempt 2 dies: asked about attempt 2 alone, the poll
    tells its death and not attempt 1's opening; the wake of the death says attempt 1 is
    still serving on its port."""
    server, port = quick_server, free_port()
    (work / "up.py").write_text(UP)
    up = f"nohup {sys.executable} up.py --port {port} --tag {tag} > up.log 2>&1 &"
    payload = launch(server, work, up)
    first = news(server, attempt=1, since=0, wait=60).json()
    assert [n["kind"] for n in first["news"]] == ["serving"], first
    assert f":{port}" in first["news"][0]["text"], first
    wake = httpx.post(f"{server.url}/api/hooks/claude/wake",
                      json={"payload": payload, "wait_s": 10}, timeout=60).json()  # fmt: skip
    assert f"is serving on :{port}" in wake["text"], wake  # told: the next wake is the death
    dies = f"nohup {sys.executable} serve.py 2 --tag {tag} > serve.log 2>&1 &"
    payload = launch(server, work, dies, n=2)
    second = news(server, attempt=2, since=first["version"], wait=60).json()
    assert [(n["attempt"], n["kind"]) for n in second["news"]] == [(2, "died")], second
    wake = httpx.post(f"{server.url}/api/hooks/claude/wake",
                      json={"payload": payload, "wait_s": 30}, timeout=60).json()  # fmt: skip
    assert "attempt 2" in wake["text"] and "died" in wake["text"], wake
    assert f"attempt 1 is still serving on :{port}." in wake["text"], wake


def ctxd(server: Server, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctxd", "--url", server.url, *args],
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def test_ctxd_wait_prints_the_death_and_says_when_nothing_happened(
    quick_server: Server,  # noqa: F811  (the fixture imported above)
    work: Path,  # noqa: F811  (the fixture imported above)
    tag: str,
) -> None:
    server = quick_server
    launch(server, work, f"nohup {sys.executable} serve.py 3 --tag {tag} > serve.log 2>&1 &")
    done = ctxd(server, "wait", SID, "--attempt", "1")
    assert done.returncode == 0, done.stderr
    assert "attempt 1" in done.stdout and "OutOfMemoryError" in done.stdout, done.stdout
    version = int(done.stdout.split(":", 1)[0].removeprefix("v"))
    quiet = ctxd(server, "wait", SID, "--since", str(version), "--timeout", "2")
    assert quiet.returncode == 4 and quiet.stdout == "", quiet
    assert "nothing happened to its attempts within 2 s" in quiet.stderr, quiet.stderr
    as_json = ctxd(server, "--json", "wait", SID, "--since", "0")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["news"][0]["kind"] == "died"
    unknown = ctxd(server, "wait", "nosuch", "--timeout", "1")
    assert unknown.returncode == 3 and "nosuch" in unknown.stderr, unknown


def test_bad_asks_are_refused_with_the_reason(quick_server: Server, work: Path) -> None:  # noqa: F811  (the fixtures imported above)
    server = quick_server
    launch(server, work, "true")
    for params, word in [({"attempt": 0}, "attempt"), ({"wait": 601}, "wait"),
                         ({"since": -1}, "since")]:  # fmt: skip
        answer = news(server, **params)
        assert answer.status_code == 400 and word in answer.text, (params, answer.text)
    missing = httpx.get(f"{server.url}/api/sessions/nosuch/news", timeout=30)
    assert missing.status_code == 404, missing.text


async def _wait_for_news(url: str, args: dict[str, Any]) -> Any:
    async with (
        streamable_http_client(f"{url}/mcp") as (read, write),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        assert "call `wait_for_news` rather than" in (init.instructions or "")  # told to use it
        tools = {t.name for t in (await session.list_tools()).tools}
        assert "wait_for_news" in tools
        return await session.call_tool("wait_for_news", args)


def test_the_mcp_tool_waits_for_the_death(quick_server: Server, work: Path, tag: str) -> None:  # noqa: F811  (the fixtures imported above)
    server = quick_server
    launch(server, work, f"nohup {sys.executable} serve.py 3 --tag {tag} > serve.log 2>&1 &")
    result = asyncio.run(_wait_for_news(server.url, {"session": SID, "attempt": 1, "wait_s": 60}))
    assert not result.is_error, result
    got = json.loads("".join(c.text for c in result.content if c.type == "text"))
    assert [n["kind"] for n in got["news"]] == ["died"] and "OutOfMemoryError" in str(got)
    refused = asyncio.run(_wait_for_news(server.url, {"session": "nosuch", "wait_s": 1}))
    assert refused.is_error and "nosuch" in refused.content[0].text, refused


def test_after_a_restart_the_news_of_stored_versions_is_still_told(
    work: Path,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    tag: str,
) -> None:
    env = {**QUICK, "CTXD_WATCH_ROOTS": f'["{tmp_path}"]'}
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        launch(server, work, f"nohup {sys.executable} serve.py 1 --tag {tag} > serve.log 2>&1 &")
        before = news(server, attempt=1, since=0, wait=60).json()
        assert [n["kind"] for n in before["news"]] == ["died"], before
    finally:
        stop_server(server)
    server = start_server(tmp_path / "data", tmp_path / "ctxd2.log", env=env)
    try:
        after = news(server, since=0).json()  # the new board recalls the stored versions
        assert after["news"] == before["news"], (before, after)
    finally:
        stop_server(server)
