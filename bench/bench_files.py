"""Benchmark: cost of log tails and artifact fingerprints against `tail -n 40` and `sha256sum`.

Run: .venv/bin/python -m bench.bench_files [--runs N]. Prints medians in milliseconds.
Logs are sparse files (1 MB, 1 GB, 10 GB) ending in 2,000 real text lines; the artifact
directory holds a 100 GB sparse file and 5,000 small files. `sha256sum` of the 100 GB file
would take minutes, so it is timed on the 1 GB log and extrapolated linearly (said so below).
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from ctxd.collectors import CollectContext, artifacts, logs
from ctxd.models import ArtifactWatch, LogWatch, Watch
from ctxd.settings import Settings

from bench.timing import median_ms

LOG_SIZES = {"1 MB": 10**6, "1 GB": 10**9, "10 GB": 10**10}
TEXT = b"".join(
    b"[2026-01-01 00:00:%02d TP0] Decode batch. #running-req: %d, gen throughput: 41.2\n"
    % (i % 60, i)
    for i in range(2000)
)


def make_log(path: Path, size: int) -> None:
    with path.open("wb") as f:
        f.truncate(size - len(TEXT))
        f.seek(0, 2)
        f.write(TEXT)


def make_model_dir(root: Path) -> None:
    (root / "shards").mkdir(parents=True)
    with (root / "model.safetensors").open("wb") as f:
        f.truncate(100 * 10**9)
    for i in range(5000):
        (root / "shards" / f"f{i:04d}.json").write_text(f'{{"shard": {i}}}\n')


def watch(spec: LogWatch | ArtifactWatch) -> Watch:
    return Watch(id=1, session="bench", created_at=datetime.now(UTC), spec=spec)


def run(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def bench_log(path: Path, runs: int) -> tuple[float, float, float, float]:
    """(cold, warm, after an append, tail -n 40) medians for one log."""
    w = [watch(LogWatch(path=str(path), lines=40))]
    # cold: no memory, so the tail is read and the last 8 MB are scanned for errors
    cold = median_ms(lambda: logs.collect(w, CollectContext(settings=Settings())), runs)
    ctx = CollectContext(settings=Settings())
    logs.collect(w, ctx)
    warm = median_ms(lambda: logs.collect(w, ctx), runs)  # unchanged: nothing read

    def append_then_collect() -> None:
        with path.open("ab") as f:
            f.write(TEXT[: len(TEXT) // 2])
        logs.collect(w, ctx)

    grown = median_ms(append_then_collect, runs)
    tail = median_ms(lambda: run(["tail", "-n", "40", str(path)]), runs)
    return cold, warm, grown, tail


def bench_logs(folder: Path, runs: int) -> None:
    print(f"{'log':>8} {'cold ctxd':>10} {'warm ctxd':>10} {'+1000 lines':>12} {'tail -n 40':>11}")
    for label, size in LOG_SIZES.items():
        path = folder / f"{label.replace(' ', '')}.log"
        make_log(path, size)
        cold, warm, grown, tail = bench_log(path, runs)
        print(f"{label:>8} {cold:>8.2f}ms {warm:>8.2f}ms {grown:>10.2f}ms {tail:>9.2f}ms")


def bench_artifacts(folder: Path, runs: int) -> None:
    root = folder / "model"
    make_model_dir(root)
    w = [watch(ArtifactWatch(path=str(root)))]
    artifacts.WATCH_WORTH_S = 0.0  # measure the watcher path even where a walk is cheaper
    settings = Settings()
    cold = median_ms(lambda: artifacts.collect(w, CollectContext(settings=settings)), runs)
    ctx = CollectContext(settings=settings)
    artifacts.collect(w, ctx)
    warm = median_ms(lambda: artifacts.collect(w, ctx), runs)
    watcher = ctx.memory["artifacts"]["trees"][(1, str(root.resolve()))].get("watcher")
    deadline = time.monotonic() + 10
    while watcher is not None and not watcher.ready and time.monotonic() < deadline:
        time.sleep(0.01)
    artifacts.collect(w, ctx)  # the walk the watcher vouches for from now on
    idle = median_ms(lambda: artifacts.collect(w, ctx), runs)
    if watcher is not None:
        watcher.stop()
    shards = sorted(str(p) for p in (root / "shards").iterdir())
    sha_small = median_ms(lambda: run(["sha256sum", *shards]), max(1, runs // 2))
    gb_log = folder / "1GB.log"
    sha_gb = median_ms(lambda: run(["sha256sum", str(gb_log)]), 3)
    print()
    print("artifact dir: 100 GB sparse file + 5,000 small files")
    print(f"  ctxd cold (fingerprint every file, page cache warm): {cold:9.2f} ms")
    print(f"  ctxd warm (unchanged: stat walk, cache hits)       : {warm:9.2f} ms")
    print(f"  ctxd idle (watchfiles says unchanged: no walk)     : {idle:9.2f} ms")
    print(f"  sha256sum of the 5,000 small files                 : {sha_small:9.2f} ms")
    print(f"  sha256sum of the 1 GB sparse log                   : {sha_gb:9.2f} ms")
    print(f"  sha256sum of 100 GB, extrapolated (x100, not run)  : {sha_gb * 100 / 1000:9.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ctxd-bench-"))
    try:
        print(f"medians of {args.runs} runs; Python {sys.version.split()[0]}")
        bench_logs(folder, args.runs)
        bench_artifacts(folder, max(3, args.runs // 2))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
