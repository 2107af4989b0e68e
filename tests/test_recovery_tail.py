"""The tail a resuming agent reads: progress frames folded, NUL holes shown, not "binary".

Real logs from public issue threads (tests/fixtures, each with its `# source:` line) read by
the real logs collector from files in tmp_path.
"""

import os
from datetime import UTC, datetime
from pathlib import Path

from ctxd.collectors import CollectContext, logs
from ctxd.collectors._progress import FOLDED
from ctxd.models import LogInfo, LogWatch, Watch
from ctxd.settings import Settings

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes().split(b"\n", 1)[1]  # line 1 is the `# source:` header


def tail_of(path: Path, lines: int = 40) -> LogInfo:
    watch = Watch(id=1, session="s", created_at=datetime.now(UTC),
                  spec=LogWatch(path=str(path), lines=lines))  # fmt: skip
    section = logs.collect([watch], CollectContext(settings=Settings()))
    assert section.unavailable == []
    return section.items[0]


def folded(n: int) -> str:
    return FOLDED.format(n)


def test_vllm_shard_frames_between_worker_prefixes_fold_into_the_last(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log"
    path.write_bytes(fixture_bytes("vllm_shards_worker_prefix_pr38476_excerpt.log"))
    assert tail_of(path).lines == [
        "Loading safetensors checkpoint shards:  38% Completed | 32/85 [03:09<05:15,  5.96s/it]"
        + folded(10),
        "(Worker_PP0_TP0_EP0 pid=1947) ",
        "Loading safetensors checkpoint sha",
    ]


def test_folding_comes_before_the_cut_so_the_tail_keeps_what_came_before(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log"
    path.write_bytes(fixture_bytes("vllm_shards_after_info_pr594_excerpt.log"))
    info = tail_of(path, lines=5)
    assert len(info.lines) == 2
    assert info.lines[0].startswith("(Worker_TP0 pid=101) INFO 07-06 10:44:40")
    assert info.lines[1] == (
        "Loading safetensors checkpoint shards:  18% Completed | 12/66 [00:02<00:12,  4.1"
        + folded(12)
    )


def test_parallel_hugging_face_downloads_keep_one_line_per_file(tmp_path: Path) -> None:
    path = tmp_path / "download.log"
    path.write_bytes(fixture_bytes("hf_downloads_interleaved_diffusers254_excerpt.log"))
    # four bars (two share a cut name, told apart by their totals), in order of last frame
    assert tail_of(path).lines == [
        "Downloading pytorch_model.bin:  85% 210M/246M [00:02<00:00, 45.6MB/s]" + folded(2),
        "Downloading (…)on_pytorch_model.bin:  11% 189M/1.72G [00:02<00:28, 54.1MB/s]" + folded(4),
        "Downloading pytorch_model.bin:  41% 252M/608M [00:03<00:06, 53.3MB/s]" + folded(4),
        "Downloading (…)on_pytorch_model.bin:  75% 126M/167M [00:02<00:00, 45.6MB/s]" + folded(3),
        "Down",
    ]


def test_pip_download_bar_folds(tmp_path: Path) -> None:
    path = tmp_path / "pip.log"
    path.write_bytes(fixture_bytes("pip_download_bar_briefcase760_excerpt.log"))
    lines = tail_of(path).lines
    assert lines[:2] == [
        "Collecting pyside6>=6.2.4",
        "  Downloading PySide6-6.2.4-6.2.4-cp36.cp37.cp38.cp39.cp310-abi3-manylinux1_x86_64.whl"
        " (268.2 MB)",
    ]
    assert lines[2].endswith("18.6/268.2 MB 61.5 MB/s eta 0:00:05" + folded(9))
    assert lines[3].strip() == "━" and len(lines) == 4


def test_a_log_without_bars_is_untouched(tmp_path: Path) -> None:
    text = fixture_bytes("torchrun_nccl_error_hunyuanvideo114_excerpt.log")
    path = tmp_path / "train.log"
    path.write_bytes(text)
    assert tail_of(path).lines == text.decode().split("\n")


def test_copytruncate_hole_shows_the_text_after_it_and_says_there_is_a_hole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "server.log"
    before = fixture_bytes("torchrun_nccl_error_hunyuanvideo114_excerpt.log") + b"\n"
    after = fixture_bytes("vllm_worker_free_memory_chain_issue535_excerpt.log")
    with open(path, "wb", buffering=0) as writer:  # no O_APPEND: the writer keeps its offset
        writer.write(before)
        rotated = tmp_path / "server.log.1"
        rotated.write_bytes(path.read_bytes())  # what logrotate's copytruncate does:
        os.truncate(path, 0)  # copy, then truncate in place
        writer.write(after)
    assert path.read_bytes()[: len(before)] == b"\0" * len(before)
    info = tail_of(path)
    assert not info.binary
    hole = f"[… {len(before) / 1024:.1f} KiB of NUL bytes: a hole,"
    assert info.lines[0].startswith(hole)
    assert info.lines[1:] == after.decode().rstrip("\n").split("\n")
    assert info.error_summary is not None and "ValueError: Free memory" in info.error_summary


def test_a_tail_that_is_not_text_is_still_binary(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(range(256)) * 64 + b"\0" * 4096 + bytes(range(256)) * 4)
    assert tail_of(path).binary and tail_of(path).lines == []


def test_a_hole_read_from_its_middle_says_more_than(tmp_path: Path) -> None:
    path = tmp_path / "sparse.log"
    with open(path, "wb") as handle:
        handle.write(b"old line\n")
        handle.seek(4 * 1024 * 1024)
        handle.write(b"after the hole\n")
    info = tail_of(path)  # the tail budget (1 MB) ends inside the 4 MB hole
    assert info.lines[0].startswith("[… more than 1024.0 KiB of NUL bytes")
    assert info.lines[1:] == ["after the hole"]


def test_folding_stays_linear_on_long_lines_that_look_like_frames() -> None:
    import time

    from ctxd.collectors._progress import fold_progress

    lines = [" " * 1990 + "% 1/2", "a" * 390 + " " * 1600 + "%|x| 1/2 [", "5% " * 600 + "1/2"]
    started = time.process_time()
    fold_progress(lines * 700)
    assert time.process_time() - started < 2.0  # a backtracking match took 10 s here
