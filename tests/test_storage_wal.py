"""The WAL stays small: checkpointed every few snapshots and cut back when it starts over."""

from pathlib import Path

from ctxd.models import SessionIn, Snapshot, SnapshotHeader
from ctxd.store.connection import WAL_CHECKPOINT_PAGES, now
from ctxd.store.database import Store


def test_the_wal_file_stays_bounded_over_many_snapshots(tmp_path: Path) -> None:
    store = Store(tmp_path / "ctxd.db")
    store.put_session("s", SessionIn())
    wal = tmp_path / "ctxd.db-wal"
    page = store._rows("pragma page_size")[0]["page_size"]
    largest = 0

    def build(version: int) -> tuple[Snapshot, str]:
        header = SnapshotHeader(session="s", version=version, taken_at=now(), trigger="manual")
        lines = "\n".join(f"step {version}.{i} loss {1 / (version + i):.6f}" for i in range(40))
        return Snapshot(header=header, title=lines), f"# s · v{version}\n\n{lines}\n"

    for _ in range(400):
        store.add_snapshot("s", build)
        largest = max(largest, wal.stat().st_size)
    # a checkpoint's worth of pages and a snapshot's transaction or two, not the old 1 MB+
    assert largest <= 2 * WAL_CHECKPOINT_PAGES * (page + 24)
    assert store.get_markdown("s", 1).startswith("# s · v1\n")
    store.close()
