"""The commit is the truth: what a reply says, the list, resume and the files agree (issue 18).

After the commit, a failure to write the Markdown files neither turns the answer into an error
nor leaves resume on the previous version; the files come back once they can be written. Also
the start-up cases: temp files of a killed process, a read-only data directory, and a
`latest.md` that someone replaced with a directory.
"""

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Server, start_server, stop_server


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")


@pytest.fixture
def session_on_tiny_fs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(data dir, its session folder `s` on a 64 KB tmpfs): the database keeps its room."""
    data = tmp_path / "data"
    folder = data / "s"
    folder.mkdir(parents=True)
    _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder))
    try:
        yield data, folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    with contextlib.suppress(OSError), open(filler, "wb", buffering=0) as out:
        while True:
            out.write(b"\0" * 1024)
    return filler


def _take(c, sid: str = "s") -> tuple[int, dict]:
    r = c.post(f"/api/sessions/{sid}/snapshots", json={"force": True})
    return r.status_code, r.json()


def _resumed_version(c, sid: str = "s") -> str:
    text = c.get(f"/api/sessions/{sid}/resume", params={"fresh": "false"}).text
    return text.rsplit(f"/api/sessions/{sid}/snapshots/", 1)[1].split()[0]


def test_files_that_cannot_be_written_after_the_commit_do_not_undo_it(
    session_on_tiny_fs: tuple[Path, Path], tmp_path: Path
) -> None:
    data, folder = session_on_tiny_fs
    srv = start_server(data, tmp_path / "ctxd.log")
    try:
        with srv.client() as c:
            assert c.put("/api/sessions/s", json={"objective": "truth"}).status_code == 201
            assert _take(c)[0] == 201
            filler = _fill(folder)
            status, body = _take(c)
            assert status == 201, body  # committed: the answer says so
            assert body["header"]["version"] == 2
            assert c.get("/api/sessions/s/snapshots").json()[0]["version"] == 2
            assert _resumed_version(c) == "2"  # resume follows the commit, not the files
            assert not (folder / "v0002.md").exists()
            filler.unlink()
            assert _take(c)[0] == 201
            assert _resumed_version(c) == "3"
        for version in (1, 2, 3):  # the missing file was written on the next success
            assert (folder / f"v{version:04d}.md").exists(), version
        assert "could not be written" in srv.log()
    finally:
        stop_server(srv)
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    assert "Traceback" not in srv.log()


def test_temp_files_of_a_killed_process_are_removed_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "s").mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = data / "s" / f".v0002.md.{dead.pid}.140001.tmp"
    stale.write_text("half a dump")
    keep = data / "s" / "notes.tmp"  # not ctxd's pattern: left alone
    keep.write_text("mine")
    live = data / "s" / f".v0003.md.{os.getpid()}.140001.tmp"  # its writer still runs
    live.write_text("being written")
    srv = start_server(data, tmp_path / "ctxd.log")
    stop_server(srv)
    assert not stale.exists()
    assert keep.exists() and live.exists()


def test_latest_md_replaced_by_a_directory_is_reported_once_and_snapshots_work(
    server: Server,
) -> None:
    with server.client() as c:
        assert c.put("/api/sessions/s", json={}).status_code == 201
        assert _take(c)[0] == 201
        latest = server.data_dir / "s" / "latest.md"
        latest.unlink()
        latest.mkdir()
        (latest / "mine.txt").write_text("someone's")
        for expected in (2, 3):
            status, body = _take(c)
            assert status == 201, body
            assert body["header"]["version"] == expected
            assert _resumed_version(c) == str(expected)
            assert (server.data_dir / "s" / f"v{expected:04d}.md").exists()
    assert (latest / "mine.txt").read_text() == "someone's"
    assert server.log().count("is a directory") == 1
    again = start_server(server.data_dir, server.data_dir.parent / "again.log")  # start-up too
    stop_server(again)
    assert "Traceback" not in again.log()


@pytest.fixture
def stored_then_read_only(tmp_path: Path) -> Iterator[Path]:
    """A data dir with a session and two versions, then bound read-only over itself."""
    data = tmp_path / "data"
    srv = start_server(data, tmp_path / "first.log")
    try:
        with srv.client() as c:
            assert c.put("/api/sessions/s", json={"objective": "kept"}).status_code == 201
            assert _take(c)[0] == 201 and _take(c)[0] == 201
    finally:
        stop_server(srv)
    _mount("--bind", str(data), str(data))
    try:
        _mount("-o", "remount,bind,ro", str(data))
        yield data
    finally:
        subprocess.run(["umount", str(data)], check=False)


def test_a_restart_on_a_read_only_data_dir_serves_what_it_has(
    stored_then_read_only: Path, tmp_path: Path
) -> None:
    srv = start_server(stored_then_read_only, tmp_path / "ro.log")
    try:
        with srv.client() as c:
            assert c.get("/health").status_code == 200
            assert _resumed_version(c) == "2"
            assert c.get("/api/sessions/s/snapshots").json()[0]["version"] == 2
            r = c.post("/api/sessions/s/snapshots", json={"force": True})
            assert r.status_code == 503, r.text
            assert "read-only" in r.json()["detail"] and "not saved" in r.json()["detail"]
            assert c.put("/api/sessions/t", json={}).status_code == 503
    finally:
        stop_server(srv)
    assert "read-only" in srv.log()
    assert "Traceback" not in srv.log()


def test_health_says_read_only(stored_then_read_only: Path, tmp_path: Path) -> None:
    srv = start_server(stored_then_read_only, tmp_path / "ro.log")
    try:
        with srv.client() as c:
            assert c.get("/health").json().get("storage") == "read-only"
    finally:
        stop_server(srv)
