"""Faults of the data directory under a running server, round three: it fills up, it turns
read-only, it is deleted. Every answer is a clear status (never a 500 or a traceback), reads go
on, and nothing the server acknowledged is lost: each test keeps a ledger of what was answered
2xx and checks it, exactly, against a restarted server.

- Full (a small tmpfs filled while ctxd runs): a write answers 507 or is acknowledged and kept.
- Read-only: the kernel turns an ext4 filesystem read-only on an error (`errors=remount-ro`),
  under open files. That is the case to test: a read-only bind mount or `chmod` only stops new
  opens (the database, open already, still commits: tests/test_durability.py), and a read-only
  remount of a filesystem with files open for writing is refused (EBUSY). Writes answer 503.
- Deleted (`rm -rf` of the data dir), or replaced by a copy: the open database would take every
  later commit into a file nobody finds again, so writes answer 503 until a restart.
"""

import contextlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, fill_disk, start_server, stop_server

# No background snapshots: every version stored is one a test asked for and saw answered.
QUIET = {"CTXD_TRIGGER_INTERVAL_S": "3600"}


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")


def _umount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: mounts a filesystem for the data directory")


@dataclass
class Ledger:
    """What the server acknowledged (a 2xx), as it said it, and what it refused."""

    sessions: set[str] = field(default_factory=set)
    versions: dict[str, list[int]] = field(default_factory=dict)
    markdown: dict[tuple[str, int], str] = field(default_factory=dict)
    journal: dict[str, dict[int, tuple[str, str | None]]] = field(default_factory=dict)
    watches: dict[str, set[int]] = field(default_factory=dict)
    refused_sessions: set[str] = field(default_factory=set)
    refusals: list[tuple[str, int, str]] = field(default_factory=list)

    def refused(self, what: str, r: httpx.Response, status: int, *words: str) -> None:
        """`r` must be exactly `status`, with a detail that says `words`."""
        assert r.status_code == status, (what, r.status_code, r.text[:300])
        assert "Traceback" not in r.text, r.text
        detail = r.json()["detail"]
        for word in words:
            assert word in detail, (what, detail)
        self.refusals.append((what, r.status_code, detail))


def _put(c: httpx.Client, ledger: Ledger, sid: str) -> httpx.Response:
    r = c.put(f"/api/sessions/{sid}", json={"objective": f"objective of {sid}"})
    if r.status_code == 201:
        ledger.sessions.add(sid)
        ledger.versions.setdefault(sid, [])
        ledger.journal.setdefault(sid, {})
        ledger.watches.setdefault(sid, set())
    else:
        ledger.refused_sessions.add(sid)
    return r


def _snapshot(c: httpx.Client, ledger: Ledger, sid: str, note: str) -> httpx.Response:
    r = c.post(f"/api/sessions/{sid}/snapshots", json={"force": True, "note": note})
    if r.status_code == 201:
        version = r.json()["header"]["version"]
        ledger.versions[sid].append(version)
        markdown = c.get(f"/api/sessions/{sid}/snapshots/{version}/markdown")
        assert markdown.status_code == 200, markdown.text[:300]
        ledger.markdown[(sid, version)] = markdown.text
    return r


def _entry(c: httpx.Client, ledger: Ledger, sid: str, text: str) -> httpx.Response:
    body = {"kind": "attempt", "text": text, "status": "running"}
    r = c.post(f"/api/sessions/{sid}/journal", json=body)
    if r.status_code == 201:
        ledger.journal[sid][r.json()["id"]] = (text, "running")
    return r


def _finish(c: httpx.Client, ledger: Ledger, sid: str) -> httpx.Response | None:
    """Marks the oldest running attempt failed; None when none is running."""
    running = [eid for eid, (_, status) in ledger.journal[sid].items() if status == "running"]
    if not running:
        return None
    eid = min(running)
    r = c.patch(f"/api/sessions/{sid}/journal/{eid}", json={"status": "failed"})
    if r.status_code == 200:
        ledger.journal[sid][eid] = (ledger.journal[sid][eid][0], "failed")
    return r


def _watch(c: httpx.Client, ledger: Ledger, sid: str, port: int) -> httpx.Response:
    r = c.post(f"/api/sessions/{sid}/watches", json={"kind": "port", "port": port})
    if r.status_code == 201:
        ledger.watches[sid].add(r.json()["id"])
    return r


def _unwatch(c: httpx.Client, ledger: Ledger, sid: str) -> httpx.Response | None:
    if not ledger.watches[sid]:
        return None
    wid = min(ledger.watches[sid])
    r = c.delete(f"/api/sessions/{sid}/watches/{wid}")
    if r.status_code in (200, 204):
        ledger.watches[sid].discard(wid)
    return r


def _writes(c: httpx.Client, ledger: Ledger, sid: str, i: int) -> list[tuple[str, httpx.Response]]:
    """One of each kind of write; each answer is checked by the caller."""
    done = [
        ("snapshot", _snapshot(c, ledger, sid, f"round {i} " + "n" * 2000)),
        ("journal", _entry(c, ledger, sid, f"attempt {i} " + os.urandom(1500).hex())),
        ("session", _put(c, ledger, f"new-{i}")),
        ("watch", _watch(c, ledger, sid, 20000 + i)),
    ]
    for what, maybe in (("update", _finish(c, ledger, sid)), ("unwatch", _unwatch(c, ledger, sid))):
        if maybe is not None:
            done.append((what, maybe))
    return done


def _set_up(c: httpx.Client, ledger: Ledger, sid: str) -> None:
    assert _put(c, ledger, sid).status_code == 201
    for i in range(3):
        assert _entry(c, ledger, sid, f"first attempt {i}").status_code == 201
        assert _watch(c, ledger, sid, 10000 + i).status_code == 201
        assert _snapshot(c, ledger, sid, f"before {i}").status_code == 201


def _reads_answer(c: httpx.Client, ledger: Ledger, sid: str) -> None:
    """What is stored is served while writes are refused: the acknowledged state, exactly."""
    health = c.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok", health.text
    assert {s["id"] for s in c.get("/api/sessions").json()} >= ledger.sessions
    _matches(c, ledger, sid)
    latest = ledger.versions[sid][-1]
    resumed = c.get(f"/api/sessions/{sid}/resume", params={"fresh": "false"})
    assert resumed.status_code == 200 and resumed.text == ledger.markdown[(sid, latest)]
    for path in (f"/s/{sid}", f"/s/{sid}/v/{latest}", f"/api/sessions/{sid}/snapshots/{latest}"):
        r = c.get(path)
        assert r.status_code == 200, (path, r.text[:300])


def _matches(c: httpx.Client, ledger: Ledger, sid: str) -> None:
    """The server holds exactly what it acknowledged of `sid`: no more, no less."""
    listed = c.get(f"/api/sessions/{sid}/snapshots")
    assert listed.status_code == 200, listed.text
    assert sorted(s["version"] for s in listed.json()) == ledger.versions[sid]
    for version in ledger.versions[sid]:
        r = c.get(f"/api/sessions/{sid}/snapshots/{version}/markdown")
        assert r.status_code == 200 and r.text == ledger.markdown[(sid, version)], version
    entries = c.get(f"/api/sessions/{sid}/journal").json()
    assert {e["id"]: (e["text"], e["status"]) for e in entries} == ledger.journal[sid]
    assert {w["id"] for w in c.get(f"/api/sessions/{sid}/watches").json()} == ledger.watches[sid]


def _nothing_lost(srv: Server, ledger: Ledger) -> None:
    """Against a restarted server: every acknowledged thing is there, every refused one not,
    and each version's Markdown file holds what the server answered for it."""
    with srv.client() as c:
        for sid in sorted(ledger.sessions):
            _matches(c, ledger, sid)
        for sid in ledger.refused_sessions - ledger.sessions:
            assert c.get(f"/api/sessions/{sid}").status_code == 404, sid
        assert c.get("/health").json()["storage"] == "writable"
    for (sid, version), markdown in ledger.markdown.items():
        if version > max(ledger.versions[sid]) - 20:  # CTXD_MARKDOWN_FILES, the default window
            path = srv.data_dir / sid / f"v{version:04d}.md"
            assert path.read_text() == markdown, path


def _no_traceback(*servers: Server) -> None:
    for srv in servers:
        assert "Traceback" not in srv.log(), srv.log()[-3000:]


# --- (a) the data directory's filesystem fills up ----------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs, so "no space left" comes from the kernel; unmounted in the end."""
    _needs_root()
    mount = tmp_path / "small"
    mount.mkdir()
    _mount("-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount))
    try:
        yield mount
    finally:
        _umount(mount)


def test_a_data_dir_that_fills_up_answers_507_and_keeps_what_it_acknowledged(
    small_tmpfs: Path, tmp_path: Path
) -> None:
    data = small_tmpfs / "data"
    ledger = Ledger()
    srv = start_server(data, tmp_path / "ctxd.log", env=QUIET)
    try:
        with srv.client() as c:
            _set_up(c, ledger, "full")
            filler = fill_disk(small_tmpfs)  # beside the data dir, on its filesystem
            # Writes until the database has no room left in the blocks it holds: each one is
            # acknowledged (and must last) or refused with exactly 507.
            for i in range(60):
                for what, r in _writes(c, ledger, "full", i):
                    if r.status_code >= 300:
                        ledger.refused(what, r, 507, "full", "not saved")
                if len(ledger.refusals) >= 12:
                    break
            refused = {what for what, _, _ in ledger.refusals}
            assert {"snapshot", "journal", "session", "watch"} <= refused, ledger.refusals
            _reads_answer(c, ledger, "full")
            filler.unlink()
            # Room again: writes are acknowledged at once, without a restart.
            assert _snapshot(c, ledger, "full", "room again").status_code == 201
            assert _entry(c, ledger, "full", "after the disk was freed").status_code == 201
    finally:
        stop_server(srv)
    again = start_server(data, tmp_path / "again.log", env=QUIET)
    try:
        _nothing_lost(again, ledger)
    finally:
        stop_server(again)
    _no_traceback(srv, again)


# --- (b) the data directory's filesystem turns read-only ---------------------------------------


@dataclass
class Ext4:
    image: Path
    mount: Path
    mounted: bool | None = None  # None: never mounted yet

    def mount_it(self) -> None:
        args = ["-o", "loop,errors=remount-ro", str(self.image), str(self.mount)]
        if self.mounted is None:  # the first time: a machine without loop devices skips
            _mount(*args)
        else:
            subprocess.run(["mount", *args], check=True, capture_output=True)
        self.mounted = True

    def unmount(self) -> None:
        if self.mounted:
            _umount(self.mount)
            self.mounted = False

    def fail(self) -> None:
        """An error in the filesystem, as a failing disk would report: with errors=remount-ro
        the kernel makes it read-only at once, for files already open too."""
        dev = os.stat(self.mount).st_dev
        block = Path(os.path.realpath(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")).name
        trigger = Path("/sys/fs/ext4") / block / "trigger_fs_error"
        if not trigger.exists():
            pytest.skip(f"this kernel cannot inject an ext4 error ({trigger} is missing)")
        trigger.write_text("ctxd test: the disk failed\n")


@pytest.fixture
def ext4(tmp_path: Path) -> Iterator[Ext4]:
    """A 32 MB ext4 image on a loop device, mounted with errors=remount-ro."""
    _needs_root()
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("mkfs.ext4 is not installed")
    fs = Ext4(tmp_path / "fs.img", tmp_path / "ext4")
    with open(fs.image, "wb") as image:
        image.truncate(32 * 1024 * 1024)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(fs.image)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {made.stderr.strip()}")
    fs.mount.mkdir()
    fs.mount_it()
    try:
        yield fs
    finally:
        fs.unmount()


def test_a_data_dir_turned_read_only_answers_503_and_keeps_what_it_acknowledged(
    ext4: Ext4, tmp_path: Path
) -> None:
    data = ext4.mount / "data"
    ledger = Ledger()
    srv = start_server(data, tmp_path / "ctxd.log", env=QUIET)
    try:
        with srv.client() as c:
            _set_up(c, ledger, "ro")
            ext4.fail()
            with pytest.raises(OSError, match="Read-only file system"):
                (data / "probe").write_text("x")
            for i in range(3):
                for what, r in _writes(c, ledger, "ro", i):
                    ledger.refused(what, r, 503, "read-only", "not saved")
            assert len(ledger.refusals) == 18, ledger.refusals  # all six kinds, three times
            _reads_answer(c, ledger, "ro")
    finally:
        stop_server(srv)
    # The disk is "repaired": unmounted and mounted again (ext4 replays its journal).
    ext4.unmount()
    ext4.mount_it()
    again = start_server(data, tmp_path / "again.log", env=QUIET)
    try:
        _nothing_lost(again, ledger)
        with again.client() as c:
            assert _snapshot(c, ledger, "ro", "writable again").status_code == 201
    finally:
        stop_server(again)
    _no_traceback(srv, again)


# --- (c) the data directory is deleted, or replaced, while ctxd runs ----------------------------


def test_a_data_dir_deleted_while_running_refuses_writes_and_answers_reads(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    ledger = Ledger()
    srv = start_server(data, tmp_path / "ctxd.log", env=QUIET)
    try:
        with srv.client() as c:
            _set_up(c, ledger, "gone")
            shutil.rmtree(data)
            for i in range(2):
                for what, r in _writes(c, ledger, "gone", i):
                    ledger.refused(what, r, 503, "removed", "not saved", "restart")
            # Refused before the database: a fresh resume would store a version, so it too.
            r = c.get("/api/sessions/gone/resume")
            ledger.refused("fresh resume", r, 503, "removed", "not saved")
            # What the process still holds is served, and health says writes are refused.
            _reads_answer(c, ledger, "gone")
            assert c.get("/health").json()["storage"] == "read-only"
            assert not data.exists(), "nothing half made again: no files without a database"
    finally:
        stop_server(srv)
    # Restarted: a new, empty data directory; nothing refused came back from anywhere.
    again = start_server(data, tmp_path / "again.log", env=QUIET)
    try:
        with again.client() as c:
            assert c.get("/api/sessions").json() == []
            assert c.get("/health").json()["storage"] == "writable"
            fresh = Ledger()
            assert _put(c, fresh, "after").status_code == 201
            assert _snapshot(c, fresh, "after", "a new start").status_code == 201
    finally:
        stop_server(again)
    third = start_server(data, tmp_path / "third.log", env=QUIET)
    try:
        _nothing_lost(third, fresh)
    finally:
        stop_server(third)
    _no_traceback(srv, again, third)


def test_a_data_dir_restored_from_a_copy_while_running_is_not_written_behind_it(
    tmp_path: Path,
) -> None:
    """The data dir swapped for a copy of itself (a restore from backup, a sync tool): the
    open database is no longer the file at its path, so a commit would vanish on restart."""
    data = tmp_path / "data"
    ledger = Ledger()
    srv = start_server(data, tmp_path / "ctxd.log", env=QUIET)
    try:
        with srv.client() as c:
            _set_up(c, ledger, "swap")
            copy = tmp_path / "copy"
            copy.mkdir()
            # SQLite's online backup: a consistent copy of the live database, as a tool takes
            with (
                contextlib.closing(sqlite3.connect(data / "ctxd.db")) as live,
                contextlib.closing(sqlite3.connect(copy / "ctxd.db")) as backup,
            ):
                live.backup(backup)
            os.rename(data, tmp_path / "old")
            os.rename(copy, data)
            for i in range(2):
                for what, r in _writes(c, ledger, "swap", i):
                    ledger.refused(what, r, 503, "replaced", "not saved")
            _reads_answer(c, ledger, "swap")
    finally:
        stop_server(srv)
    again = start_server(data, tmp_path / "again.log", env=QUIET)
    try:
        _nothing_lost(again, ledger)
    finally:
        stop_server(again)
    _no_traceback(srv, again)


def test_files_after_a_commit_do_not_make_a_removed_data_dir_again(tmp_path: Path) -> None:
    """The race the store's check leaves: the data dir removed between a commit and its
    Markdown files. The files are not written into a new data dir that has no database."""
    from ctxd.models import SessionIn
    from ctxd.render.dump_files import DumpFiles
    from ctxd.settings import Settings
    from ctxd.store.database import Store

    settings = Settings(data_dir=tmp_path / "data")
    store = Store(settings.db_path)
    try:
        store.put_session("s", SessionIn())
        files = DumpFiles(settings, store)
        assert files.write("s", 1, "# s · v1\n", latest=True)
        shutil.rmtree(settings.data_dir)
        assert not files.write("s", 2, "# s · v2\n", latest=True)
        assert not settings.data_dir.exists()
        assert files.files_behind("s") == [2]
        assert files.latest_in_memory("s") == "# s · v2\n"  # resume follows the commit
    finally:
        store.close()
