"""Tests of the artifact collector: files, trees, globs, sparse giants and change texts."""

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.collectors import CollectContext, artifacts
from service.models import ArtifactInfo, ArtifactsSection, ArtifactWatch, Unavailable, Watch
from service.settings import Limits, Settings


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
    path = tmp_path / "model.safetensors"
    size = 10 * chunk
    path.write_bytes(b"\0" * size)
    first = only_item(collect(make_watch(path))).fingerprint
    assert first.startswith("s3:") and len(first) == len("s3:") + 16
    seen = {first}
    for offset in (0, (size - chunk) // 2, size - 1):
        with path.open("r+b") as f:
            f.seek(offset)
            f.write(b"\1")
        seen.add(only_item(collect(make_watch(path))).fingerprint)
    assert len(seen) == 4


def test_sparse_100_gib_file_is_fingerprinted(tmp_path: Path) -> None:
    path = tmp_path / "huge.bin"
    with path.open("wb") as f:
        f.truncate(100 * 2**30)
    item = only_item(collect(make_watch(path)))
    assert item.size == 100 * 2**30
    assert item.fingerprint.startswith("s3:")


def test_fingerprint_cache_is_kept_in_memory_and_stays_correct(tmp_path: Path) -> None:
    path = tmp_path / "app.whl"
    path.write_bytes(b"v1")
    ctx = make_ctx()
    first = only_item(collect(make_watch(path), ctx=ctx)).fingerprint
    assert list(ctx.memory[artifacts.NAME]["fingerprints"].values()) == [first]
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
    assert artifacts.describe_change(first, second) == "size 123 B -> 124 B, contents changed"


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


def test_unreadable_file(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode, so 'permission denied' cannot occur")
    path = tmp_path / "secret.bin"
    path.write_bytes(b"x")
    path.chmod(0)
    try:
        assert only_unavailable(collect(make_watch(path))).reason == "permission denied"
    finally:
        path.chmod(0o600)


# --- describe_change -----------------------------------------------------------------------


def test_describe_change() -> None:
    assert artifacts.describe_change(None, None) is None
    assert artifacts.describe_change(None, info()) == "new"
    assert artifacts.describe_change(info(), None) == "gone"
    assert artifacts.describe_change(info(), info()) is None
    assert artifacts.describe_change(info(fingerprint="s3:a"), info(fingerprint="s3:b")) == (
        "content changed"
    )
    assert (
        artifacts.describe_change(
            info(size=10_000_000, fingerprint="s3:a"), info(size=12_000_000, fingerprint="s3:b")
        )
        == "size 10 MB -> 12 MB, content changed"
    )
    assert artifacts.describe_change(info(mtime=1.0), info(mtime=2.0)) == (
        "modified time changed, content same"
    )
    directory = info().model_copy(update={"type": "directory", "entries": 3})
    assert artifacts.describe_change(info(), directory) == "was a file, now a directory"


def test_describe_change_shows_bytes_when_rounded_sizes_are_equal() -> None:
    text = artifacts.describe_change(
        info(size=10_000_001, fingerprint="a"), info(size=10_000_500, fingerprint="b")
    )
    assert text == "size 10,000,001 B -> 10,000,500 B, content changed"


def test_format_size() -> None:
    assert artifacts.format_size(999) == "999 B"
    assert artifacts.format_size(1500) == "1.5 KB"
    assert artifacts.format_size(12_000_000) == "12 MB"
    assert artifacts.format_size(547 * 10**9) == "547 GB"
    assert artifacts.format_size(3 * 10**15) == "3000 TB"
