"""Assembling a snapshot only reads: a preview (the now page) writes nothing to the database,
and what a stored snapshot must write besides itself (the launches it saw, the automatic
watches it retired) is written once it is stored."""

import sqlite3
import sys
import uuid
from pathlib import Path

from ctxd.models import LogWatch, ProcessWatch, SessionIn
from ctxd.settings import Settings
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.database import Store

from tests.conftest import app_client


def _rows(db: Path) -> list[str]:
    """Every row of the database as SQL, in a stable order (what changed, if anything)."""
    with sqlite3.connect(db) as conn:
        return sorted(conn.iterdump())


def _launches(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("select pid, ended_at from attempts order by id").fetchall()


def _sleeper(spawn):
    """A real process with a tag of its own in its command line (nothing else matches it)."""
    tag = f"ctxd-pure-{uuid.uuid4().hex[:8]}"
    return tag, spawn(sys.executable, "-c", "import time; time.sleep(300)", tag)


def test_a_preview_saves_no_launch_and_retires_nothing_a_snapshot_does_both(tmp_path, spawn):
    tag, sleeper = _sleeper(spawn)
    settings = Settings(data_dir=tmp_path / "data", auto_retire_s=0)
    store = Store(settings.db_path)
    snap = Snapshotter(settings, store)
    try:
        store.put_session("p", SessionIn(objective="pure"))
        store.add_watch("p", ProcessWatch(match=tag), 10)
        gone = LogWatch(path=str(tmp_path / "gone.log"))
        store.add_watch("p", gone, 10, reason="output of the command at 12:00")  # automatic
        before = _rows(settings.db_path)

        _, markdown = snap.preview("p")
        assert f"pid {sleeper.pid}" in markdown  # the preview shows the launch it saw ...
        assert _rows(settings.db_path) == before  # ... and the watch it would retire, unsaved
        assert [w.spec.kind for w in store.list_watches("p")] == ["process", "log"]

        snap.take("p")
        assert _launches(settings.db_path) == [(sleeper.pid, None)]
        assert [w.spec.kind for w in store.list_watches("p")] == ["process"]  # retired

        sleeper.kill()
        sleeper.wait()
        before = _rows(settings.db_path)
        snap.preview("p")
        assert _rows(settings.db_path) == before  # its end is not saved by a preview
        snap.take("p")
        assert _launches(settings.db_path)[0][1] is not None  # but by a stored snapshot
    finally:
        snap.close()


def test_the_now_page_leaves_the_database_unchanged(tmp_path: Path, spawn):
    tag, sleeper = _sleeper(spawn)
    with app_client(tmp_path / "data") as c:
        c.put("/api/sessions/p", json={"objective": "pure"}).raise_for_status()
        c.post("/api/sessions/p/watches", json={"kind": "process", "match": tag}).raise_for_status()
        db = tmp_path / "data" / "ctxd.db"
        before = _rows(db)
        for _ in range(2):
            page = c.get("/s/p/now")
            assert page.status_code == 200 and str(sleeper.pid) in page.text
        assert _rows(db) == before
        assert c.post("/s/p/now", headers={"origin": "http://127.0.0.1"}).status_code == 303
        assert _launches(db) == [(sleeper.pid, None)]  # taking it from the page stores it
