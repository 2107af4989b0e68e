"""A full disk before the commit answers exactly 507 and stores nothing; Markdown that is stale
or missing at start-up is rebuilt from the database, with the database's content."""

import os
from pathlib import Path

from ctxd.http.app import create_app
from ctxd.settings import Settings
from litestar.testing import TestClient

from tests.conftest import fill_disk

LOCAL = "http://127.0.0.1"


def test_a_full_disk_at_the_database_write_is_507_and_nothing_is_stored(small_fs: Path) -> None:
    # A journal entry is a database write only: its failure comes before any commit.
    settings = Settings(data_dir=small_fs / "data", trigger_interval_s=3600)
    with TestClient(create_app(settings), base_url=LOCAL) as c:
        assert c.put("/api/sessions/full", json={}).status_code == 201
        filler = fill_disk(small_fs)
        stored, failures = 0, []
        for i in range(40):  # until the WAL, which may still have room, needs to grow
            entry = {"kind": "note", "text": f"{i} " + os.urandom(9000).hex()}
            r = c.post("/api/sessions/full/journal", json=entry)
            if r.status_code == 201:
                stored += 1
                continue
            failures.append(r)
            if len(failures) == 3:
                break
        assert failures, "the disk never filled up"
        for r in failures:
            assert r.status_code == 507, r.text
            assert "full" in r.json()["detail"] and "not saved" in r.json()["detail"], r.text
        assert len(c.get("/api/sessions/full/journal").json()) == stored
        filler.unlink()
        r = c.post("/api/sessions/full/journal", json={"kind": "note", "text": "room again"})
        assert r.status_code == 201, r.text


def _two_versions(settings: Settings) -> tuple[str, str]:
    with TestClient(create_app(settings), base_url=LOCAL) as c:
        c.put("/api/sessions/s", json={"objective": "first"})
        assert c.post("/api/sessions/s/snapshots", json={"force": True}).status_code == 201
        c.post("/api/sessions/s/journal", json={"kind": "finding", "text": "second finding"})
        assert c.post("/api/sessions/s/snapshots", json={"force": True}).status_code == 201
        one = c.get("/api/sessions/s/snapshots/1/markdown").text
        two = c.get("/api/sessions/s/snapshots/2/markdown").text
    assert one != two and "second finding" in two
    return one, two


def test_a_stale_latest_and_a_missing_version_are_rebuilt_at_start_up(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", trigger_interval_s=3600)
    one, two = _two_versions(settings)
    folder = settings.data_dir / "s"
    # A crash after v0002.md was written but before latest.md pointed at it, then v0002.md lost.
    latest = folder / "latest.md"
    latest.unlink()
    os.link(folder / "v0001.md", latest)
    (folder / "v0002.md").unlink()
    assert latest.read_text() == one

    with TestClient(create_app(settings), base_url=LOCAL) as c:
        assert (folder / "v0002.md").read_text() == two
        assert latest.read_text() == two
        assert (folder / "v0001.md").read_text() == one
        served = c.get("/api/sessions/s/resume", params={"fresh": "false"}).text
        assert "second finding" in served


def test_a_stale_separate_latest_file_is_replaced(tmp_path: Path) -> None:
    # A copy rather than a link (a filesystem without hard links) that fell behind.
    settings = Settings(data_dir=tmp_path / "data", trigger_interval_s=3600)
    one, two = _two_versions(settings)
    latest = settings.data_dir / "s" / "latest.md"
    latest.unlink()
    latest.write_text(one)
    with TestClient(create_app(settings), base_url=LOCAL):
        assert latest.read_text() == two


def test_a_latest_changed_in_place_is_rebuilt(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", trigger_interval_s=3600)
    _, two = _two_versions(settings)
    latest = settings.data_dir / "s" / "latest.md"
    latest.write_text("edited by hand\n")  # same inode as v0002.md
    with TestClient(create_app(settings), base_url=LOCAL):
        assert latest.read_text() == two
