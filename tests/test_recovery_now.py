"""What a resuming agent reads first: the Now section names a new error by its root cause.

Real logs from public issue threads (tests/fixtures, each with its `# source:` line), real
compilers and real processes; the dump is rendered by the real Snapshotter.
"""

import os
import subprocess
import sys
from pathlib import Path

from ctxd.models import LogWatch, PortWatch, ProcessWatch, SessionIn, Snapshot
from ctxd.settings import Settings
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.database import Store

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8").split("\n", 1)[1]  # drop `# source:`


def now_section(markdown: str) -> str:
    return markdown.split("## Now\n", 1)[1].split("\n## ", 1)[0].strip()


class Session:
    """One real session: a Snapshotter over a store in tmp_path."""

    def __init__(self, tmp_path: Path) -> None:
        settings = Settings(data_dir=tmp_path / "data", cpu_sample_s=0)
        self.snap = Snapshotter(settings, Store(settings.db_path))
        self.snap.store.put_session("s", SessionIn())

    def watch(self, spec) -> None:
        self.snap.store.add_watch("s", spec, limit=10)

    def take(self) -> tuple[Snapshot, str]:
        snapshot = self.snap.take("s")
        return snapshot, self.snap.render(snapshot)

    def close(self) -> None:
        self.snap.close()


def test_vllm_chain_now_names_the_root_cause_not_the_wrapper(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("INFO 07-01 02:36:00 [api_server.py:1] vLLM API server starting\n")
    s = Session(tmp_path)
    try:
        s.watch(LogWatch(path=str(log), lines=10))  # the root cause is above the tail
        s.take()
        with open(log, "a") as handle:
            handle.write(fixture_text("vllm_worker_free_memory_chain_issue535_excerpt.log"))
        snapshot, markdown = s.take()
        now = now_section(markdown)
        first = now.splitlines()[0]
        assert first.startswith(f"- **critical**: new error in {log}: ")
        assert "ValueError: Free memory on device cuda:0 (22.35/23.56 GiB)" in first
        assert "Engine core initialization failed" not in first
        tail = "\n".join(snapshot.observations.logs.items[0].lines)
        assert "ValueError" not in tail  # Now names what the tail no longer shows
    finally:
        s.close()


def test_nccl_error_appended_by_torchrun_is_named_from_its_rank(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("W1211 08:20:00.000000 1 torch/distributed/run.py:1] starting 2 ranks\n")
    s = Session(tmp_path)
    try:
        s.watch(LogWatch(path=str(log)))
        s.take()
        with open(log, "a") as handle:
            handle.write(fixture_text("torchrun_nccl_error_hunyuanvideo114_excerpt.log"))
        _, markdown = s.take()
        assert now_section(markdown).splitlines()[0] == (
            f"- **critical**: new error in {log}: [rank0]: RuntimeError: NCCL Error 2: "
            "unhandled system error (run with NCCL_DEBUG=INFO for details)"
        )
    finally:
        s.close()


def test_a_gcc_error_in_a_watched_build_log_is_news(tmp_path: Path) -> None:
    src = tmp_path / "main.c"
    src.write_text("int main(void) {\n  return undefined_a + undefined_b;\n}\n")
    (tmp_path / "Makefile").write_text("all:\n\tcc -c main.c -o main.o\n")
    log = tmp_path / "build.log"
    log.write_text("")
    s = Session(tmp_path)
    try:
        s.watch(LogWatch(path=str(log)))
        s.take()
        with open(log, "a") as out:
            env = {**os.environ, "LC_ALL": "C", "LANG": "C"}  # plain quotes in gcc's messages
            done = subprocess.run(
                ["make"], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, env=env
            )
        assert done.returncode != 0
        snapshot, markdown = s.take()
        first = now_section(markdown).splitlines()[0]
        assert first.startswith(f"- **critical**: new error in {log}: main.c:2:")
        assert "error: 'undefined_a' undeclared" in first
        assert snapshot.observations.logs.items[0].error_lines >= 3  # both names, make's line
    finally:
        s.close()


def test_one_cause_from_four_ranks_is_one_signal_with_a_count(tmp_path: Path) -> None:
    log = tmp_path / "ranks.log"
    log.write_text("")
    s = Session(tmp_path)
    try:
        s.watch(LogWatch(path=str(log)))
        s.take()
        code = (
            "import sys; r = int(sys.argv[1]); "
            "raise ValueError(f'Free memory on device cuda:{r} (1.{r}/23.56 GiB) is too low')"
        )
        with open(log, "a") as out:
            for rank in range(4):
                subprocess.run([sys.executable, "-c", code, str(rank)], stderr=out, check=False)
        _, markdown = s.take()
        (first, *rest) = now_section(markdown).splitlines()
        assert "ValueError: Free memory on device cuda:0 (1.0/23.56 GiB) is too low" in first
        assert first.endswith("(4 times)")
        assert not any("ValueError" in line for line in rest)
        logs_part = markdown.split("## Logs\n", 1)[1]
        assert "**Error since the previous snapshot**: root cause `ValueError: Free memory" in (
            logs_part
        )
        assert "is too low`, 4 times" in logs_part
    finally:
        s.close()


def test_an_error_already_in_the_log_leads_the_first_snapshot(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(fixture_text("vllm_worker_free_memory_chain_issue535_excerpt.log"))
    s = Session(tmp_path)
    try:
        s.watch(LogWatch(path=str(log)))
        _, markdown = s.take()
        first = now_section(markdown).splitlines()[0]
        assert first.startswith(f"- **critical**: error in {log}: ")
        assert "ValueError: Free memory on device" in first
    finally:
        s.close()


def test_an_exit_and_a_closed_port_lead_with_the_root_cause(tmp_path: Path, spawn) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO 07-01 02:36:00 [api_server.py:1] starting\n")
    child = spawn(sys.executable, "-c", "import time; time.sleep(60)", "ctxd-recovery-exit")
    s = Session(tmp_path)
    try:
        s.watch(ProcessWatch(pid=child.pid, expect_ports=[1]))
        s.watch(LogWatch(path=str(log)))
        s.watch(PortWatch(port=1))
        s.take()
        with open(log, "a") as handle:
            handle.write(fixture_text("vllm_worker_free_memory_chain_issue535_excerpt.log"))
        child.kill()
        child.wait()  # reaped: gone from the process table when the snapshot looks
        _, markdown = s.take()
        now = now_section(markdown)
        exit_line = next(line for line in now.splitlines() if "crashed" in line)
        assert exit_line.startswith(f"- **critical**: process {child.pid} (python")
        assert "crashed: (Worker pid=148) ERROR" in exit_line and "ValueError: Free" in exit_line
        port_line = next(line for line in now.splitlines() if "not listening" in line)
        assert "not listening: (Worker pid=148)" in port_line
        assert "watch 1" not in port_line.split("(in ")[0]
    finally:
        s.close()
