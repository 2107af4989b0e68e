"""The full-text index is written when indexed text changes, not when a dump block seen again
only moves its `last_version`."""

import hashlib
from pathlib import Path

from ctxd.models import SessionIn, Snapshot, SnapshotHeader
from ctxd.store.connection import now
from ctxd.store.database import Store
from ctxd.usecases import search

DUMP = "# s · v{v}\n\n## Logs\n\nepoch 3 loss 0.{v}\n\n## Processes\n\n- python train.py\n"


def _fts_bytes(store: Store) -> str:
    rows = store._rows("select id, block from search_docs_fts_data order by id")
    return hashlib.sha256(b"".join(str(r["id"]).encode() + r["block"] for r in rows)).hexdigest()


def test_a_block_seen_again_leaves_the_full_text_index_untouched(tmp_path: Path) -> None:
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())

    def build(version: int) -> tuple[Snapshot, str]:
        header = SnapshotHeader(session="s", version=version, taken_at=now(), trigger="x")
        return Snapshot(header=header), DUMP.replace("{v}", str(version))

    store.add_snapshot("s", build)
    index = _fts_bytes(store)
    for _ in range(40):
        store.add_snapshot("s", build)
    assert _fts_bytes(store) == index
    [hit] = search.find(store, "s", '"train.py"', limit=10).hits
    assert (hit.version, hit.last_version) == (1, 41)
    # text that does change is still taken out of the index and put back, by the same trigger
    with store._lock, store.db.atomic():
        store.db.execute(
            "update search_docs set text = 'gradient exploded' where kind = 'dump Logs'"
        )
    assert search.find(store, "s", "exploded", limit=10).hits
    assert not search.find(store, "s", "loss", limit=10).hits
