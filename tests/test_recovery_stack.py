"""Know the stack: a Python root's own site-packages give the versions that decide debugging."""

import sys
from datetime import UTC, datetime
from pathlib import Path

from ctxd.collectors import CollectContext, processes
from ctxd.models import ProcessWatch, Watch
from ctxd.settings import Settings


def make_env(tmp_path: Path, dists: list[str], torch_cuda: str | None) -> Path:
    """A virtual environment's layout as pip leaves it: `name-version.dist-info` folders."""
    env = tmp_path / "venv"
    site = env / "lib" / f"python3.{sys.version_info.minor}" / "site-packages"
    site.mkdir(parents=True)
    for dist in dists:
        (site / f"{dist}.dist-info").mkdir()
    if torch_cuda is not None:
        (site / "torch").mkdir()
        cuda = "None" if torch_cuda == "cpu" else repr(torch_cuda)  # as torch/version.py has it
        (site / "torch" / "version.py").write_text(
            f"__version__ = '2.9.1'\ndebug = False\ncuda: Optional[str] = {cuda}\n"
        )
    return env


def row_for(tmp_path: Path, spawn, env: Path, tag: str):
    child = spawn(sys.executable, "-c", "import time; time.sleep(60)", tag,
                  env={"VIRTUAL_ENV": str(env), "PATH": "/usr/bin:/bin"})  # fmt: skip
    watch = Watch(id=1, session="s", created_at=datetime.now(UTC), spec=ProcessWatch(pid=child.pid))
    section = processes.collect([watch], CollectContext(settings=Settings(cpu_sample_s=0)))
    return next(p for p in section.items if p.pid == child.pid)


def test_a_python_root_shows_its_stack_without_being_asked(tmp_path: Path, spawn) -> None:
    env = make_env(
        tmp_path,
        ["torch-2.9.1", "vllm-0.12.0", "nvidia_nccl_cu12-2.27.5", "triton-3.5.1",
         "flashinfer_python-0.5.3", "transformers-4.57.3", "sgl_kernel-0.3.17", "requests-2.32"],
        torch_cuda="12.8",
    )  # fmt: skip
    row = row_for(tmp_path, spawn, env, "ctxd-stack")
    assert row.packages == {
        "torch": "2.9.1 (CUDA 12.8)",
        "vllm": "0.12.0",
        "nvidia-nccl-cu12": "2.27.5",
        "triton": "3.5.1",
        "flashinfer-python": "0.5.3",
        "transformers": "4.57.3",
        "sgl-kernel": "0.3.17",
    }


def test_a_local_torch_build_keeps_its_tag_and_a_cpu_build_says_so(tmp_path: Path, spawn) -> None:
    tagged = row_for(tmp_path, spawn, make_env(tmp_path, ["torch-2.4.0+cu121"], None), "a")
    assert tagged.packages == {"torch": "2.4.0+cu121"}
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    row = row_for(cpu, spawn, make_env(cpu, ["torch-2.9.1"], torch_cuda="cpu"), "b")
    assert row.packages == {"torch": "2.9.1 (CPU build)"}


def test_the_gpu_section_names_the_driver_and_its_cuda_version() -> None:
    from ctxd.collectors._gputext import parse_smi_header
    from ctxd.models import GpuInfo, GpusSection, Observations, Snapshot, SnapshotHeader
    from ctxd.render.markdown import render_dump

    # the banner of a real 8x H100 capture (thamada/nvidia-smi, gls/H100SXMx8_smi.py)
    header = (
        "| NVIDIA-SMI 565.57.01              Driver Version: 565.57.01      CUDA Version: 12.7"
        "     |"
    )
    driver, cuda = parse_smi_header(header)
    gpus = GpusSection(source="nvidia-smi", driver_version=driver, cuda_version=cuda,
                       items=[GpuInfo(index=0, name="NVIDIA H100 80GB HBM3")])  # fmt: skip
    snap = Snapshot(
        header=SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="t"),
        observations=Observations(gpus=gpus),
    )
    assert "NVIDIA driver 565.57.01, CUDA driver version 12.7" in render_dump(snap)
