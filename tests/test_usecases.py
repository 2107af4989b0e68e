"""The use-case layer seen through both transports: HTTP and MCP get the same rules."""

import asyncio
import json
from typing import Any

import httpx
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Server


async def _calls(url: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async with (
        streamable_http_client(f"{url}/mcp") as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return [await session.call_tool(name, args) for name, args in calls]


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


def test_a_fact_named_like_a_secret_is_never_stored_or_returned_raw(
    server: Server, client: httpx.Client
):
    http_value, mcp_value, later_value = "orange-kite-4417", "purple-lamp-9921", "green-fig-5150"
    client.put("/api/sessions/facts", json={"objective": "deploy"})
    made = client.post(
        "/api/sessions/facts/journal",
        json={"kind": "fact", "key": "api_key", "text": http_value},
    )
    assert made.status_code == 201 and http_value not in made.text
    plain = client.post(
        "/api/sessions/facts/journal", json={"kind": "fact", "key": "gpu", "text": "H100 80GB"}
    ).json()
    out = asyncio.run(
        _calls(
            server.url,
            [
                (
                    "add_entry",
                    {
                        "session": "facts",
                        "kind": "fact",
                        "key": "OPENAI_API_KEY",
                        "text": mcp_value,
                    },
                ),
                ("list_entries", {"session": "facts"}),
            ],
        )
    )
    assert not any(r.is_error for r in out), [_text(r) for r in out]
    secret_id = made.json()["id"]
    updated = client.patch(f"/api/sessions/facts/journal/{secret_id}", json={"text": later_value})
    assert updated.status_code == 200 and later_value not in updated.text

    listed = client.get("/api/sessions/facts/journal").text
    for value in (http_value, mcp_value, later_value):
        assert value not in listed
        assert all(value not in _text(r) for r in out)
    assert "H100 80GB" in listed  # a fact with a plain name keeps its value
    assert plain["text"] == "H100 80GB"
    dump = client.post("/api/sessions/facts/snapshots").json()
    assert not any(v in json.dumps(dump) for v in (http_value, mcp_value, later_value))
    raw = b"".join(p.read_bytes() for p in server.data_dir.glob("ctxd.db*"))
    assert b"H100 80GB" in raw  # the journal's text is stored uncompressed: the check can fail
    assert not any(v.encode() in raw for v in (http_value, mcp_value, later_value))


def test_mcp_sets_a_schedule_and_journal_concerns_like_http(server: Server, client: httpx.Client):
    out = asyncio.run(
        _calls(
            server.url,
            [
                ("put_session", {"session": "sched", "schedule_every_s": 600}),
                ("add_entry", {"session": "sched", "kind": "attempt", "text": "bf16"}),
                (
                    "add_entry",
                    {"session": "sched", "kind": "finding", "text": "nan", "concerns": [1]},
                ),
                ("update_entry", {"session": "sched", "entry_id": 2, "concerns": []}),
                ("put_session", {"session": "sched", "schedule_every_s": 0}),
            ],
        )
    )
    assert not any(r.is_error for r in out), [_text(r) for r in out]
    put, _, finding, cleared, off = out
    assert json.loads(_text(put))["schedule_every_s"] == 600
    assert json.loads(_text(finding))["concerns"] == [1]
    assert json.loads(_text(cleared))["concerns"] == []
    assert json.loads(_text(off))["schedule_every_s"] == 0
    assert client.get("/api/sessions/sched").json()["schedule_every_s"] == 0


def test_mcp_resume_of_the_stored_dump_and_the_latest_resource_agree(
    server: Server, client: httpx.Client
):
    client.put("/api/sessions/mem", json={"objective": "keep the dump in memory"})
    client.post("/api/sessions/mem/snapshots")
    stored = client.get("/api/sessions/mem/resume", params={"fresh": "false"}).text
    out = asyncio.run(
        _calls(server.url, [("resume", {"session": "mem", "fresh": False, "max_chars": None})])
    )
    assert _text(out[0]) == stored and "keep the dump in memory" in stored
    missing = asyncio.run(_calls(server.url, [("resume", {"session": "nope", "fresh": False})]))
    assert missing[0].is_error and "list_sessions" in _text(missing[0])


def test_every_use_case_about_a_session_marks_its_activity(tmp_path):
    from datetime import timedelta

    import pytest
    from ctxd.errors import Invalid, NotFound
    from ctxd.models import JournalIn, JournalUpdate, PortWatch, SessionIn
    from ctxd.settings import Settings
    from ctxd.snapshotter.snapshotter import Snapshotter
    from ctxd.snapshotter.triggers import Activity
    from ctxd.store.database import Store
    from ctxd.usecases.operations import UseCases

    settings = Settings(data_dir=tmp_path / "data", cpu_sample_s=0)
    snap = Snapshotter(settings, Store(settings.db_path))
    activity = Activity()
    cases = UseCases(snap, activity)
    try:
        session, created = snap.store.put_session("act", SessionIn())  # the store marks nothing
        assert created and activity.last(session) == session.last_activity_at
        with pytest.raises(NotFound, match="no snapshot yet"):
            cases.latest_dump("act")
        entry = cases.add_entry("act", JournalIn(kind="attempt", text="x", status="running"))
        calls = [
            lambda: cases.list_entries("act"),
            lambda: cases.add_watch("act", PortWatch(port=1)),
            lambda: cases.list_watches("act"),
            lambda: cases.heartbeat("act"),
            lambda: cases.update_entry("act", entry.id, JournalUpdate(status="failed")),
        ]
        for call in calls:
            before = activity.last(session)
            call()
            assert activity.last(session) > before
        with pytest.raises(Invalid, match="cannot be null"):
            cases.update_entry("act", entry.id, JournalUpdate(text=None))
        with pytest.raises(Invalid, match="running"):
            cases.update_entry("act", entry.id, JournalUpdate(status="done"))
        assert activity.last(session) - session.last_activity_at < timedelta(minutes=1)
    finally:
        snap.close()
