"""GPU parsing on captured nvidia-smi output, and the probe's failure modes with a real stand-in."""

import os
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from ctxd.collectors import CollectContext, gpus
from ctxd.collectors._gputext import (
    attach,
    parse_compute_apps,
    parse_query_gpu,
    parse_smi_header,
)
from ctxd.models import Observations, Snapshot, SnapshotHeader
from ctxd.render.markdown import render_dump
from ctxd.settings import Settings

from .conftest import FIXTURES

GPU = FIXTURES / "gpu"
MIB = 1024 * 1024


def captured(name: str) -> str:
    """A fixture without its line 1 (`# source: ...`), as the README asks."""
    return (GPU / name).read_text().split("\n", 1)[1]


def test_eight_h200_with_units_in_header_and_values() -> None:
    found, driver = parse_query_gpu(captured("query_gpu_8x_h200.csv"))
    assert driver == "570.211.01"
    assert [g.index for g in found] == list(range(8))
    assert {g.name for g in found} == {"NVIDIA H200"}
    assert found[7].memory_total_bytes == 143771 * MIB
    assert found[0].power_limit_w == 700.0
    assert found[0].utilization_percent is None  # not queried: unknown, not zero


def test_h100_with_130_missing_fields() -> None:
    (gpu,), driver = parse_query_gpu(captured("query_gpu_h100_all_fields_na.csv"))
    assert driver == "590.48.01"
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.compute_capability == "9.0"
    assert gpu.utilization_percent == 0.0 and gpu.memory_used_bytes == 0
    assert gpu.memory_total_bytes and gpu.temperature_c is not None and gpu.power_w


def test_h200_under_load() -> None:
    (gpu,), _ = parse_query_gpu(captured("query_gpu_h200_load_na.csv"))
    assert gpu.utilization_percent == 100.0
    assert gpu.memory_used_bytes and gpu.memory_used_bytes > 30_000 * MIB


def test_p100_without_units_or_index() -> None:
    (gpu,), driver = parse_query_gpu(captured("query_gpu_tesla_p100_na.csv"))
    assert driver is None and gpu.index == 0
    assert gpu.name == "Tesla P100-PCIE-16GB" and gpu.temperature_c == 37.0
    assert gpu.power_w == 28.16


def test_compute_apps_linux_and_windows() -> None:
    apps = parse_compute_apps(captured("query_compute_apps_h100_load.csv"))
    assert [(p.pid, p.name, p.used_memory_bytes) for _, p in apps] == [
        (11327, "/root/tools/memhog", 2566 * MIB),
        (11328, "/root/tools/memhog", 1542 * MIB),
        (11345, "./gpu_burn", 15690 * MIB),
    ]
    windows = parse_compute_apps(captured("query_compute_apps_windows_rtx2080super_na.csv"))
    assert len(windows) == 21
    assert all(p.used_memory_bytes is None for _, p in windows)
    assert any(" " in p.name and "(" in p.name for _, p in windows)


def test_processes_attach_to_their_gpu_by_uuid() -> None:
    found, _ = parse_query_gpu(captured("query_gpu_h100_all_fields_na.csv"))
    attach(found, parse_compute_apps(captured("query_compute_apps_h100_load.csv")))
    assert [p.pid for p in found[0].processes] == [11327, 11328, 11345]


@pytest.mark.parametrize(
    ("name", "driver", "cuda"),
    [
        ("smi_table_8x_h100_sxm_idle.txt", "565.57.01", "12.7"),
        ("smi_table_h200_load_processes.txt", "590.48.01", "13.1"),
        ("smi_table_b200_r610_issue27487_excerpt.txt", "610.43.02", "13.3"),
        ("smi_table_windows_rtx2080super_610_wddm_processes.txt", "610.62", "13.3"),
        ("smi_table_rtx_pro_6000_blackwell_issue27542_excerpt.txt", "580.105.08", "13.0"),
    ],
)
def test_smi_banner_old_and_r610(name: str, driver: str, cuda: str) -> None:
    assert parse_smi_header(captured(name)) == (driver, cuda)


@pytest.mark.parametrize("text", ["", "\n\n", "garbage", "index, name\n0"])
def test_odd_text_gives_no_gpu_rather_than_an_error(text: str) -> None:
    assert parse_query_gpu(text) == ([], None)
    assert parse_compute_apps(text) == []
    assert parse_smi_header(text) == (None, None)


def test_two_lines_of_prose_give_no_gpu() -> None:
    prose = (
        "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.\n"
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    assert parse_query_gpu(prose) == ([], None)


def fake_smi(tmp_path: Path, body: str) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_smi_stand_in_is_queried_and_parsed(tmp_path: Path) -> None:
    query = captured("query_gpu_h200_load_na.csv").replace("\n", "\\n")
    banner = captured("smi_table_h200_load_processes.txt").replace("\n", "\\n")
    apps = captured("query_compute_apps_h100_load.csv").replace("\n", "\\n")
    smi = fake_smi(
        tmp_path,
        f"""case "$1" in
  --query-gpu=*) printf '%b' '{query}' ;;
  --query-compute-apps=*) printf '%b' '{apps}' ;;
  *) printf '%b' '{banner}' ;;
esac
""",
    )
    section = gpus.observe(5, smi, use_nvml=False)
    assert section.source == "nvidia-smi" and section.unavailable == []
    assert section.cuda_version == "13.1" and section.driver_version == "590.48.01"
    assert [p.pid for p in section.items[0].processes] == [11327, 11328, 11345]


def test_hung_smi_is_cut_off(tmp_path: Path) -> None:
    smi = fake_smi(tmp_path, "exec sleep 30\n")
    section = gpus.observe(0.5, smi, use_nvml=False)
    assert section.items == []
    assert "did not answer within" in section.unavailable[0].reason


def test_failing_smi_says_what_it_said(tmp_path: Path) -> None:
    smi = fake_smi(
        tmp_path, "echo 'NVIDIA-SMI has failed because it could not communicate'\nexit 9\n"
    )
    section = gpus.observe(5, smi, use_nvml=False)
    assert section.items == []
    assert "exited 9: NVIDIA-SMI has failed" in section.unavailable[0].reason


def test_without_nvml_or_smi_there_is_no_gpu() -> None:
    section = gpus.observe(1, None, use_nvml=False)
    assert section.source == "none" and "no NVIDIA GPU" in section.reason


def test_collect_here_and_the_dump_is_complete() -> None:
    """Whatever this machine has, the section comes back and renders."""
    section = gpus.collect([], CollectContext(settings=Settings()))
    if section.source == "none":
        assert "no NVIDIA GPU" in section.reason
    else:
        assert section.items and all(g.name for g in section.items)
    header = SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="t")
    markdown = render_dump(Snapshot(header=header, observations=Observations(gpus=section)))
    assert ("## GPUs" in markdown) == (section.source != "none") and "## Host" in markdown
    assert ("no NVIDIA GPU" in markdown) == (section.source == "none")
    # A machine with the NVIDIA driver loaded has a GPU to report; one without, none.
    driver_loaded = Path("/proc/driver/nvidia/version").exists()
    assert (section.source != "none") == driver_loaded, (section.source, section.reason)


@pytest.mark.skipif(os.path.exists(gpus.NVIDIA_DRIVER), reason="an NVIDIA driver is loaded here")
def test_without_a_driver_nvml_is_not_even_imported() -> None:
    """pynvml costs 2.4 MB of RSS to learn that no driver is there: it is not imported."""
    program = (
        "import sys; from ctxd.collectors import gpus\n"
        "section = gpus.observe(1, None)\n"
        "print('pynvml' in sys.modules, section.reason)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    imported, reason = done.stdout.split(" ", 1)
    assert imported == "False"
    assert reason.strip() == (
        "no NVIDIA GPU (NVML: no NVIDIA driver loaded (/proc/driver/nvidia is absent); "
        "nvidia-smi not found)"
    )
