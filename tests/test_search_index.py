"""The search index in the store: written with its rows, deduplicated, bounded, backfilled."""

import zlib
from datetime import timedelta
from pathlib import Path

import pytest
from ctxd.attempts.model import AttemptUpdate
from ctxd.errors import Invalid
from ctxd.models import JournalIn, SessionIn, Snapshot, SnapshotHeader
from ctxd.store import agent as store_agent
from ctxd.store import search_index as store_search
from ctxd.store.connection import now
from ctxd.store.database import Store
from ctxd.store.schema import migrations
from ctxd.usecases import search
from sqlite_utils import Database


def _build(sid: str, markdown: str, moment=None):
    def build(version: int) -> tuple[Snapshot, str]:
        at = moment or now()
        header = SnapshotHeader(session=sid, version=version, taken_at=at, trigger="x")
        return Snapshot(header=header), markdown.replace("{v}", str(version))

    return build


def _hits(store: Store, q: str, sid: str | None = "s", limit: int = 100) -> list:
    return search.find(store, sid, q, limit=limit).hits


DUMP = "# s · v{v}\n\n## Logs\n\nepoch 3 loss 0.42\n\n## Processes\n\n- python train.py\n"


def test_unchanged_blocks_are_indexed_once_and_numbers_alone_do_not_reindex(tmp_path: Path):
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())
    for _ in range(50):
        store.add_snapshot("s", _build("s", DUMP))
    rows = store._rows("select count(*) n from search_docs where source = 'dump'")[0]["n"]
    assert rows == 3  # the header (its version number is a number), Logs, Processes
    [hit] = _hits(store, '"train.py"')
    assert (hit.version, hit.last_version, hit.kind) == (1, 50, "dump Processes")
    store.add_snapshot("s", _build("s", DUMP.replace("python train.py", "torchrun eval.py")))
    [new] = _hits(store, "torchrun")
    assert new.version == 51 and new.link == "/s/s/v/51"


def test_journal_updates_replace_their_entry_and_actions_are_bounded(tmp_path: Path, monkeypatch):
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())
    entry = store.add_entry("s", JournalIn(kind="attempt", text="lower the lr", status="running"))
    store.update_entry("s", entry.id, {"status": "failed", "outcome": "diverged at step 40"})
    [hit] = _hits(store, "status:failed AND diverged")
    assert hit.kind == "journal attempt" and hit.version == 0 and hit.link == "/s/s"
    assert not _hits(store, "status:running")

    monkeypatch.setattr(store_search, "ACTIONS_INDEXED", 5)
    for i in range(12):
        body = {"command": f"make step{i}", "output_tail": "ok", "exit_status": 0}
        store.add_action("s", "command", now(), body)
    assert store_agent.ACTIONS_KEPT > 12  # the ring keeps them all; the index only 5
    found = _hits(store, "kind:command")
    assert len(found) == 5 and "make step11" in {h.snippet for h in found}
    assert not _hits(store, "step0") and _hits(store, "step11")


def test_a_launch_is_indexed_with_how_it_ended_and_reindexed_only_when_that_changes(tmp_path):
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())
    launch = {"start_key": "42:1", "pid": 42, "started_at": now(), "argv": ["vllm", "serve"]}
    store.save_attempts(
        "s", [AttemptUpdate(**{**launch, "cwd": "/srv", "env": {}, "expected_ports": [8000]})]
    )
    first = store._rows("select id from search_docs where source = 'launch'")
    store.save_attempts("s", [AttemptUpdate("42:1", idle_s=3.0)])  # not indexed: same row
    assert store._rows("select id from search_docs where source = 'launch'") == first
    assert store.list_attempts("s")[0].idle_s == 3.0  # the one changed field, stored
    store.save_attempts("s", [AttemptUpdate("42:1", idle_s=3.0)])  # nothing new: no write
    assert list(store.list_attempts("s")[0].argv) == ["vllm", "serve"]
    [running] = _hits(store, '"vllm serve" AND status:running')
    assert running.kind == "launch"
    store.save_attempts("s", [AttemptUpdate("42:1", ended_at=now())])
    assert not _hits(store, "status:running") and _hits(store, "status:ended AND vllm")


def test_an_idle_crowd_of_launches_is_not_rewritten_every_snapshot(tmp_path):
    """300 running launches seen again: only a material change of idle time is written, and
    a launch's start facts are never compared again (nor rewritten)."""
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())
    crowd = [
        {"start_key": f"{pid}:1", "pid": pid, "started_at": now(), "argv": ["sleep", "3599"],
         "cwd": "/", "env": {}, "expected_ports": [], "port_opened": None, "idle_s": 60.0}
        for pid in range(1000, 1300)
    ]  # fmt: skip
    store.save_attempts("s", [AttemptUpdate(**launch) for launch in crowd])
    changes = store.db.conn.total_changes
    store.save_attempts("s", [AttemptUpdate(**{**launch, "idle_s": 64.0}) for launch in crowd])
    assert store.db.conn.total_changes == changes  # 4 s more of 60: not worth 300 writes
    store.save_attempts("s", [AttemptUpdate(**{**crowd[0], "idle_s": 70.0})])
    assert store.db.conn.total_changes == changes + 1
    assert {row.idle_s for row in store.list_attempts("s", limit=300)} == {60.0, 70.0}
    store.save_attempts("s", [AttemptUpdate(**{**crowd[1], "ended_at": now()})])
    assert _hits(store, "status:ended")


def test_pruning_drops_blocks_of_removed_versions_and_relinks_the_rest(tmp_path: Path):
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())
    # early in an old day, so that its four hours never cross midnight whenever this runs
    old = (now() - timedelta(days=40)).replace(hour=1, minute=0, second=0, microsecond=0)
    for hour in range(4):  # v1..v4 on one old day: v2 and v3 will go
        text = "## Logs\n\nalpha\n" if hour == 1 else "## Logs\n\nbeta\n"
        store.add_snapshot("s", _build("s", text, old + timedelta(hours=hour)))
    store.add_snapshot("s", _build("s", "## Logs\n\ngamma\n"))
    assert _hits(store, "alpha")[0].version == 2
    removed = store.prune(keep_days=30)
    assert sorted(v for _, v in removed) == [2, 3]
    assert not _hits(store, "alpha")  # said only by a removed version
    assert [h.version for h in _hits(store, "beta")] == [1]  # said by v1 (kept) and v3..v4
    assert _hits(store, "gamma")[0].version == 5


def test_the_migration_backfills_an_older_data_dir(tmp_path: Path):
    path = tmp_path / "ctxd.db"
    old = Database(path)
    migrations.apply(old, stop_before="m005_search")
    moment = now().isoformat()
    old["sessions"].insert(  # type: ignore[union-attr]
        {"id": "old", "title": "t", "objective": "o", "quiet_after_s": 60,
         "created_at": moment, "last_activity_at": moment}
    )  # fmt: skip
    old["journal"].insert(  # type: ignore[union-attr]
        {"session": "old", "kind": "finding", "text": "the NIC drops jumbo frames",
         "created_at": moment, "concerns": "[]"}
    )  # fmt: skip
    old["snapshots"].insert(  # type: ignore[union-attr]
        {"session": "old", "version": 1, "taken_at": moment, "trigger": "x",
         "markdown_z": zlib.compress(b"## Now\n\n- segfault in libnccl\n")}
    )  # fmt: skip
    old.close()
    store = Store(path)
    assert _hits(store, "jumbo", sid="old")[0].source == "journal"
    assert _hits(store, "libnccl", sid="old")[0].version == 1


def test_query_bounds_say_why(tmp_path: Path):
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())
    for q, why in [
        ("", "empty"),
        ("x" * 600, "characters"),
        (" ".join(["w"] * 40), "terms"),
        ("NEAR(a b) " * 5, "NEAR"),
        ('"open', "not a valid search query"),
    ]:
        with pytest.raises(Invalid, match=why):
            search.find(store, "s", q)
    with pytest.raises(Invalid, match="limit"):
        search.find(store, "s", "x", limit=0)


def test_a_query_over_its_time_budget_is_stopped_and_the_store_still_works(tmp_path, monkeypatch):
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())
    for i in range(200):
        store.add_entry("s", JournalIn(kind="note", text=f"step{i} loss step{i + 1} loss"))
    monkeypatch.setattr(search, "BUDGET_S", 0.0)
    with pytest.raises(Invalid, match="took over"):
        search.find(store, "s", "step* OR loss*")
    monkeypatch.setattr(search, "BUDGET_S", 2.0)
    assert len(_hits(store, "loss", limit=100)) == 100
    store.add_entry("s", JournalIn(kind="note", text="after the interrupt"))  # writes still work


def test_snippet_html_escapes_everything_but_the_marks():
    assert search.snippet_html("<i>a</i> **b** c") == "&lt;i&gt;a&lt;/i&gt; <mark>b</mark> c"
    assert search.snippet_html("a ** b") == "a ** b"
