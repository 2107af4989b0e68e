"""The store: versions without gaps or duplicates under concurrency, and old data dirs open."""

import sqlite3
import threading
import zlib
from pathlib import Path

import pytest
from ctxd.attempts.model import AttemptUpdate
from ctxd.errors import LimitReached, NotFound
from ctxd.models import JournalIn, LogWatch, SessionIn, Snapshot, SnapshotHeader
from ctxd.store.connection import now
from ctxd.store.database import Store
from ctxd.store.schema import migrations
from ctxd.usecases import search
from sqlite_utils import Database


def _snapshot(sid: str, version: int) -> tuple[Snapshot, str]:
    header = SnapshotHeader(session=sid, version=version, taken_at=now(), trigger="manual")
    return Snapshot(header=header), f"# {sid} v{version}\n"


def test_versions_are_contiguous_under_concurrent_writers(tmp_path: Path):
    store = Store(tmp_path / "ctxd.db")
    for sid in ("a", "b"):
        store.put_session(sid, SessionIn())
    errors: list[BaseException] = []

    def writer(sid: str) -> None:
        try:
            for _ in range(25):
                store.add_snapshot(sid, lambda v, sid=sid: _snapshot(sid, v))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(sid,)) for sid in "abab" * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for sid in ("a", "b"):
        versions = sorted(s.version for s in store.list_snapshots(sid))
        assert versions == list(range(1, 101))
        assert store.get_markdown(sid, 100) == f"# {sid} v100\n"


def test_a_failed_build_leaves_no_version_and_no_gap(tmp_path: Path):
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())
    store.add_snapshot("s", lambda v: _snapshot("s", v))

    def broken(version: int) -> tuple[Snapshot, str]:
        raise RuntimeError("render failed")

    with pytest.raises(RuntimeError):
        store.add_snapshot("s", broken)
    store.add_snapshot("s", lambda v: _snapshot("s", v))
    assert [s.version for s in store.list_snapshots("s")] == [2, 1]


def test_a_data_dir_from_the_first_schema_still_opens(tmp_path: Path):
    path = tmp_path / "ctxd.db"
    old = Database(path)
    migrations.apply(old, stop_before="m002_last_message")
    old["sessions"].insert(  # type: ignore[union-attr]
        {"id": "old", "title": "t", "objective": "o", "quiet_after_s": 60,
         "created_at": now().isoformat(), "last_activity_at": now().isoformat()}
    )  # fmt: skip
    old.close()
    store = Store(path)
    assert store.get_session("old").objective == "o"
    store.touch("old", message="carry on with the NCCL test")
    assert store.last_message("old")[0] == "carry on with the NCCL test"
    with sqlite3.connect(path) as db:
        assert db.execute("pragma journal_mode").fetchone()[0] == "wal"


def test_a_data_dir_whose_attempts_are_launches_opens_with_them_as_attempts(tmp_path: Path):
    """The table was `launches` before m013: its rows, their key's unique index and their
    search rows (source and kind `launch`) are the attempts' after the rename."""
    path = tmp_path / "ctxd.db"
    old = Database(path)
    migrations.apply(old, stop_before="m013_attempts")
    old["sessions"].insert(  # type: ignore[union-attr]
        {"id": "old", "title": "t", "objective": "o", "quiet_after_s": 60,
         "created_at": now().isoformat(), "last_activity_at": now().isoformat()}
    )  # fmt: skip
    row = {"session": "old", "start_key": "42:1", "pid": 42, "started_at": now().isoformat(),
           "argv": '["vllm", "serve"]', "cwd": "/srv", "env": "{}", "expected_ports": "[]",
           "logs": "[]", "seen": 1, "command": "vllm serve"}  # fmt: skip
    old["launches"].insert(row)  # type: ignore[union-attr]
    old.close()
    store = Store(path)
    (attempt,) = store.list_attempts("old")
    assert (attempt.pid, attempt.argv, attempt.command) == (42, ("vllm", "serve"), "vllm serve")
    store.save_attempts("old", [AttemptUpdate("42:1", ended_at=now(), error="OOM")])
    assert store.running_attempts("old") == [] and store.count_attempts("old") == 1
    with sqlite3.connect(path) as db:
        tables = {name for (name,) in db.execute("select name from sqlite_master")}
    assert "launches" not in tables and "idx_attempts_session_start_key" in tables
    [hit] = search.find(store, "old", "status:ended AND vllm").hits
    assert hit.kind == "launch"


def test_lookups_of_missing_things_raise_not_found(tmp_path: Path):
    store = Store(tmp_path / "ctxd.db")
    with pytest.raises(NotFound):
        store.get_session("missing")
    store.put_session("s", SessionIn(title="x"))
    with pytest.raises(NotFound):
        store.get_snapshot("s", 1)
    with pytest.raises(NotFound):
        store.delete_watch("s", 5)
    with pytest.raises(NotFound):
        store.add_entry("missing", JournalIn(kind="note", text="x"))


def test_reads_and_inserts_run_without_savepoints_or_schema_lookups(tmp_path: Path):
    # A snapshot reads the store a dozen times; wrapped in savepoints (sqlite-utils' query())
    # each read cost three statements.
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn(title="x"))
    store.add_snapshot("s", lambda version: _snapshot("s", version))
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)
    assert store.get_session("s").title == "x"
    assert store.latest_version("s") == 1
    assert store.list_watches("s") == []
    store.db.conn.set_trace_callback(None)
    assert len(statements) == 4, statements  # list_watches asks for its session first
    assert not store.db.conn.in_transaction
    with pytest.raises(ValueError, match="not a select"):
        store._rows("update sessions set title = title where 0")
    assert not store.db.conn.in_transaction  # the mistaken write's implicit BEGIN undone
    # a version and its search index: inserted without asking sqlite_master or a savepoint
    statements.clear()
    store.db.conn.set_trace_callback(statements.append)
    store.add_snapshot("s", lambda v: (_snapshot("s", v)[0], "# s\n\nthe kernel, rebuilt\n"))
    store.db.conn.set_trace_callback(None)
    assert not [s for s in statements if "sqlite_master" in s or "SAVEPOINT" in s], statements
    assert store.get_markdown("s", 2) == "# s\n\nthe kernel, rebuilt\n"
    [hit] = store.search("s", "kernel", limit=5, offset=0, budget_s=5.0)
    assert hit["version"] == 2


def test_a_snapshot_reads_open_attempts_and_the_newest_id_without_reading_them_all(
    tmp_path: Path,
):
    # A long session's 2,000 ended attempts: a snapshot asks which are open and the newest
    # id; read through the (session, start_key) index, each question read all 2,000 (and
    # sorted them by id again). The plans SQLite makes for the store's own statements say
    # which index they search, and that no sort is made.
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn(title="x"))
    ended = [AttemptUpdate(f"{n}:1", pid=n, started_at=now(), argv=("serve",), ended_at=now())
             for n in range(1, 301)]  # fmt: skip
    store.save_attempts("s", [*ended, AttemptUpdate("301:1", pid=301, started_at=now(),
                                                    argv=("serve", "--live"))])  # fmt: skip
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)
    [running] = store.running_attempts("s")
    newest = store.last_attempt_id("s")
    store.db.conn.set_trace_callback(None)
    assert running.argv == ("serve", "--live") and newest == running.id
    assert len(statements) == 2, statements
    with sqlite3.connect(tmp_path / "ctxd.db") as db:
        for statement in statements:
            plan = " ".join(row[-1] for row in db.execute(f"explain query plan {statement}"))
            assert "TEMP B-TREE" not in plan and "SCAN" not in plan, (statement, plan)
            assert "start_key" not in plan, (statement, plan)  # not the index of every attempt


def test_the_newest_actions_of_a_kind_are_found_without_reading_the_others(tmp_path: Path):
    # 150 commands kept, no wake: the newest wakes are found at once, not after reading back
    # through every command (a continue asks for four kinds)
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn(title="x"))
    for n in range(150):
        store.add_action("s", "command", now(), {"command": f"tail -n {n} run.log"})
    store.add_action("s", "file_edit", now(), {"path": "/srv/a.py"})
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)
    assert store.list_actions("s", "wake", 3) == []
    [edit] = store.list_actions("s", "file_edit", 3)
    store.db.conn.set_trace_callback(None)
    assert edit["path"] == "/srv/a.py" and len(statements) == 2, statements
    with sqlite3.connect(tmp_path / "ctxd.db") as db:
        for statement in statements:
            plan = " ".join(row[-1] for row in db.execute(f"explain query plan {statement}"))
            assert "kind=?" in plan and "TEMP B-TREE" not in plan, (statement, plan)


def test_watch_limit_is_enforced(tmp_path: Path):
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())
    store.add_watch("s", LogWatch(path="/tmp/a.log"), limit=1)
    with pytest.raises(LimitReached):
        store.add_watch("s", LogWatch(path="/tmp/b.log"), limit=1)


def test_put_session_is_idempotent_and_updates_only_given_fields(tmp_path: Path):
    store = Store(tmp_path / "ctxd.db")
    first, created = store.put_session("s", SessionIn(title="A", objective="O"))
    again, created_again = store.put_session("s", SessionIn(title="B"))
    assert created and not created_again
    assert (again.title, again.objective, again.created_at) == ("B", "O", first.created_at)


def test_prune_keeps_one_a_day_plus_first_and_last(tmp_path: Path):
    from datetime import timedelta

    store = Store(tmp_path / "ctxd.db")
    store.put_session("p", SessionIn())
    start = (now() - timedelta(days=40)).replace(hour=0, minute=0, second=0, microsecond=0)

    def at(moment):
        def build(version: int) -> tuple[Snapshot, str]:
            header = SnapshotHeader(session="p", version=version, taken_at=moment, trigger="x")
            return Snapshot(header=header, title=f"v{version}"), f"v{version}"

        return build

    # four versions a day for three old days, then two recent ones
    for day in range(3):
        for hour in (1, 5, 9, 13):
            store.add_snapshot("p", at(start + timedelta(days=day, hours=hour)))
    store.add_snapshot("p", at(now() - timedelta(hours=2)))
    store.add_snapshot("p", at(now() - timedelta(hours=1)))
    removed = store.prune(keep_days=30)
    kept = sorted(s.version for s in store.list_snapshots("p"))
    assert kept == [1, 4, 8, 12, 13, 14]
    assert sorted(v for _, v in removed) == [2, 3, 5, 6, 7, 9, 10, 11]
    assert store.get_snapshot("p", 12).title == "v12"
    blobs = store._rows("select count(*) n from blobs")[0]["n"]
    assert blobs <= 6 * 6  # orphaned sections went with their versions


def test_a_version_can_be_read_in_parts(tmp_path: Path):
    from ctxd.models import LogInfo, LogsSection, Observations, Signal

    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())

    def build(version: int) -> tuple[Snapshot, str]:
        header = SnapshotHeader(session="s", version=version, taken_at=now(), trigger="t")
        log = LogInfo(watch_id=1, path="/l", size=1, modified_at=now(), silent_for_s=0)
        snap = Snapshot(
            header=header,
            signals=[Signal(severity="info", code="c", text="hello")],
            observations=Observations(logs=LogsSection(items=[log])),
        )
        return snap, "md"

    store.add_snapshot("s", build)
    part = store.get_snapshot("s", 1, frozenset({"signals"}))
    assert [s.text for s in part.signals] == ["hello"]
    assert part.observations.logs.items == [] and part.header.version == 1
    assert len(store.get_snapshot("s", 1).observations.logs.items) == 1


def test_dumps_stored_as_deltas_read_back_whole_before_and_after_a_prune(tmp_path: Path):
    """Most versions are stored as a delta against a keyframe dump; each reads back exactly,
    a confirmation rewrites the latest, and a prune that removes a keyframe leaves the
    versions that leaned on it readable."""
    from datetime import timedelta

    from ctxd.store.versions import KEYFRAME_EVERY

    store = Store(tmp_path / "ctxd.db")
    store.put_session("d", SessionIn())
    log = [f"2026-11-29 12:00:{i % 60:02d} step {i} loss {1 / (i + 1):.5f}" for i in range(300)]
    # from half past midnight, whenever the test runs: which version is the last of its day
    # (one a prune keeps) must not depend on the hour of the run
    old = (now() - timedelta(days=40)).replace(hour=0, minute=30, second=0, microsecond=0)
    dumps: dict[int, str] = {}

    def build(version: int) -> tuple[Snapshot, str]:
        moment = old + timedelta(hours=version) if version < 70 else now()
        header = SnapshotHeader(session="d", version=version, taken_at=moment, trigger="x")
        tail = "\n".join(log[version : version + 40])
        dumps[version] = f"# d · v{version}\n\n## Logs\n\n```text\n{tail}\n```\n"
        return Snapshot(header=header), dumps[version]

    for _ in range(80):
        store.add_snapshot("d", build)
    assert all(store.get_markdown("d", v) == dumps[v] for v in dumps)
    stored = store._rows("select sum(length(markdown_z)) n from snapshots")[0]["n"]
    whole = sum(len(zlib.compress(d.encode(), 6)) for d in dumps.values())
    assert stored < whole / 2
    store.set_markdown("d", 80, dumps[80] + "\nStill true.\n")
    assert store.get_markdown("d", 80).endswith("Still true.\n")

    removed = {v for _, v in store.prune(keep_days=30)}
    assert 1 + KEYFRAME_EVERY in removed  # a keyframe went; versions after it lean on it
    for version in sorted(set(dumps) - removed - {80}):
        assert store.get_markdown("d", version) == dumps[version]
    store.add_snapshot("d", build)
    assert store.get_markdown("d", 81) == dumps[81]
