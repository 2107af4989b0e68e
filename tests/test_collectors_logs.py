"""Tests of the log collector: tails of real files, fifos, loops, globs and real server logs."""

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.collectors import CollectContext, logs
from service.models import LogInfo, LogsSection, LogWatch, Unavailable, Watch
from service.settings import Limits, Settings

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "logs"


def make_watch(path: Path | str, lines: int = 40, watch_id: int = 1) -> Watch:
    spec = LogWatch(path=str(path), lines=lines)
    return Watch(id=watch_id, session="s", created_at=datetime.now(UTC), spec=spec)


def collect(*watches: Watch, limits: Limits | None = None) -> LogsSection:
    ctx = CollectContext(settings=Settings(limits=limits or Limits()))
    return logs.collect(list(watches), ctx)


def only_item(section: LogsSection) -> LogInfo:
    assert section.unavailable == []
    assert len(section.items) == 1
    return section.items[0]


def only_unavailable(section: LogsSection) -> Unavailable:
    assert section.items == []
    assert len(section.unavailable) == 1
    return section.unavailable[0]


def fixture_bytes(name: str) -> bytes:
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"fixture {name} not found under {FIXTURES}")
    return path.read_bytes().split(b"\n", 1)[1]  # line 1 is the `# source:` header


def write_fixture(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(fixture_bytes(name))
    return path


# --- parse_tail on plain bytes -------------------------------------------------------------


def test_parse_tail_keeps_last_lines_and_final_line_without_newline() -> None:
    assert logs.parse_tail(b"a\nb\nc\nd", 2, 100) == ["c", "d"]
    assert logs.parse_tail(b"a\nb\nc\n", 2, 100) == ["b", "c"]
    assert logs.parse_tail(b"", 5, 100) == []
    assert logs.parse_tail(b"a\n\nb\n", 5, 100) == ["a", "", "b"]


def test_parse_tail_drops_the_partial_first_line() -> None:
    assert logs.parse_tail(b"ial line\nwhole\n", 5, 100, partial=True) == ["whole"]
    assert logs.parse_tail(b"ial line\nwhole\n", 5, 100) == ["ial line", "whole"]


def test_parse_tail_collapses_carriage_return_progress() -> None:
    assert logs.parse_tail(b"a\rb\rc\n", 5, 100) == ["c"]
    assert logs.parse_tail(b"10%\r100%\r\n", 5, 100) == ["100%"]
    assert logs.parse_tail(b"done\r   \r\x1b[K\n", 5, 100) == ["done"]
    assert logs.parse_tail(b"windows line\r\nnext\r\n", 5, 100) == ["windows line", "next"]


def test_parse_tail_removes_escapes_and_control_chars() -> None:
    raw = b"\x1b[1;33mwarn\x1b[0m\x1b]0;title\x07 x\x00y\tz\x07\n"
    assert logs.parse_tail(raw, 5, 100) == ["warn xy\tz"]


def test_parse_tail_cuts_long_lines_with_a_marker() -> None:
    [line] = logs.parse_tail(b"x" * 250 + b"\n", 5, 100)
    assert line == "x" * 100 + " … [cut 150 chars]"


def test_parse_tail_replaces_invalid_utf8() -> None:
    assert logs.parse_tail(b"ok \xff\xfe caf\xc3\xa9\n", 5, 100) == ["ok \ufffd\ufffd café"]


@settings(max_examples=300, deadline=None)
@given(
    raw=st.binary(max_size=2000)
    | st.lists(
        st.sampled_from([b"a", b"\n", b"\r", b"\x1b[", b"m", b"\x1b]", b"\x07", b"\xc3"])
    ).map(b"".join),
    lines=st.integers(min_value=1, max_value=20),
    max_chars=st.integers(min_value=1, max_value=50),
    partial=st.booleans(),
)
def test_parse_tail_properties(raw: bytes, lines: int, max_chars: int, partial: bool) -> None:
    out = logs.parse_tail(raw, lines, max_chars, partial=partial)
    assert len(out) <= lines
    for line in out:
        assert "\r" not in line and "\x1b" not in line and "\n" not in line
        assert len(line) <= max_chars + len(logs.CUT_MARKER.format(len(raw)))


def test_detect_binary() -> None:
    assert logs.detect_binary(b"\x00" * 100 + b"text\n")
    assert logs.detect_binary(bytes(range(256)) * 4)
    assert not logs.detect_binary(b"plain log line\n\x1b[0m\r 50%\r100%\n")
    assert not logs.detect_binary(b"")


# --- real server logs ----------------------------------------------------------------------


def test_sglang_hang_log_ends_with_collapsed_capture_bar(tmp_path: Path) -> None:
    path = write_fixture(tmp_path, "sglang_tp2_hang_after_weights_loaded.log")
    info = only_item(collect(make_watch(path, lines=10)))
    assert len(info.lines) == 10
    assert info.lines[-1].startswith("Capturing batches (bs=1 ")
    assert info.lines[-1].rstrip().endswith("0%|          | 0/1 [00:00<?, ?it/s]")
    assert "Capture cuda graph begin" in info.lines[-2]
    assert not any("\r" in line for line in info.lines)
    assert info.binary is False and info.size == path.stat().st_size


def test_vllm_cuda_graph_progress_collapses_to_final_state(tmp_path: Path) -> None:
    path = write_fixture(tmp_path, "vllm_startup_ok_cuda_graph_progress.log")
    info = only_item(collect(make_watch(path, lines=500)))
    capture = [line for line in info.lines if line.startswith("Capturing CUDA graphs")]
    assert capture == [
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 51/51 "
        "[00:03<00:00, 14.67it/s]",
        "Capturing CUDA graphs (decode, FULL): 100%|██████████| 35/35 [00:01<00:00, 18.00it/s]",
    ]
    assert info.lines[-1].endswith("Application shutdown complete.")


def test_sglang_gb10_log_loses_its_ansi_colours(tmp_path: Path) -> None:
    path = write_fixture(tmp_path, "sglang_gb10_dies_during_cuda_graph_capture.log")
    info = only_item(collect(make_watch(path, lines=500)))
    deprecated = [line for line in info.lines if "'--cuda-graph-max-bs' is deprecated" in line]
    assert deprecated == [
        "'--cuda-graph-max-bs' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-max-bs-decode' instead."
    ]
    assert not any("\x1b" in line for line in info.lines)
    limit = Limits().log_line_chars_max
    assert max(len(line) for line in info.lines) <= limit + len(" … [cut 99999 chars]")
    assert any(line.endswith("chars]") and " … [cut " in line for line in info.lines)


# --- files on disk -------------------------------------------------------------------------


def test_small_file_fields(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    path.write_text("one\ntwo\nthree\n")
    info = only_item(collect(make_watch(path, lines=2, watch_id=7)))
    assert info.watch_id == 7
    assert info.lines == ["two", "three"]
    assert info.path == str(path.resolve())
    assert info.size == 14
    assert info.inode == path.stat().st_ino
    assert info.modified_at.tzinfo is not None
    assert info.modified_at.timestamp() == pytest.approx(path.stat().st_mtime)
    assert info.silent_for_s >= 0


def test_tail_reads_backwards_in_blocks_across_a_block_boundary(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    path.write_text("".join(f"line {i:06d} " + "x" * 80 + "\n" for i in range(5000)))
    info = only_item(collect(make_watch(path, lines=500)))
    assert len(info.lines) == 500
    assert info.lines[0].startswith("line 004500 ")
    assert info.lines[-1].startswith("line 004999 ")


def test_tail_budget_bounds_the_read(tmp_path: Path) -> None:
    path = tmp_path / "long-lines.log"
    path.write_text("".join(f"{i} " + "y" * 3000 + "\n" for i in range(100)))
    info = only_item(collect(make_watch(path, lines=100), limits=Limits(log_tail_bytes_max=8192)))
    # 8 KiB hold two whole 3 KB lines after the partial one is dropped.
    assert [line.split()[0] for line in info.lines] == ["98", "99"]


def test_sparse_10_gib_file_tail_reads_only_the_end(tmp_path: Path) -> None:
    path = tmp_path / "sparse.log"
    with path.open("wb") as f:
        f.truncate(10 * 2**30)
        f.seek(0, os.SEEK_END)
        f.write(b"".join(b"tail line %d\n" % i for i in range(100_000)))
    info = only_item(collect(make_watch(path, lines=3)))
    assert info.binary is False
    assert info.lines == ["tail line 99997", "tail line 99998", "tail line 99999"]
    assert info.size > 10 * 2**30


def test_sparse_file_of_only_zeros_is_binary(tmp_path: Path) -> None:
    path = tmp_path / "zeros.log"
    with path.open("wb") as f:
        f.truncate(10 * 2**30)
    info = only_item(collect(make_watch(path)))
    assert info.binary is True and info.lines == []


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "core.bin"
    path.write_bytes(bytes(range(256)) * 64)
    info = only_item(collect(make_watch(path)))
    assert info.binary is True and info.lines == []


def test_invalid_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.log"
    path.write_bytes("température élevée\n".encode("latin-1") + b"ok\n")
    info = only_item(collect(make_watch(path)))
    assert info.lines == ["temp\ufffdrature \ufffdlev\ufffde", "ok"]
    assert info.binary is False


def test_file_appended_between_two_collects(tmp_path: Path) -> None:
    path = tmp_path / "grow.log"
    path.write_text("first\n")
    watch = make_watch(path, lines=5)
    before = only_item(collect(watch))
    with path.open("a") as f:
        f.write("second\nthird")
    after = only_item(collect(watch))
    assert before.lines == ["first"]
    assert after.lines == ["first", "second", "third"]
    assert after.size > before.size and after.inode == before.inode


def test_glob_newest_first_at_most_five(tmp_path: Path) -> None:
    for i in range(7):
        path = tmp_path / f"run-{i}.log"
        path.write_text(f"run {i}\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    (tmp_path / "dir.log").mkdir()
    section = collect(make_watch(tmp_path / "*.log"))
    assert section.unavailable == []
    assert [item.lines for item in section.items] == [[f"run {i}"] for i in (6, 5, 4, 3, 2)]


def test_glob_without_matches(tmp_path: Path) -> None:
    reason = only_unavailable(collect(make_watch(tmp_path / "*.log"))).reason
    assert reason == "no file matches the glob"


def test_literal_name_with_glob_characters(tmp_path: Path) -> None:
    path = tmp_path / "run[1].log"
    path.write_text("literal\n")
    assert only_item(collect(make_watch(path))).lines == ["literal"]


def test_tilde_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "home.log").write_text("at home\n")
    assert only_item(collect(make_watch("~/home.log"))).lines == ["at home"]


# --- what cannot be read -------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    missing = only_unavailable(collect(make_watch(tmp_path / "nope.log", watch_id=3)))
    assert missing.reason == "no such file" and missing.watch_id == 3
    assert missing.target == str(tmp_path / "nope.log")


def test_directory(tmp_path: Path) -> None:
    assert only_unavailable(collect(make_watch(tmp_path))).reason == "is a directory"


def test_fifo_is_reported_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    assert only_unavailable(collect(make_watch(fifo))).reason == "not a regular file (fifo)"


def test_device(tmp_path: Path) -> None:
    if not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null on this system")
    reason = only_unavailable(collect(make_watch("/dev/null"))).reason
    assert reason == "not a regular file (device)"


def test_symlink_loop(tmp_path: Path) -> None:
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    assert only_unavailable(collect(make_watch(tmp_path / "a"))).reason == "symlink loop"


def test_unreadable_file(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode, so 'permission denied' cannot occur")
    path = tmp_path / "secret.log"
    path.write_text("x\n")
    path.chmod(0)
    try:
        assert only_unavailable(collect(make_watch(path))).reason == "permission denied"
    finally:
        path.chmod(0o600)


def test_one_bad_watch_does_not_hide_the_others(tmp_path: Path) -> None:
    good = tmp_path / "good.log"
    good.write_text("fine\n")
    section = collect(make_watch(tmp_path / "gone.log", watch_id=1), make_watch(good, watch_id=2))
    assert [item.watch_id for item in section.items] == [2]
    assert [u.watch_id for u in section.unavailable] == [1]
