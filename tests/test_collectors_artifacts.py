"""Tests of the artifact collector: files, trees, globs, sparse giants and change texts."""

import hashlib
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ctxd.collectors import CollectContext, artifacts
from ctxd.collectors._artifact_text import describe_change, parse_dist
from ctxd.fmt import human_bytes
from ctxd.models import ArtifactInfo, ArtifactsSection, ArtifactWatch, Unavailable, Watch
from ctxd.settings import Limits, Settings

from tests.conftest import as_nobody, wait_until


def make_watch(path: Path | str, watch_id: int = 1) -> Watch:
    spec = ArtifactWatch(path=str(path))
    return Watch(id=watch_id, session="s", created_at=datetime.now(UTC), spec=spec)


def make_ctx(limits: Limits | None = None) -> CollectContext:
    return CollectContext(settings=Settings(limits=limits or Limits()))


def collect(*watches: Watch, ctx: CollectContext | None = None) -> ArtifactsSection:
    return artifacts.collect(list(watches), ctx or make_ctx())


def only_item(section: ArtifactsSection) -> ArtifactInfo:
    assert section.unavailable == []
    assert len(section.items) == 1
    return section.items[0]


def only_unavailable(section: ArtifactsSection) -> Unavailable:
    assert section.items == []
    assert len(section.unavailable) == 1
    return section.unavailable[0]


def info(size: int = 10, fingerprint: str = "sha256:aa", mtime: float = 0.0) -> ArtifactInfo:
    return ArtifactInfo(
        watch_id=1,
        path="/x",
        type="file",
        size=size,
        modified_at=datetime.fromtimestamp(mtime, UTC),
        fingerprint=fingerprint,
    )


# --- files ---------------------------------------------------------------------------------


def test_small_file_is_hashed_whole(tmp_path: Path) -> None:
    path = tmp_path / "kernel.so"
    path.write_bytes(b"abc" * 1000)
    item = only_item(collect(make_watch(path, watch_id=4)))
    expected = hashlib.sha256(b"abc" * 1000).hexdigest()[:16]
    assert item.fingerprint == f"sha256:{expected}"
    assert (item.watch_id, item.type, item.size) == (4, "file", 3000)
    assert item.path == str(path.resolve())
    assert item.modified_at.timestamp() == pytest.approx(path.stat().st_mtime)
    assert item.entries is None and item.truncated is False


def test_large_file_is_sampled_and_sees_changes_in_each_sample(tmp_path: Path) -> None:
    chunk = Limits().fingerprint_chunk_bytes
    ctx = make_ctx(Limits(fingerprint_full_bytes_max=3 * chunk))
    path = tmp_path / "model.safetensors"
    size = 10 * chunk
    path.write_bytes(b"\0" * size)
    item = only_item(collect(make_watch(path), ctx=ctx))
    first = item.fingerprint
    assert first.startswith("sampled:") and len(first) == len("sampled:") + 16
    assert item.fingerprint_kind == "sampled"
    seen = {first}
    for offset in (0, (size - chunk) // 2, size - 1):
        with path.open("r+b") as f:
            f.seek(offset)
            f.write(b"\1")
        seen.add(only_item(collect(make_watch(path), ctx=ctx)).fingerprint)
    assert len(seen) == 4


def test_sparse_100_gib_file_is_fingerprinted(tmp_path: Path) -> None:
    path = tmp_path / "huge.bin"
    with path.open("wb") as f:
        f.truncate(100 * 2**30)
    item = only_item(collect(make_watch(path)))
    assert item.size == 100 * 2**30
    assert item.fingerprint.startswith("sampled:")


def test_fingerprint_cache_is_kept_in_memory_and_stays_correct(tmp_path: Path) -> None:
    path = tmp_path / "app.whl"
    path.write_bytes(b"v1")
    ctx = make_ctx()
    first = only_item(collect(make_watch(path), ctx=ctx)).fingerprint
    assert list(ctx.memory[artifacts.NAME].fingerprints.values()) == [first]
    assert only_item(collect(make_watch(path), ctx=ctx)).fingerprint == first
    stat = path.stat()
    path.write_bytes(b"v2")  # same size; even with the old mtime put back, ctime moves on
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert only_item(collect(make_watch(path), ctx=ctx)).fingerprint != first


# --- directories ---------------------------------------------------------------------------


def build_tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.bin").write_bytes(b"1" * 100)
    (root / "sub" / "b.bin").write_bytes(b"2" * 20)
    (root / "sub" / "deeper" / "c.bin").write_bytes(b"3" * 3)


def test_directory_walk(tmp_path: Path) -> None:
    root = tmp_path / "build"
    build_tree(root)
    item = only_item(collect(make_watch(root)))
    assert item.type == "directory"
    assert item.size == 123
    assert item.entries == 5  # 3 files + 2 directories
    assert item.files == 3
    assert [f.path for f in item.largest] == ["a.bin", "sub/b.bin", "sub/deeper/c.bin"]
    assert item.truncated is False
    assert item.fingerprint.startswith("tree:")
    newest = max(p.stat().st_mtime for p in [root, *root.rglob("*")])
    assert item.modified_at.timestamp() == pytest.approx(newest)


def test_directory_fingerprint_follows_names_sizes_and_mtimes(tmp_path: Path) -> None:
    root = tmp_path / "build"
    build_tree(root)
    first = only_item(collect(make_watch(root)))
    assert only_item(collect(make_watch(root))).fingerprint == first.fingerprint
    (root / "sub" / "b.bin").write_bytes(b"2" * 21)
    second = only_item(collect(make_watch(root)))
    assert second.fingerprint != first.fingerprint
    assert describe_change(first, second) == "size 123 B -> 124 B, contents changed"


def test_a_probe_tells_a_changed_tree_from_stat_alone_and_reads_no_file(tmp_path: Path) -> None:
    """An event probe keeps nothing per file and opens none: a rewrite of the same size
    still changes the tree's stat, so the probe sees it; a snapshot then reads the files."""
    root = tmp_path / "build"
    build_tree(root)
    probe = CollectContext(settings=Settings(watch_roots=[tmp_path]), probe=True)
    opened: list[str] = []
    listening = [False]

    def audit(event: str, args: tuple) -> None:
        if listening[0] and event == "open" and str(args[0]).endswith(".bin"):
            opened.append(str(args[0]))

    def observed(ctx: CollectContext) -> ArtifactInfo:
        listening[0] = True
        try:
            return only_item(collect(make_watch(root), ctx=ctx))
        finally:
            listening[0] = False

    sys.addaudithook(audit)
    first = observed(probe)
    assert first.fingerprint.startswith("tree:") and first.size == 123 and first.files == 3
    assert observed(probe).fingerprint == first.fingerprint
    time.sleep(0.01)
    (root / "sub" / "b.bin").write_bytes(b"9" * 20)  # same size, other bytes
    assert observed(probe).fingerprint != first.fingerprint
    assert opened == []
    kept = probe.memory["artifacts"].trees
    assert all(memo.files is None and not memo.keys for memo in kept.values())
    observed(make_ctx())  # a snapshot fingerprints the files
    assert len(opened) == 3


def test_directory_walk_is_bounded(tmp_path: Path) -> None:
    root = tmp_path / "many"
    root.mkdir()
    for i in range(30):
        (root / f"f{i:02d}").write_bytes(b"x")
    ctx = make_ctx(Limits(artifact_entries_max=10))
    item = only_item(collect(make_watch(root), ctx=ctx))
    assert item.entries == 10 and item.truncated is True and item.size == 10
    exact = only_item(collect(make_watch(root), ctx=make_ctx(Limits(artifact_entries_max=30))))
    assert exact.entries == 30 and exact.truncated is False


def test_symlinked_directories_are_not_entered(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "real.bin").write_bytes(b"x" * 5)
    os.symlink(root, root / "self")  # a cycle, if followed
    outside = tmp_path / "blob"
    outside.write_bytes(b"y" * 7)
    os.symlink(outside, root / "link.bin")  # links to files count with their target's size
    item = only_item(collect(make_watch(root)))
    assert item.entries == 3 and item.size == 12


# --- globs ---------------------------------------------------------------------------------


def test_glob_matches_each_become_an_item(tmp_path: Path) -> None:
    for i in range(3):
        path = tmp_path / f"pkg-{i}.whl"
        path.write_bytes(b"w" * (i + 1))
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    (tmp_path / "other.txt").write_text("no")
    section = collect(make_watch(tmp_path / "*.whl"))
    assert section.unavailable == []
    assert [Path(item.path).name for item in section.items] == [
        "pkg-2.whl",
        "pkg-1.whl",
        "pkg-0.whl",
    ]


def test_glob_is_capped(tmp_path: Path) -> None:
    for i in range(artifacts.MATCHES_MAX + 5):
        (tmp_path / f"f{i}.o").write_bytes(b"")
    section = collect(make_watch(tmp_path / "*.o"))
    assert len(section.items) == artifacts.MATCHES_MAX
    [note] = section.unavailable
    assert note.reason.startswith(f"more than {artifacts.MATCHES_MAX} matches")


def test_glob_without_matches(tmp_path: Path) -> None:
    reason = only_unavailable(collect(make_watch(tmp_path / "*.whl"))).reason
    assert reason == "no file matches the glob"


def test_glob_reports_a_fifo_among_matches(tmp_path: Path) -> None:
    (tmp_path / "ok.out").write_bytes(b"1")
    os.mkfifo(tmp_path / "pipe.out")
    section = collect(make_watch(tmp_path / "*.out"))
    assert [Path(item.path).name for item in section.items] == ["ok.out"]
    assert [u.reason for u in section.unavailable] == ["not a regular file (fifo)"]


# --- what cannot be read -------------------------------------------------------------------


def test_missing(tmp_path: Path) -> None:
    missing = only_unavailable(collect(make_watch(tmp_path / "gone.whl", watch_id=9)))
    assert (missing.reason, missing.watch_id) == ("no such file", 9)


def test_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    assert only_unavailable(collect(make_watch(tmp_path / "pipe"))).reason == (
        "not a regular file (fifo)"
    )


def test_symlink_loop(tmp_path: Path) -> None:
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    assert only_unavailable(collect(make_watch(tmp_path / "a"))).reason == "symlink loop"


def test_unreadable_file(open_dir: Path) -> None:
    # Run as nobody in a forked child when this is root, who reads files whatever their mode.
    path = open_dir / "secret.bin"
    path.write_bytes(b"x")
    path.chmod(0)
    try:
        reason = as_nobody(lambda: only_unavailable(collect(make_watch(path))).reason)
        assert reason == "permission denied"
    finally:
        path.chmod(0o600)


# --- describe_change -----------------------------------------------------------------------


def test_describe_change() -> None:
    assert describe_change(None, None) is None
    assert describe_change(None, info()) == "new"
    assert describe_change(info(), None) == "gone"
    assert describe_change(info(), info()) is None
    assert describe_change(info(fingerprint="s3:a"), info(fingerprint="s3:b")) == (
        "content changed"
    )
    assert (
        describe_change(
            info(size=10 * 1024**2, fingerprint="s3:a"), info(size=12 * 1024**2, fingerprint="s3:b")
        )
        == "size 10.0 MiB -> 12.0 MiB, content changed"
    )
    assert describe_change(info(mtime=1.0), info(mtime=2.0)) == ("rebuilt, same content")
    directory = info().model_copy(update={"type": "directory", "entries": 3})
    assert describe_change(info(), directory) == "was a file, now a directory"


def test_describe_change_shows_bytes_when_rounded_sizes_are_equal() -> None:
    text = describe_change(
        info(size=10_000_001, fingerprint="a"), info(size=10_000_500, fingerprint="b")
    )
    assert text == "size 10,000,001 B -> 10,000,500 B, content changed"


def test_artifact_sizes_read_like_every_other_size_in_the_dump() -> None:
    """One unit system in the Changes list: 1 MiB = 1024 KiB, as for logs and memory."""
    text = describe_change(info(size=5 * 1024**2), info(size=6 * 1024**2))
    assert text == f"size {human_bytes(5 * 1024**2)} -> {human_bytes(6 * 1024**2)}"
    assert text == "size 5.0 MiB -> 6.0 MiB"


# --- a model-sized directory: cold, warm, and what changed -----------------------------------

AUDIT: list[list[tuple[str, str]]] = []


def _audit(event: str, args: tuple) -> None:
    no_content = os.O_PATH | os.O_DIRECTORY  # a pin or a listing opens no file's content
    if event == "open" and len(args) > 2 and isinstance(args[2], int) and args[2] & no_content:
        return
    if AUDIT and event in ("open", "os.scandir") and args and isinstance(args[0], str | Path):
        for sink in AUDIT:
            sink.append((event, str(args[0])))


sys.addaudithook(_audit)


def audited(root: Path, ctx: CollectContext, watch: Watch) -> tuple[ArtifactInfo, list]:
    """Collect once and return the item with every open/scandir under `root` it caused."""
    events: list[tuple[str, str]] = []
    AUDIT.append(events)
    try:
        item = only_item(collect(watch, ctx=ctx))
    finally:
        AUDIT.remove(events)
    return item, [(e, p) for e, p in events if p.startswith(str(root))]


def test_100_gb_sparse_plus_5000_files_cold_then_warm_reads_no_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(artifacts, "WATCH_WORTH_S", 0.0)  # watch this tree however fast its walk
    root = tmp_path / "model"
    (root / "shards").mkdir(parents=True)
    with (root / "model.safetensors").open("wb") as f:
        f.truncate(100 * 10**9)
    for i in range(5000):
        (root / "shards" / f"f{i:04d}.json").write_text(f'{{"i": {i}}}')
    ctx, watch = make_ctx(), make_watch(root)
    cold, cold_events = audited(root, ctx, watch)
    assert cold.files == 5001 and cold.truncated is False and cold.fingerprint_kind == "tree"
    assert cold.largest[0].path == "model.safetensors" and cold.size > 100 * 10**9
    assert sum(1 for e, _ in cold_events if e == "open") == 5001
    assert ctx.memory["artifacts"].last_opened_files == 5001

    warm, warm_events = audited(root, ctx, watch)
    assert warm.fingerprint == cold.fingerprint and warm.changes == []
    assert [e for e in warm_events if e[0] == "open"] == []  # stat only: no file opened
    assert ctx.memory["artifacts"].last_read_bytes == 0

    # Once the watchfiles watcher is up, an unchanged tree is not even walked.
    watcher = ctx.memory["artifacts"].trees[(1, str(root.resolve()))].watcher
    wait_until(lambda: watcher.ready, "the watcher is ready", limit=20, every=0.02)
    audited(root, ctx, watch)  # this walk is the one the watcher vouches for
    idle, idle_events = audited(root, ctx, watch)
    assert idle_events == [] and idle.fingerprint == cold.fingerprint

    (root / "shards" / "f0001.json").write_text('{"i": 1001}')  # modified
    stat = (root / "shards" / "f0002.json").stat()
    (root / "shards" / "f0002.json").write_text('{"i": 2}')  # rebuilt, same bytes
    os.utime(root / "shards" / "f0002.json", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    (root / "shards" / "f0003.json").unlink()
    (root / "shards" / "new.json").write_text("{}")
    # The watcher asks its notifier thread for events with a 1 ms wait; on a loaded machine
    # that thread may not have run yet, and this collection trusts "nothing changed" (the
    # next one sees it all). Reported for the coordinator; here, collect until it is seen.
    deadline = time.monotonic() + 20
    while not (found := audited(root, ctx, watch))[0].changes:
        assert time.monotonic() < deadline, "the changes were never seen"
    changed, events = found
    assert changed.changes == [
        "modified shards/f0001.json",
        "rebuilt, same content: shards/f0002.json",
        "removed shards/f0003.json",
        "added shards/new.json",
    ]
    assert sorted(p for e, p in events if e == "open") == [
        str(root / "shards" / name) for name in ("f0001.json", "f0002.json", "new.json")
    ]
    assert changed.fingerprint != cold.fingerprint
    assert describe_change(cold, changed) is not None
    watcher.stop()


def test_single_file_rebuilt_with_same_content(tmp_path: Path) -> None:
    path = tmp_path / "kernel.so"
    path.write_bytes(b"\x7fELF same")
    ctx = make_ctx()
    first = only_item(collect(make_watch(path), ctx=ctx))
    path.write_bytes(b"\x7fELF same")
    os.utime(path, ns=(0, first.modified_at.timestamp().__int__() * 10**9 + 5 * 10**9))
    second = only_item(collect(make_watch(path), ctx=ctx))
    assert second.fingerprint == first.fingerprint
    assert describe_change(first, second) == "rebuilt, same content"


def test_fingerprint_budget_defers_hashing_to_the_next_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "wheels"
    root.mkdir()
    for i in range(4):
        (root / f"{i}.bin").write_bytes(bytes([i]) * 10_000)
    ctx = make_ctx(Limits(fingerprint_budget_bytes=15_000))
    first = only_item(collect(make_watch(root), ctx=ctx))
    assert first.fingerprint_kind == "pending" and first.fingerprint.startswith("pending:")
    for _ in range(3):
        latest = only_item(collect(make_watch(root), ctx=ctx))
    assert latest.fingerprint_kind == "tree"
    fresh = only_item(collect(make_watch(root), ctx=make_ctx()))
    assert latest.fingerprint == fresh.fingerprint


def test_wheel_and_sdist_names_are_parsed(tmp_path: Path) -> None:
    wheel = tmp_path / "sgl_kernel-0.3.9.post2+cu128-cp310-abi3-manylinux2014_x86_64.whl"
    wheel.write_bytes(b"PK")
    dist = only_item(collect(make_watch(wheel))).dist
    assert dist is not None
    assert (dist.kind, dist.name, dist.version) == ("wheel", "sgl_kernel", "0.3.9.post2+cu128")
    assert dist.tags == ["cp310-abi3-manylinux2014_x86_64"]
    multi = parse_dist("pkg-1.0-1-py2.py3-none-any.whl")
    assert multi is not None and multi.build == "1"
    assert multi.tags == ["py2-none-any", "py3-none-any"]
    sdist = parse_dist("flash_attn-2.8.3.tar.gz")
    assert sdist is not None and (sdist.kind, sdist.name, sdist.version) == (
        "sdist",
        "flash_attn",
        "2.8.3",
    )
    assert parse_dist("libfoo.so.1") is None
    so = tmp_path / "libcuda_kernels.so"
    so.write_bytes(b"\x7fELF")
    item = only_item(collect(make_watch(so)))
    assert item.dist is None and item.size == 4
