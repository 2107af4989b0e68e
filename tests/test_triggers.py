"""Triggers against a real server with short intervals: quiet, continue, events, dedup."""

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ctxd.models import LogWatch, ProcessWatch, SessionIn
from ctxd.snapshotter import triggers
from ctxd.snapshotter.triggers import Watcher

from tests.conftest import (
    Server,
    StepClock,
    app_client,
    start_server,
    stop_server,
    ticked_watcher,
    wait_until,
)

MIN_GAP_S = 4.0
FAST = {
    "CTXD_TRIGGER_INTERVAL_S": "0.2",
    "CTXD_EVENT_PROBE_S": "0.2",
    "CTXD_EVENT_MIN_GAP_S": "0.5",
}


@pytest.fixture
def fast_server(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=FAST)
    try:
        yield srv
    finally:
        stop_server(srv)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    """In-process for what is request and answer; the trigger loop's tests use a real server."""
    with app_client(tmp_path / "data") as c:
        yield c


@pytest.fixture
def fast(fast_server: Server) -> Iterator[httpx.Client]:
    with fast_server.client() as c:
        yield c


def versions(client: httpx.Client, sid: str) -> list[dict]:
    return client.get(f"/api/sessions/{sid}/snapshots").json()


def dumps_on_disk(server: Server, sid: str) -> list[str]:
    """Versions read from the data dir: looking there is not activity, as an API call is."""
    folder = server.data_dir / sid
    return [p.read_text() for p in sorted(folder.glob("v*.md"))] if folder.exists() else []


def test_quiet_fires_once_after_silence_and_again_only_after_activity(
    fast_server: Server, fast: httpx.Client
):
    fast.put("/api/sessions/q", json={"objective": "wait", "quiet_after_s": 1})
    first = wait_until(lambda: dumps_on_disk(fast_server, "q"), limit=60, every=0.1)
    assert "trigger `quiet`" in first[0]
    # Two more quiet periods, told by the loop itself rather than by a sleep: a session made
    # now, quiet after 2 s, gets its quiet dump in a tick that then looks at "q" (sessions
    # are looked at in id order) two seconds or more after q's dump.
    fast.put("/api/sessions/a-later", json={"quiet_after_s": 2})
    wait_until(lambda: dumps_on_disk(fast_server, "a-later"), "the later session's quiet dump")
    assert len(dumps_on_disk(fast_server, "q")) == 1
    assert "Still true" not in dumps_on_disk(fast_server, "q")[0]

    fast.post("/api/sessions/q/journal", json={"kind": "finding", "text": "new evidence"})
    second = wait_until(
        lambda: (d := dumps_on_disk(fast_server, "q")) and len(d) == 2 and d, limit=60, every=0.1
    )
    assert "trigger `quiet`" in second[1] and "new evidence" in second[1]

    fast.post("/api/sessions/q/heartbeat")  # activity without change: confirmed, not a version
    wait_until(lambda: "Still true" in dumps_on_disk(fast_server, "q")[-1], limit=60, every=0.1)
    assert len(dumps_on_disk(fast_server, "q")) == 2


def test_empty_message_returns_a_continue_dump_and_text_is_kept_as_instruction(
    client: httpx.Client,
):
    client.put("/api/sessions/c", json={"objective": "debug the hang"})
    said = client.post("/api/sessions/c/messages", json={"text": "try NCCL_P2P_DISABLE=1"})
    assert said.status_code == 202 and versions(client, "c") == []
    dump = client.post("/api/sessions/c/messages", json={"text": " \n\t"})
    assert dump.status_code == 200
    assert dump.headers["content-type"].startswith("text/markdown")
    assert "trigger `continue`" in dump.text
    assert "the user said**: " in dump.text and "“try NCCL_P2P_DISABLE=1”" in dump.text
    assert client.post("/api/sessions/c/messages", json={}).status_code == 200


def test_identical_consecutive_snapshots_make_one_version(client: httpx.Client):
    client.put("/api/sessions/d", json={"objective": "same"})
    one = client.post("/api/sessions/d/snapshots").json()
    two = client.post("/api/sessions/d/snapshots").json()
    assert one["header"]["version"] == two["header"]["version"] == 1
    assert two["header"]["confirmations"] == 1 and two["header"]["confirmed_at"]
    assert "Still true at" in client.get("/api/sessions/d/snapshots/1/markdown").text
    forced = client.post("/api/sessions/d/snapshots", json={"force": True}).json()
    assert forced["header"]["version"] == 2


LOGGER = r"""
import sys, time
log = open(sys.argv[1], "a")
for i in range(5):
    log.write(f"step {i}\n")
log.write("about to hang in all_reduce\n")
log.flush()
time.sleep(600)
"""


PROBE_S = 0.01


@pytest.fixture
def watcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: StepClock) -> Iterator[Watcher]:
    """The trigger loop's Watcher on a real store, ticked by the test instead of a timer."""
    with ticked_watcher(tmp_path / "data", monkeypatch, PROBE_S, MIN_GAP_S) as ticked:
        yield ticked


def tick(watcher: Watcher) -> None:
    """One tick, then one probe period on the loop's clock."""
    watcher.tick()
    triggers.time.monotonic.advance(PROBE_S)  # type: ignore[attr-defined]


def event_versions(watcher: Watcher, sid: str) -> list:
    return [v for v in watcher.snap.store.list_snapshots(sid) if v.trigger.startswith("event:")]


def tick_until_event(watcher: Watcher, sid: str, count: int) -> list:
    """Ticks as the loop would until `count` event versions exist; fails after 30 s."""
    return wait_until(
        lambda: tick(watcher) or (len(e := event_versions(watcher, sid)) >= count and e),
        "event versions",
    )


def test_a_watched_process_exit_takes_an_event_snapshot_that_keeps_the_log(
    watcher: Watcher, spawn, tmp_path: Path
):
    log = tmp_path / "worker.log"
    script = tmp_path / "event_worker.py"
    script.write_text(LOGGER)
    child = spawn(sys.executable, str(script), str(log))
    wait_until(lambda: log.exists() and "all_reduce" in log.read_text(), limit=60, every=0.1)
    store = watcher.snap.store
    store.put_session("e", SessionIn(quiet_after_s=3600))
    store.add_watch("e", ProcessWatch(pid=child.pid), limit=100)
    store.add_watch("e", LogWatch(path=str(log)), limit=100)
    tick(watcher)  # probes the living process: what its exit is compared with
    assert store.list_snapshots("e") == []

    child.kill()
    child.wait()
    (event,) = tick_until_event(watcher, "e", 1)
    assert "process-exit" in event.trigger
    log.write_text("")  # the evidence is gone from disk, not from the dump
    dump = store.get_markdown("e", event.version)
    assert "about to hang in all_reduce" in dump
    assert "exited" in dump


def test_at_most_one_event_snapshot_per_min_gap(watcher: Watcher, spawn, clock: StepClock):
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    first, second = spawn(*sleeper), spawn(*sleeper)
    store = watcher.snap.store
    store.put_session("g", SessionIn(quiet_after_s=3600))
    for child in (first, second):
        store.add_watch("g", ProcessWatch(pid=child.pid), limit=100)
    tick(watcher)
    assert store.list_snapshots("g") == []

    first.kill()
    first.wait()
    (one,) = tick_until_event(watcher, "g", 1)
    at_first = clock()
    second.kill()
    second.wait()
    for _ in range(30):  # the exit is seen, and held back: the gap has not passed
        tick(watcher)
    assert clock() - at_first < MIN_GAP_S
    assert len(event_versions(watcher, "g")) == 1
    assert str(second.pid) not in (store.get_snapshot("g", one.version).header.note or "")

    clock.advance(MIN_GAP_S)
    two = max(tick_until_event(watcher, "g", 2), key=lambda v: v.version)
    assert "process-exit" in two.trigger
    assert str(second.pid) in store.get_snapshot("g", two.version).header.note


def test_resume_fits_a_budget_and_keeps_what_matters(client: httpx.Client, tmp_path: Path):
    log = tmp_path / "noisy.log"
    log.write_text("".join(f"noise line {i} " + "x" * 150 + "\n" for i in range(400)))
    client.put("/api/sessions/r", json={"objective": "OBJECTIVE-MARK find the deadlock"})
    client.post("/api/sessions/r/watches", json={"kind": "log", "path": str(log), "lines": 200})
    client.post("/api/sessions/r/watches", json={"kind": "port", "port": 1})
    for i in range(3):
        attempt = {"kind": "attempt", "text": f"ATTEMPT-{i}", "status": "failed"}
        client.post("/api/sessions/r/journal", json=attempt)
    client.post("/api/sessions/r/journal", json={"kind": "next", "text": "NEXT-MARK read gdb"})
    full = client.get("/api/sessions/r/resume").text
    assert len(full) > 20_000
    for budget in (2000, 8000):
        cut = client.get("/api/sessions/r/resume", params={"max_chars": budget, "fresh": "false"})
        text = cut.text
        assert len(text) <= budget, (budget, len(text))
        for needle in ("OBJECTIVE-MARK", "ATTEMPT-0", "ATTEMPT-2", "NEXT-MARK", "not listening"):
            assert needle in text, (budget, needle)
        assert "`ctxd resume r`" in text and "Kept under" in text


def test_journal_entries_update_in_place(client: httpx.Client):
    client.put("/api/sessions/j", json={})
    entry = client.post("/api/sessions/j/journal", json={"kind": "hypothesis", "text": "NCCL P2P"})
    eid = entry.json()["id"]
    assert entry.json()["status"] is None
    bad = client.patch(f"/api/sessions/j/journal/{eid}", json={"status": "maybe"})
    assert bad.status_code == 400 and "confirmed" in bad.json()["detail"]
    ok = client.patch(f"/api/sessions/j/journal/{eid}", json={"status": "refuted"})
    assert ok.status_code == 200 and ok.json()["updated_at"]
    dump = client.get("/api/sessions/j/resume").text
    assert "hypothesis (refuted)" in dump
    assert client.patch("/api/sessions/j/journal/999", json={"status": "open"}).status_code == 404
    wrong = client.post(
        "/api/sessions/j/journal", json={"kind": "note", "text": "x", "status": "x"}
    )
    assert wrong.status_code == 400


def test_sessions_are_found_by_working_directory_and_keep_their_own_journal(
    client: httpx.Client, tmp_path: Path
):
    repo_a, repo_b = tmp_path / "a", tmp_path / "b"
    client.put("/api/sessions/sa", json={"cwd": str(repo_a)})
    client.put("/api/sessions/sb", json={"cwd": str(repo_b)})
    client.post("/api/sessions/sa/journal", json={"kind": "note", "text": "only in a"})
    found = client.get("/api/sessions", params={"cwd": str(repo_a / "src" / "deep")}).json()
    assert [s["id"] for s in found] == ["sa"]
    assert client.get("/api/sessions/sb/journal").json() == []
    assert client.put("/api/sessions/sc", json={"cwd": "relative/dir"}).status_code == 400


def test_health_reports_the_data_dir_size(client: httpx.Client):
    client.put("/api/sessions/h", json={})
    client.post("/api/sessions/h/snapshots")
    size = client.get("/health").json()["data_dir_bytes"]
    assert isinstance(size, int) and size > 0


def test_schedule_takes_snapshots_while_the_session_is_active(
    fast_server: Server, fast: httpx.Client
):
    fast.put("/api/sessions/s", json={"quiet_after_s": 3600, "schedule_every_s": 1})

    def active_then_dumped() -> list[str]:
        fast.post("/api/sessions/s/heartbeat")  # active: a schedule snapshots active sessions
        return dumps_on_disk(fast_server, "s")

    dumps = wait_until(active_then_dumped, "a scheduled dump", limit=60, every=0.2)
    assert "trigger `schedule`" in dumps[0]


def test_detect_events_is_pure_and_names_what_happened():
    from datetime import UTC, datetime

    from ctxd.models import (
        ArtifactInfo,
        ArtifactsSection,
        Observations,
        PortInfo,
        PortsSection,
        ProcessesSection,
        ProcessInfo,
    )
    from ctxd.snapshotter.triggers import detect_events

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    worker = ProcessInfo(
        watch_id=1, pid=7, ppid=1, name="w", state="sleeping", started_at=t0, age_s=1
    )
    art = ArtifactInfo(
        watch_id=2, path="/b/x.whl", type="file", size=1, modified_at=t0, fingerprint="a"
    )
    before = Observations(
        processes=ProcessesSection(items=[worker]),
        ports=PortsSection(items=[PortInfo(host="127.0.0.1", port=8000, listening=False)]),
        artifacts=ArtifactsSection(items=[art]),
    )
    after = Observations(
        ports=PortsSection(items=[PortInfo(host="127.0.0.1", port=8000, listening=True)]),
        artifacts=ArtifactsSection(items=[art.model_copy(update={"fingerprint": "b"})]),
    )
    assert detect_events(None, after) == []
    assert detect_events(before, before) == []
    assert [code for code, _ in detect_events(before, after)] == [
        "process-exit",
        "port-open",
        "artifact-change",
    ]


def test_a_token_pasted_into_a_message_is_redacted_before_it_is_stored(
    fast_server: Server, fast: httpx.Client
):
    token = "ghp_" + "A1b2C3d4E5" * 3 + "F6g7H8"
    fast.put("/api/sessions/m", json={})
    said = fast.post("/api/sessions/m/messages", json={"text": f"use {token} to pull"})
    assert said.status_code == 202
    fast.post("/api/sessions/m/snapshots")
    files = [p for p in fast_server.data_dir.rglob("*") if p.is_file()]
    assert not any(token.encode() in p.read_bytes() for p in files)


def test_secrets_written_by_the_agent_are_redacted_before_they_are_kept(client: httpx.Client):
    token = "hf_" + "Zq8" * 12
    client.put("/api/sessions/w", json={"objective": f"use {token}"})
    client.post("/api/sessions/w/journal", json={"kind": "note", "text": f"token {token}"})
    url = "http://admin:hunter2hunter2@127.0.0.1:9/health"
    client.post("/api/sessions/w/watches", json={"kind": "port", "port": 9, "url": url})
    for path in ("/api/sessions/w", "/api/sessions/w/journal", "/api/sessions/w/watches"):
        body = client.get(path).text
        assert token not in body and "hunter2hunter2" not in body, path
