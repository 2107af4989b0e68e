"""The /mcp endpoint driven by the official MCP client over streamable HTTP, on a real server."""

import asyncio
import json
from typing import Any

import httpx
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Server, start_server, stop_server


async def _session_calls(url: str, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Runs `calls` in one MCP session; returns tool list, each call's result, and resources."""
    async with (
        streamable_http_client(f"{url}/mcp") as (read, write),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        tools = await session.list_tools()
        results = [await session.call_tool(name, args) for name, args in calls]
        resources = await session.list_resources()
        contents = [await session.read_resource(r.uri) for r in resources.resources]
        return {
            "init": init,
            "tools": tools.tools,
            "results": results,
            "resources": resources.resources,
            "contents": contents,
        }


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


def test_mcp_client_lists_tools_snapshots_resumes_and_adds_an_attempt(
    server: Server, client: httpx.Client, tmp_path
):
    log = tmp_path / "train.log"
    log.write_text("epoch 1 loss 0.9\nepoch 2 loss 0.7\n")
    calls = [
        ("put_session", {"session": "mcp-run", "objective": "find why training stalls"}),
        ("add_watch", {"session": "mcp-run", "watch": {"kind": "log", "path": str(log)}}),
        (
            "add_entry",
            {
                "session": "mcp-run",
                "kind": "attempt",
                "text": "lowered the learning rate",
                "outcome": "still stalls at epoch 3",
                "status": "failed",
            },
        ),
        ("take_snapshot", {"session": "mcp-run", "note": "before the restart"}),
        ("resume", {"session": "mcp-run", "fresh": False, "max_chars": 4000}),
        ("list_snapshots", {"session": "mcp-run"}),
        ("take_snapshot", {"session": "no-such-session"}),
        ("add_entry", {"session": "mcp-run", "kind": "gossip", "text": "x"}),
        ("resume", {"session": "../Not A Slug"}),
    ]
    out = asyncio.run(_session_calls(server.url, calls))

    assert out["init"].server_info.name == "ctxd"
    by_name = {t.name: t for t in out["tools"]}
    for name in ("take_snapshot", "resume", "add_entry", "update_entry", "add_watch"):
        assert name in by_name
    for name in ("remove_watch", "list_snapshots", "diff", "list_sessions"):
        assert name in by_name
    # Descriptions tell a model when to call the tool, not only what it does.
    assert "after losing context" in (by_name["resume"].description or "")
    assert "max_chars" in by_name["resume"].input_schema["properties"]

    put, watch, attempt, snap, dump, versions, missing, bad, unsafe = out["results"]
    assert not any(r.is_error for r in (put, watch, attempt, snap, dump, versions)), [
        _text(r) for r in out["results"]
    ]
    assert snap.structured_content["version"] == 1
    assert json.loads(_text(attempt))["status"] == "failed"
    text = _text(dump)
    assert len(text) <= 4000
    assert "find why training stalls" in text and "lowered the learning rate" in text
    assert "epoch 2 loss 0.7" in text
    assert missing.is_error and "no-such-session" in _text(missing)
    assert bad.is_error and "kind" in _text(bad)
    assert unsafe.is_error and "session" in _text(unsafe)

    # The MCP calls changed the same store the HTTP API reads.
    entries = client.get("/api/sessions/mcp-run/journal").json()
    assert [e["text"] for e in entries] == ["lowered the learning rate"]
    assert client.get("/api/sessions/mcp-run/snapshots").json()[0]["version"] >= 1

    # One resource per session with a stored dump: its latest version.
    uris = [str(r.uri) for r in out["resources"]]
    assert "ctxd://sessions/mcp-run/latest.md" in uris
    latest = out["contents"][uris.index("ctxd://sessions/mcp-run/latest.md")]
    assert "find why training stalls" in latest.contents[0].text
    assert "Traceback" not in server.log()  # refused calls are answers, not crashes


def test_mcp_updates_entries_removes_watches_and_diffs(server: Server, client: httpx.Client):
    client.put("/api/sessions/mcp-edit", json={"objective": "tune it"})
    entry = client.post(
        "/api/sessions/mcp-edit/journal",
        json={"kind": "attempt", "text": "try bf16", "status": "running"},
    ).json()
    watch = client.post("/api/sessions/mcp-edit/watches", json={"kind": "port", "port": 1}).json()
    client.post("/api/sessions/mcp-edit/snapshots")
    calls = [
        ("update_entry", {"session": "mcp-edit", "entry_id": entry["id"], "status": "succeeded"}),
        ("remove_watch", {"session": "mcp-edit", "watch_id": watch["id"]}),
        ("take_snapshot", {"session": "mcp-edit"}),
        ("diff", {"session": "mcp-edit", "from_version": 1, "to_version": 2}),
        ("update_entry", {"session": "mcp-edit", "entry_id": entry["id"], "status": "maybe"}),
    ]
    out = asyncio.run(_session_calls(server.url, calls))
    updated, removed, snap, diff, bad = out["results"]
    assert json.loads(_text(updated))["status"] == "succeeded"
    assert not removed.is_error and client.get("/api/sessions/mcp-edit/watches").json() == []
    assert snap.structured_content["version"] == 2
    assert diff.structured_content["to_version"] == 2
    assert "succeeded" in diff.structured_content["markdown_diff"]
    assert bad.is_error and "succeeded" in _text(bad)  # the error lists the allowed statuses


def test_mcp_refuses_a_foreign_host_header(server: Server):
    # DNS rebinding: a page on another origin must not drive the local endpoint.
    response = httpx.post(
        f"{server.url}/mcp",
        headers={"Host": "evil.example", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    )
    assert response.status_code == 403, response.text  # the Host check, before /mcp


def test_mcp_caps_bodies_and_requires_the_token_when_one_is_set(tmp_path):
    env = {"CTXD_LIMIT_MAX_BODY_BYTES": "4096", "CTXD_TOKEN": "s3cret-token-value"}
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        headers = {"Accept": "application/json, text/event-stream"}
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        assert httpx.post(f"{srv.url}/mcp", headers=headers, json=ping).status_code == 401
        headers["Authorization"] = "Bearer s3cret-token-value"
        big = {**ping, "params": {"_meta": {"pad": "x" * 10_000}}}
        assert httpx.post(f"{srv.url}/mcp", headers=headers, json=big).status_code == 413
    finally:
        stop_server(srv)


def test_the_mcp_sdk_is_loaded_only_when_mcp_is_used() -> None:
    import subprocess
    import sys

    probe = (
        "import sys; from ctxd.http.app import create_app; from ctxd.settings import Settings; "
        "create_app(Settings(data_dir='/tmp/ctxd-lazy-mcp')); "
        "print(any(m == 'mcp' or m.startswith('mcp.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
