"""A full disk or a read-only data dir: an error before the commit, the commit's truth after
it, no partial files, and recovery after."""

import contextlib
import sqlite3
import subprocess
from pathlib import Path

from tests.conftest import Server, fill_disk, start_server, stop_server


def _leftovers(data: Path) -> list[Path]:
    return [p for p in data.rglob("*") if p.name.endswith(".tmp")]


def _snapshot(srv: Server, sid: str) -> tuple[int, str]:
    with srv.client() as c:
        r = c.post(f"/api/sessions/{sid}/snapshots", json={"force": True, "note": "n" * 3000})
        return r.status_code, r.text


def test_full_disk_is_507_and_leaves_nothing_partial(small_fs: Path, tmp_path: Path) -> None:
    srv = start_server(small_fs / "data", tmp_path / "ctxd.log")
    try:
        with srv.client() as c:
            assert c.put("/api/sessions/full", json={"objective": "o" * 2000}).status_code == 201
        assert _snapshot(srv, "full")[0] == 201
        # the WAL emptied first: room it kept from before a checkpoint could hold the next
        # commit without a new block (a commit then truly saved, and rightly answered 201)
        with contextlib.closing(sqlite3.connect(small_fs / "data" / "ctxd.db")) as conn:
            assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        filler = fill_disk(small_fs)
        statuses = [_snapshot(srv, "full") for _ in range(3)]
        for status, text in statuses:
            assert status == 507, text  # full: the README promises 507, never 503
            assert "not saved" in text and "Traceback" not in text
        assert _leftovers(small_fs / "data") == []
        with srv.client() as c:
            assert c.get("/health").status_code == 200
            versions = [s["version"] for s in c.get("/api/sessions/full/snapshots").json()]
        assert versions == [1], "nothing reported as failed was stored"
        filler.unlink()
        assert _snapshot(srv, "full")[0] == 201
        assert (small_fs / "data" / "full" / "v0002.md").exists()
    finally:
        stop_server(srv)
    assert "Traceback" not in srv.log()


def test_read_only_data_dir_keeps_the_commit_and_files_come_back(
    small_fs: Path, tmp_path: Path
) -> None:
    data = small_fs / "data"
    srv = start_server(data, tmp_path / "ctxd.log")
    bound = False
    try:
        with srv.client() as c:
            assert c.put("/api/sessions/ro", json={}).status_code == 201
        assert _snapshot(srv, "ro")[0] == 201
        # A read-only bind mount over the data dir: new files fail with EROFS, as on a
        # filesystem remounted read-only under a running service.
        subprocess.run(["mount", "--bind", str(data), str(data)], check=True)
        bound = True
        subprocess.run(["mount", "-o", "remount,bind,ro", str(data)], check=True)
        # The database file was open before the remount, so the commit still succeeds; only
        # the Markdown files fail. The commit is the truth: 201, and resume serves version 2.
        status, text = _snapshot(srv, "ro")
        assert status == 201, text
        with srv.client() as c:
            assert c.get("/health").status_code == 200
            r = c.get("/api/sessions/ro/resume", params={"fresh": "false"})
            assert r.status_code == 200 and "/api/sessions/ro/snapshots/2" in r.text
            assert c.get("/api/sessions/ro/snapshots").json()[0]["version"] == 2
        assert not (data / "ro" / "v0002.md").exists()
        assert "could not be written" in srv.log()
    finally:
        stop_server(srv)
        if bound:
            subprocess.run(["umount", str(data)], check=False)
    assert _leftovers(data) == []
    # Restarted on a writable dir: every stored version has its Markdown file again.
    srv = start_server(data, tmp_path / "ctxd2.log")
    try:
        with srv.client() as c:
            versions = [s["version"] for s in c.get("/api/sessions/ro/snapshots").json()]
        for version in versions:
            assert (data / "ro" / f"v{version:04d}.md").exists(), version
    finally:
        stop_server(srv)


def test_a_continue_on_a_store_read_only_at_start_gets_the_dump_unsaved(
    small_fs: Path, tmp_path: Path
) -> None:
    """The data directory is read-only when ctxd starts (a filesystem remounted read-only,
    then a restart): a bare "continue" still gets the dump it can build, saying it was not
    saved, instead of a 503 that leaves the agent with nothing."""
    data, project = small_fs / "data", tmp_path / "project"
    project.mkdir()
    srv = start_server(data, tmp_path / "ctxd.log")
    payload = {"hook_event_name": "UserPromptSubmit", "session_id": "conv-ro",
               "cwd": str(project), "prompt": "bring the server up"}  # fmt: skip
    try:
        with srv.client() as c:
            assert c.post("/api/hooks/claude", json={"payload": payload}).status_code == 200
    finally:
        stop_server(srv)
    subprocess.run(["mount", "--bind", str(data), str(data)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(data)], check=True)
        srv = start_server(data, tmp_path / "ctxd2.log")
        try:
            with srv.client() as c:
                answer = c.post("/api/hooks/claude",
                                json={"payload": {**payload, "prompt": "continue"}})  # fmt: skip
            assert answer.status_code == 200, answer.text
            context = answer.json()["context"]
            assert "## Handover" in context and "bring the server up" in context, context
            assert "not saved" in context, context
        finally:
            stop_server(srv)
    finally:
        subprocess.run(["umount", str(data)], check=False)
