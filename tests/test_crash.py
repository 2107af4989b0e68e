"""Crash safety: SIGKILL at random moments while snapshots are taken loses nothing acknowledged."""

import json
import random
import sqlite3
import threading
import time
from pathlib import Path

import httpx

from tests.conftest import start_server

KILLS = 20  # each round restarts the server (seconds on a shared machine)
SID = "crash"


def _snapshot_loop(url: str, acked: dict[int, dict], stop: threading.Event) -> None:
    """Snapshots as fast as the server takes them; keeps each one the server acknowledged."""
    n = 0
    with httpx.Client(base_url=url, timeout=10) as c:
        while not stop.is_set():
            n += 1
            try:
                r = c.post(f"/api/sessions/{SID}/snapshots", json={"force": True, "note": f"n{n}"})
            except httpx.HTTPError:
                return  # the server died: what was not answered was not acknowledged
            if r.status_code == 201:
                body = r.json()
                acked[body["header"]["version"]] = body


def _check(db: Path, data: Path, url: str, acked: dict[int, dict], new: list[int]) -> None:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = conn.execute(
            "SELECT version FROM snapshots WHERE session = ? ORDER BY version", (SID,)
        ).fetchall()
    finally:
        conn.close()
    versions = [v for (v,) in rows]
    assert versions == list(range(1, len(versions) + 1)), "versions are contiguous"
    assert set(acked) <= set(versions), "every acknowledged version is stored"
    # the folder keeps the newest versions' files (CTXD_MARKDOWN_FILES, 20 by default)
    for version in versions[-20:]:
        assert (data / SID / f"v{version:04d}.md").exists(), f"v{version} has its Markdown"
    with httpx.Client(base_url=url, timeout=10) as c:
        for version in versions:
            markdown = c.get(f"/api/sessions/{SID}/snapshots/{version}/markdown")
            assert markdown.text.startswith(f"# {SID} · v{version} "), version
        for version in new:
            stored = c.get(f"/api/sessions/{SID}/snapshots/{version}").json()
            sent = acked[version]
            assert stored["header"] == sent["header"], version
            assert json.dumps(stored["observations"], sort_keys=True) == json.dumps(
                sent["observations"], sort_keys=True
            ), version


def test_sigkill_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(20240611)
    data = tmp_path / "data"
    acked: dict[int, dict] = {}
    checked: set[int] = set()
    srv = start_server(data, tmp_path / "ctxd.log")
    with srv.client() as c:
        assert c.put(f"/api/sessions/{SID}", json={"title": "crash"}).status_code == 201
    for _ in range(KILLS):
        stop = threading.Event()
        loop = threading.Thread(target=_snapshot_loop, args=(srv.url, acked, stop))
        before = len(acked)
        loop.start()
        # Killed while writing: once this round's first snapshot is acknowledged (however slow
        # the machine), at a random moment in the stream of the next ones.
        deadline = time.monotonic() + 60
        while len(acked) == before and loop.is_alive():
            assert time.monotonic() < deadline, "no snapshot acknowledged in 60 s"
            time.sleep(0.01)
        stop.wait(rng.uniform(0.0, 0.3))
        srv.process.kill()  # SIGKILL: no shutdown hook runs
        srv.process.wait()
        stop.set()
        loop.join(timeout=30)
        srv = start_server(data, tmp_path / "ctxd.log")
        new = sorted(set(acked) - checked)
        _check(data / "ctxd.db", data, srv.url, acked, new)
        checked |= set(new)
    srv.process.kill()
    srv.process.wait()
    assert len(acked) >= KILLS, "every round had an acknowledged snapshot before its kill"
