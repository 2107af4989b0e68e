"""Retention as the README states it: CTXD_KEEP_DAYS, the periodic prune, `ctxd prune`, the
API route, and the Markdown files of thinned-out versions removed with them."""

import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from ctxd.http.app import create_app
from ctxd.models import SessionIn, Snapshot, SnapshotHeader
from ctxd.settings import Settings
from ctxd.store.connection import now
from ctxd.store.database import Store
from litestar.testing import TestClient

from tests.conftest import start_server, stop_server

# Four versions a day on three days `AGE_DAYS` ago, then two recent ones: thinning keeps the
# first, each day's last and the session's last.
AGE_DAYS = 20
KEPT = [1, 4, 8, 12, 13, 14]
THINNED = [2, 3, 5, 6, 7, 9, 10, 11]


def _at(sid: str, moment: datetime) -> Callable[[int], tuple[Snapshot, str]]:
    def build(version: int) -> tuple[Snapshot, str]:
        header = SnapshotHeader(session=sid, version=version, taken_at=moment, trigger="x")
        return Snapshot(header=header, title=f"v{version}"), f"# {sid} v{version}\n"

    return build


def seed(data: Path, *sids: str) -> None:
    """Old and recent versions straight into the database; Markdown comes at start-up."""
    store = Store(data / "ctxd.db")
    try:
        start = (now() - timedelta(days=AGE_DAYS)).replace(hour=0, minute=0, second=0)
        for sid in sids:
            store.put_session(sid, SessionIn(quiet_after_s=86_400))
            for day in range(3):
                for hour in (1, 5, 9, 13):
                    store.add_snapshot(sid, _at(sid, start + timedelta(days=day, hours=hour)))
            for hours_ago in (2, 1):
                store.add_snapshot(sid, _at(sid, now() - timedelta(hours=hours_ago)))
    finally:
        store.close()


def on_disk(data: Path, sid: str) -> list[int]:
    return sorted(int(p.stem[1:]) for p in (data / sid).glob("v*.md"))


def wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.05)


def test_the_periodic_prune_honours_ctxd_keep_days_and_removes_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    seed(data, "old")
    monkeypatch.setenv("CTXD_KEEP_DAYS", str(AGE_DAYS - 5))
    monkeypatch.setenv("CTXD_TRIGGER_INTERVAL_S", "0.1")
    app = create_app(Settings(data_dir=data))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        # The trigger loop prunes on its first tick, then every few hours: no request asks.
        def thinned() -> bool:
            versions = client.get("/api/sessions/old/snapshots").json()
            return sorted(v["version"] for v in versions) == KEPT

        wait_for(thinned, "the periodic prune")
        wait_for(lambda: on_disk(data, "old") == KEPT, "the thinned-out files removed")


def test_the_default_keeps_thirty_days(tmp_path: Path) -> None:
    data = tmp_path / "data"
    seed(data, "young")
    settings = Settings(data_dir=data, trigger_interval_s=0.1)
    assert settings.keep_days == 30
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        assert client.post("/api/prune").json() == {"removed": 0}
        assert len(client.get("/api/sessions/young/snapshots").json()) == 14
    assert on_disk(data, "young") == list(range(1, 15))


def test_the_api_route_and_ctxd_prune_thin_out_and_remove_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    seed(data, "one", "two")
    # The server's own retention is the longest allowed: only the explicit calls thin out.
    srv = start_server(data, tmp_path / "ctxd.log", env={"CTXD_KEEP_DAYS": "3650"})
    try:
        assert on_disk(data, "one") == list(range(1, 15)), "rebuilt at start-up"
        with srv.client() as c:
            assert c.post("/api/prune").json() == {"removed": 0}, "server default: 3650 days"
            assert c.post("/api/prune", params={"keep_days": 0}).status_code == 400
            assert c.post("/api/prune", params={"keep_days": 10}).json() == {"removed": 16}
            versions = c.get("/api/sessions/two/snapshots").json()
            assert sorted(v["version"] for v in versions) == KEPT
        assert on_disk(data, "one") == KEPT and on_disk(data, "two") == KEPT

        seed(data, "three")  # written beside the running server, as another writer could
        done = subprocess.run(
            [sys.executable, "-m", "ctxd", "--url", srv.url, "prune", "--keep-days", "10"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout == "removed 8 versions older than 10 days\n", done.stdout
        with srv.client() as c:
            versions = c.get("/api/sessions/three/snapshots").json()
            assert sorted(v["version"] for v in versions) == KEPT
    finally:
        stop_server(srv)
