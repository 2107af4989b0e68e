"""Tests of the log collector: tails of real files, fifos, loops, globs and real server logs."""

import os
import re
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ctxd.collectors import CollectContext, logs
from ctxd.collectors import _logtext as logtext
from ctxd.models import LogInfo, LogsSection, LogWatch, Observations, Unavailable, Watch
from ctxd.settings import Limits, Settings
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES as FIXTURE_ROOT
from tests.conftest import as_nobody

FIXTURES = FIXTURE_ROOT / "logs"


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


# --- tail_text on plain bytes --------------------------------------------------------------


def tail(raw: bytes, lines: int, max_line_chars: int, *, partial: bool = False) -> list[str]:
    """The tail the collector shows of a text log (one that is not binary)."""
    out, binary = logtext.tail_text(raw, lines, max_line_chars, partial=partial)
    assert not binary
    return out


def test_tail_keeps_last_lines_and_final_line_without_newline() -> None:
    assert tail(b"a\nb\nc\nd", 2, 100) == ["c", "d"]
    assert tail(b"a\nb\nc\n", 2, 100) == ["b", "c"]
    assert tail(b"", 5, 100) == []
    assert tail(b"a\n\nb\n", 5, 100) == ["a", "", "b"]


def test_tail_drops_the_partial_first_line() -> None:
    assert tail(b"ial line\nwhole\n", 5, 100, partial=True) == ["whole"]
    assert tail(b"ial line\nwhole\n", 5, 100) == ["ial line", "whole"]


def test_tail_collapses_carriage_return_progress() -> None:
    assert tail(b"a\rb\rc\n", 5, 100) == ["c"]
    assert tail(b"10%\r100%\r\n", 5, 100) == ["100%"]
    assert tail(b"done\r   \r\x1b[K\n", 5, 100) == ["done"]
    assert tail(b"windows line\r\nnext\r\n", 5, 100) == ["windows line", "next"]


def test_tail_removes_escapes_and_control_chars() -> None:
    raw = b"\x1b[1;33mwarn\x1b[0m\x1b]0;title\x07 x\x00y\tz\x07\n"
    assert tail(raw, 5, 100) == ["warn xy\tz"]


def test_tail_cuts_long_lines_with_a_marker() -> None:
    [line] = tail(b"x" * 250 + b"\n", 5, 100)
    assert line == "x" * 100 + " … [cut 150 chars]"


def test_tail_replaces_invalid_utf8() -> None:
    assert tail(b"ok \xff\xfe caf\xc3\xa9\n", 5, 100) == ["ok \ufffd\ufffd café"]


_HOLE_LINE = re.compile(re.escape(logtext.HOLE_LINE).replace(re.escape("{}"), ".+"))


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
def test_tail_text_properties(raw: bytes, lines: int, max_chars: int, partial: bool) -> None:
    out, binary = logtext.tail_text(raw, lines, max_chars, partial=partial)
    assert len(out) <= lines and not (binary and out)
    for line in out:
        assert "\r" not in line and "\x1b" not in line and "\n" not in line
        if not _HOLE_LINE.fullmatch(line):  # a run of NUL bytes is told in a line of its own
            assert len(line) <= max_chars + len(logtext.CUT_MARKER.format(len(raw)))


def test_detect_binary() -> None:
    assert logtext.detect_binary(b"\x00" * 100 + b"text\n")
    assert logtext.detect_binary(bytes(range(256)) * 4)
    assert not logtext.detect_binary(b"plain log line\n\x1b[0m\r 50%\r100%\n")
    assert not logtext.detect_binary(b"")


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


def test_unreadable_file(open_dir: Path) -> None:
    path = open_dir / "secret.log"  # root reads anything: the read runs as nobody
    path.write_text("x\n")
    path.chmod(0)
    assert as_nobody(lambda: only_unavailable(collect(make_watch(path))).reason) == (
        "permission denied"
    )


def test_one_bad_watch_does_not_hide_the_others(tmp_path: Path) -> None:
    good = tmp_path / "good.log"
    good.write_text("fine\n")
    section = collect(make_watch(tmp_path / "gone.log", watch_id=1), make_watch(good, watch_id=2))
    assert [item.watch_id for item in section.items] == [2]
    assert [u.watch_id for u in section.unavailable] == [1]


# --- progress bars, errors since the previous snapshot, rotation -----------------------------


def make_ctx() -> CollectContext:
    return CollectContext(settings=Settings())


def run_child(spawn, code: str, *args: str) -> None:
    proc = spawn(sys.executable, "-c", code, *args)
    assert proc.wait(timeout=60) == 0


TQDM = """
import sys
with open(sys.argv[1], "w") as f:
    f.write("loading weights\\n")
    for i in range(1, 10_001):
        f.write(f"\\rLoading: {i * 100 // 10_000:3d}%|{'#' * (i // 1000):<10}| {i}/10000")
        f.flush()
"""


def test_tqdm_child_with_10000_updates_collapses_to_one_line(tmp_path: Path, spawn) -> None:
    path = tmp_path / "tqdm.log"
    run_child(spawn, TQDM, str(path))
    info = only_item(collect(make_watch(path, lines=40)))
    assert info.lines == ["loading weights", "Loading: 100%|##########| 10000/10000"]
    assert info.errors == []


TRACEBACK_THEN_NOISE = """
import sys
with open(sys.argv[1], "a") as f:
    f.write("[2025-04-21 07:28:41 TP0] Scheduler hit an exception: ")
    f.write("Traceback (most recent call last):\\n")
    f.write('  File "/srv/scheduler.py", line 1714, in run_scheduler_process\\n')
    f.write("    scheduler = Scheduler(server_args)\\n")
    f.write('  File "/srv/cuda.py", line 12, in init\\n')
    f.write("    torch.cuda.set_device(rank)\\n")
    f.write("RuntimeError: CUDA error: out of memory\\n")
    f.write("\\n")
    for i in range(5000):
        f.write(f"[2025-04-21 07:28:42] INFO heartbeat {i}\\n")
"""


def test_traceback_before_5000_noise_lines_is_the_error_since_last_snapshot(
    tmp_path: Path, spawn
) -> None:
    path = tmp_path / "server.log"
    path.write_text("[2025-04-21 07:28:40] INFO starting\n")
    ctx, watch = make_ctx(), make_watch(path)
    first = only_item(logs.collect([watch], ctx))
    assert first.errors == [] and first.error_new is False
    run_child(spawn, TRACEBACK_THEN_NOISE, str(path))
    second = only_item(logs.collect([watch], ctx))
    assert second.error_new is True
    assert second.errors[0].endswith("Traceback (most recent call last):")
    assert second.errors[-1] == "RuntimeError: CUDA error: out of memory"
    assert len(second.errors) == 6
    assert second.error_summary == "RuntimeError: CUDA error: out of memory"
    assert not any("Traceback" in line for line in second.lines)
    assert second.lines[-1] == "[2025-04-21 07:28:42] INFO heartbeat 4999"
    assert second.growth_bytes == path.stat().st_size - first.size
    third = only_item(logs.collect([watch], ctx))  # nothing new: carried, not new
    assert third.errors == second.errors and third.error_new is False


def test_rotation_reads_the_rest_of_the_old_file_and_says_where_it_went(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    path.write_text("one\n")
    ctx, watch = make_ctx(), make_watch(path)
    only_item(logs.collect([watch], ctx))
    with path.open("a") as f:
        f.write("ERROR written just before rotation\n")
    path.rename(tmp_path / "app.log.1")
    path.write_text("fresh start\n")
    info = only_item(logs.collect([watch], ctx))
    assert info.rotated is True and info.truncated is False
    assert info.rotated_from == str(tmp_path / "app.log.1")
    assert info.errors == ["ERROR written just before rotation"] and info.error_new
    assert info.lines == ["fresh start"] and info.growth_bytes is None


def test_truncation_is_detected_even_when_the_file_grew_back(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    path.write_text("a\n" * 10)
    ctx, watch = make_ctx(), make_watch(path)
    only_item(logs.collect([watch], ctx))
    path.write_text("restarted\n" * 10)  # truncate and rewrite: bigger than before
    info = only_item(logs.collect([watch], ctx))
    assert info.truncated is True and info.rotated is False and info.growth_bytes is None
    path.write_text("x\n")
    again = only_item(logs.collect([watch], ctx))
    assert again.truncated is True and again.lines == ["x"]


def test_an_unchanged_log_is_not_read_again(tmp_path: Path) -> None:
    path = tmp_path / "quiet.log"
    path.write_text("still here\n")
    ctx, watch = make_ctx(), make_watch(path)
    first = only_item(logs.collect([watch], ctx))
    second, opened = collected_opening(watch, ctx)
    assert second.lines == first.lines == ["still here"]
    # open_regular opens the file once to fstat it; nothing is read from it (no pread).
    assert opened == [str(path)]


def test_a_log_watched_through_a_link_finds_its_cursor_by_its_real_path(tmp_path: Path) -> None:
    # the cursor of a log is kept by the file's real path, resolved once per look: the next
    # look through the same link finds it and reads nothing
    path = tmp_path / "quiet.log"
    path.write_text("still here\n")
    (tmp_path / "link.log").symlink_to(path)
    ctx, watch = make_ctx(), make_watch(tmp_path / "link.log")
    first = only_item(logs.collect([watch], ctx))
    assert first.path == str(path)
    second, opened = collected_opening(watch, ctx)
    assert second.lines == first.lines == ["still here"]
    assert opened == [str(path)]  # opened to fstat it
    assert first.growth_bytes is None and second.growth_bytes == 0  # against its cursor


AUDIT_OPENS: list[list[str]] = []


def collected_opening(watch: Watch, ctx: CollectContext) -> tuple[LogInfo, list[str]]:
    """A log collected once more, and the paths that look opened (Python's audit hook)."""
    opened: list[str] = []
    AUDIT_OPENS.append(opened)
    try:
        return only_item(logs.collect([watch], ctx)), opened
    finally:
        AUDIT_OPENS.remove(opened)


def _audit(event: str, args: tuple) -> None:
    if event == "open" and AUDIT_OPENS and isinstance(args[0], str):
        for sink in AUDIT_OPENS:
            sink.append(args[0])


sys.addaudithook(_audit)


def test_pem_block_cut_by_the_tail_window_is_redacted(tmp_path: Path) -> None:
    body = ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + str(i) * 20 for i in range(6)]
    path = tmp_path / "keys.log"
    path.write_text(
        "\n".join(["-----BEGIN PRIVATE KEY-----", *body, "-----END PRIVATE KEY-----", "ok"]) + "\n"
    )
    info = only_item(collect(make_watch(path, lines=4)))  # starts inside the key
    assert not any("MIIE" in line for line in info.lines)
    assert info.lines[-1] == "ok"


def test_per_watch_error_patterns(tmp_path: Path) -> None:
    path = tmp_path / "custom.log"
    path.write_text("all good\nwatchdog: engine stalled for 300 s\nmore\n")
    spec = LogWatch(path=str(path), errors=[r"engine stalled"])
    watch = Watch(id=1, session="s", created_at=datetime.now(UTC), spec=spec)
    info = only_item(collect(watch))
    assert info.errors == ["watchdog: engine stalled for 300 s"]
    plain = only_item(collect(make_watch(path)))
    assert plain.errors == []


def test_socket_path_is_unavailable(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "s.sock"))
        reason = only_unavailable(collect(make_watch(tmp_path / "s.sock"))).reason
    assert reason == "not a regular file (socket)"


# --- the real inference-server logs: what a reader wants to see ----------------------------


def test_vllm_no_kernel_image_error_block(tmp_path: Path) -> None:
    path = write_fixture(tmp_path, "vllm_no_kernel_image_issue14452_excerpt.log")
    info = only_item(collect(make_watch(path)))
    assert info.error_new and info.error_summary is not None
    assert "RuntimeError: CUDA error: no kernel image is available" in info.error_summary
    assert "CUDA_LAUNCH_BLOCKING=1" in "\n".join(info.errors)
    assert info.error_lines >= 2  # the ERROR lines and the later EngineCore traceback
    assert info.lines[-1].startswith('  File "/usr/local/lib/python3.12/dist-packages/vllm')


def test_sglang_nccl_warn_is_the_error_and_the_traceback_is_counted(tmp_path: Path) -> None:
    path = write_fixture(tmp_path, "sglang_nccl_warn_issue5594_excerpt.log")
    info = only_item(collect(make_watch(path)))
    assert info.error_summary is not None
    assert "NCCL WARN socketStartConnect: Connect to 10.0.0.82<38455> failed" in info.error_summary
    assert info.error_lines == 2
    assert any("Scheduler hit an exception: Traceback" in line for line in info.lines)


@pytest.mark.parametrize(
    ("name", "last"),
    [
        ("sglang_tp2_hang_after_weights_loaded.log", "Capturing batches (bs=1 "),
        ("vllm_startup_ok_cuda_graph_progress.log", "(APIServer pid="),
        ("sglang_gb10_dies_during_cuda_graph_capture.log", ""),
    ],
)
def test_logs_without_errors_show_none(tmp_path: Path, name: str, last: str) -> None:
    path = write_fixture(tmp_path, name)
    info = only_item(collect(make_watch(path)))
    assert info.errors == [] and info.error_summary is None and info.error_lines == 0
    assert info.lines[-1].startswith(last)
    if name.startswith("sglang_gb10"):
        assert "leaked semaphore" in info.lines[-2]


def test_markdown_fence_is_longer_than_any_backtick_run(tmp_path: Path) -> None:
    path = tmp_path / "ticks.log"
    path.write_text("```` four\nplain\n")
    info = only_item(collect(make_watch(path)))
    from ctxd.models import Observations, Snapshot, SnapshotHeader
    from ctxd.render.markdown import render_dump

    snap = Snapshot(
        header=SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="t"),
        observations=Observations(logs=LogsSection(items=[info])),
    )
    markdown = render_dump(snap)
    assert "`````text\n```` four\nplain\n`````" in markdown


def test_a_probes_first_look_starts_at_the_end_and_later_errors_are_still_news(
    tmp_path: Path,
) -> None:
    """An event probe's baseline reads none of what the log already holds (a snapshot did; a
    1 GB log cost 8 MB of RSS each time); what is written after it is scanned as ever, and a
    log the probe meets later is read from its newest bytes."""
    from ctxd.snapshotter import happened

    old = tmp_path / "server.log"
    old.write_text("boot\n" + "RuntimeError: an old failure\n" + "x" * 5000 + "\n")
    probe = CollectContext(settings=Settings(), probe=True)
    first = only_item(logs.collect([make_watch(old)], probe))
    assert first.scanned_bytes == 0 and first.errors == []
    with open(old, "a") as handle:
        handle.write("Traceback (most recent call last):\nRuntimeError: NCCL error\n")
    second = only_item(logs.collect([make_watch(old)], probe))
    assert second.errors and second.scanned_bytes > 0
    news = happened.events(logs_only(first), logs_only(second))
    assert [word for word, _ in news] == ["log-error"]
    later = tmp_path / "rank1.log"
    later.write_text("RuntimeError: rank 1 died before the probe met this file\n")
    both = logs.collect([make_watch(old), make_watch(later, watch_id=2)], probe)
    assert [item.errors != [] for item in both.items] == [True, True]


def logs_only(item: LogInfo) -> Observations:
    return Observations(logs=LogsSection(items=[item]))


def test_a_log_shown_without_its_tail_says_no_empty_last_lines(tmp_path: Path) -> None:
    """A log whose tail was left out (the budget cut, or nothing after its error) shows no
    'Last 0 lines:' over an empty block: a reader took that for a log that says nothing."""
    from ctxd.models import Observations, Snapshot, SnapshotHeader
    from ctxd.render.markdown import render_dump

    path = tmp_path / "run7.log"
    path.write_text("RuntimeError: NCCL error in run 7 (code 57)\n")
    info = only_item(collect(make_watch(path))).model_copy(update={"lines": []})
    snap = Snapshot(
        header=SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="t"),
        observations=Observations(logs=LogsSection(items=[info])),
    )
    markdown = render_dump(snap)
    assert "NCCL error in run 7" in markdown and "Last 0 lines" not in markdown


def test_a_logs_path_resolved_through_its_directory_once_is_its_real_path(tmp_path: Path):
    # the logs of one run share their directories' resolution: every path still comes out
    # as os.path.realpath gives it, through a linked directory, a linked file, a file that
    # is not there yet, `..`, and a link whose directory changes between two runs
    real_dir = tmp_path / "real"
    (real_dir / "sub").mkdir(parents=True)
    (real_dir / "a.log").write_text("a\n")
    (real_dir / "sub" / "b.log").write_text("b\n")
    (tmp_path / "linked").symlink_to(real_dir)
    (real_dir / "c.log").symlink_to(real_dir / "sub" / "b.log")
    (real_dir / "d.log").symlink_to("sub/b.log")  # relative to its own directory
    (real_dir / "up.log").symlink_to("../real/a.log")
    (tmp_path / "deep").symlink_to(real_dir / "sub")
    names = ["linked/a.log", "linked/c.log", "linked/d.log", "linked/up.log", "real/a.log",
             "linked/missing.log", "linked/sub/../a.log", "real/sub/b.log", "linked/sub",
             "deep/../a.log", "deep/b.log", "deep/.."]  # fmt: skip
    dirs: dict[str, str] = {}
    for name in names * 2:  # the second time from the directories resolved the first
        path = str(tmp_path / name)
        assert logs.real_path(path, dirs) == os.path.realpath(path), name
    heads = {os.path.dirname(str(tmp_path / name)) for name in names if not name.endswith("..")}
    assert len(dirs) == len(heads)  # each directory resolved once, the second time none
    (tmp_path / "linked").unlink()
    (tmp_path / "linked").symlink_to(real_dir / "sub")  # a new run resolves afresh
    assert logs.real_path(str(tmp_path / "linked/b.log"), {}) == str(real_dir / "sub" / "b.log")
