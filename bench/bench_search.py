"""Search at scale: indexing cost per version and query latency over a long session history.

Run: .venv/bin/python -m bench.bench_search [--versions 10000]
A session of N versions (a log tail that grows, a process table whose numbers move, a journal
entry every 50 versions, a command every 10) is written through the store, then queried.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from ctxd.models import JournalIn, SessionIn, Snapshot, SnapshotHeader
from ctxd.store import search_index as store_search
from ctxd.store.connection import now
from ctxd.store.database import Store
from ctxd.usecases import search

from bench.timing import p95, timed

QUERIES = [
    '"no kernel image"',
    "NCCL*",
    "status:failed AND detail:hang*",
    "kind:command AND torchrun",
    "epoch OR loss",
    "NEAR(watchdog timeout, 5)",
]


def dump(version: int) -> str:
    tail = "\n".join(f"epoch {version // 10} step {s} loss {1 / (s + 1):.4f}" for s in range(5))
    error = "\nRuntimeError: no kernel image is available\n" if version % 997 == 0 else ""
    return (
        f"# bench · v{version} · trigger `quiet`\n\n## Objective\n\nfind why training stalls\n\n"
        f"## Now\n\n- **warn**: GPU 0 at {version % 100} % for 3 min\n\n"
        f"## Processes\n\n| pid | cpu | cmd |\n| 4242 | {version % 97} % | torchrun train.py |\n\n"
        f"## Logs\n\n### /var/log/train.log\n\n```\n{tail}{error}\n```\n\n"
        f"## Changes since v{version - 1}\n\n- log grew by {version % 13} lines\n"
    )


def build(store: Store, versions: int) -> list[float]:
    """Write the session; milliseconds each version's store call took."""
    store.put_session("bench", SessionIn())
    per_version = []
    for v in range(1, versions + 1):
        if v % 50 == 0:
            text = f"tried NCCL_P2P_DISABLE=1 run {v}"
            store.add_entry("bench", JournalIn(kind="attempt", text=text, status="failed"))
        if v % 10 == 0:
            body = {"command": f"torchrun train.py --seed {v}", "exit_status": 1,
                    "output_tail": "watchdog caught collective operation timeout"}  # fmt: skip
            store.add_action("bench", "command", now(), body)
        markdown = dump(v)
        header = SnapshotHeader(session="bench", version=v, taken_at=now(), trigger="x")
        started = time.perf_counter()
        store.add_snapshot("bench", lambda _v, h=header, m=markdown: (Snapshot(header=h), m))
        per_version.append((time.perf_counter() - started) * 1000)
    return per_version


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", type=int, default=10_000)
    run(parser.parse_args().versions)


def run(versions: int) -> None:
    """Build the session twice (with and without the dump's index), then query it."""
    with tempfile.TemporaryDirectory() as tmp:
        indexed = Store(Path(tmp) / "indexed.db")
        with_index = build(indexed, versions)
        plain = Store(Path(tmp) / "plain.db")
        index_dump = store_search.index_dump
        store_search.index_dump = lambda *_: None  # the same writes without the dump's index
        try:
            without = build(plain, versions)
        finally:
            store_search.index_dump = index_dump
        print(f"search over {versions} versions (store level, one session)")
        with_ms, without_ms = statistics.median(with_index), statistics.median(without)
        print(f"  store a version with its index, median  {with_ms:.3f} ms")
        print(f"  store a version without, median         {without_ms:.3f} ms")
        print(f"  indexing cost per version               {with_ms - without_ms:.3f} ms")
        size = store_search.size(indexed.db)
        print(f"  index rows {size['rows']}, index + documents {size['bytes'] / 1024:.0f} KiB")
        print(f"  database with index {indexed.size_bytes() / 1024:.0f} KiB,"
              f" without {plain.size_bytes() / 1024:.0f} KiB")  # fmt: skip
        for q in QUERIES:
            hits = len(search.find(indexed, "bench", q, limit=20).hits)
            times = timed(lambda q=q: search.find(indexed, "bench", q, limit=20), 50)
            print(
                f"  query {q:<34} median {statistics.median(times):6.2f} ms"
                f"  p95 {p95(times):6.2f} ms  ({hits} hits)"
            )
        indexed.close()
        plain.close()


if __name__ == "__main__":
    main()
