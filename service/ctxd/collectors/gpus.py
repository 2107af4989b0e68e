"""NVIDIA GPUs: NVML when the driver library loads, else nvidia-smi, else "no NVIDIA GPU"."""

import contextlib
import os
import shutil
import subprocess
import threading
import time
from typing import Any

import psutil

from ctxd import redact
from ctxd.collectors import CollectContext
from ctxd.collectors._gputext import (
    attach,
    parse_compute_apps,
    parse_query_gpu,
    parse_smi_header,
)
from ctxd.models import GpuInfo, GpuProcess, GpusSection, Unavailable, Watch

NAME = "gpus"
SECTION = GpusSection
KIND = None
RETIRES = False

QUERY_GPU = (
    "index,uuid,name,driver_version,compute_cap,utilization.gpu,memory.used,memory.total,"
    "temperature.gpu,power.draw,power.limit"
)
QUERY_APPS = "gpu_uuid,pid,process_name,used_gpu_memory"

_NVML_LOCK = threading.Lock()
_nvml_state: dict[str, Any] = {"ready": False, "hung": False}
NVIDIA_DRIVER = "/proc/driver/nvidia"  # the kernel driver's own folder: there when it is loaded


class ProbeError(Exception):
    """A probe that ran but gave no usable answer; the text says why."""


def _run(argv: list[str], deadline: float) -> str:
    timeout = max(0.1, deadline - time.monotonic())
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ProbeError(f"{argv[0]} did not answer within {timeout:.1f} s") from None
    except OSError as exc:
        raise ProbeError(f"{argv[0]} cannot run: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        raise ProbeError(f"{argv[0]} exited {done.returncode}: {said[0] if said else ''}"[:200])
    return done.stdout


def probe_smi(executable: str, timeout_s: float) -> GpusSection:
    """Query nvidia-smi within timeout_s in all; raises ProbeError."""
    deadline = time.monotonic() + timeout_s
    query = QUERY_GPU
    try:
        text = _run([executable, f"--query-gpu={query}", "--format=csv,nounits"], deadline)
    except ProbeError as exc:
        if "compute_cap" not in str(exc):
            raise
        query = query.replace("compute_cap,", "")  # drivers before 510 do not know it
        text = _run([executable, f"--query-gpu={query}", "--format=csv,nounits"], deadline)
    gpus, driver = parse_query_gpu(text)
    section = GpusSection(source="nvidia-smi", driver_version=driver, items=gpus)
    for what, argv in (
        ("processes", [executable, f"--query-compute-apps={QUERY_APPS}", "--format=csv,nounits"]),
        ("CUDA version", [executable]),
    ):
        try:
            out = _run(argv, deadline)
        except ProbeError as exc:
            section.unavailable.append(Unavailable(target=what, reason=str(exc)))
            continue
        if what == "processes":
            attach(gpus, parse_compute_apps(out))
        else:
            section.cuda_version = parse_smi_header(out)[1]
    return section


def _nvml_call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # one unsupported query (NVMLError_NotSupported) must not lose the GPU
        return None


def _nvml_gpu(nvml: Any, index: int) -> GpuInfo:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    cap = _nvml_call(nvml.nvmlDeviceGetCudaComputeCapability, handle)
    util = _nvml_call(nvml.nvmlDeviceGetUtilizationRates, handle)
    memory = _nvml_call(nvml.nvmlDeviceGetMemoryInfo, handle)
    power = _nvml_call(nvml.nvmlDeviceGetPowerUsage, handle)
    limit = _nvml_call(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    temp = _nvml_call(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
    procs = _nvml_call(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
    return GpuInfo(
        index=index,
        name=str(_nvml_call(nvml.nvmlDeviceGetName, handle) or ""),
        uuid=_nvml_call(nvml.nvmlDeviceGetUUID, handle),
        compute_capability=f"{cap[0]}.{cap[1]}" if cap else None,
        utilization_percent=float(util.gpu) if util is not None else None,
        memory_used_bytes=int(memory.used) if memory is not None else None,
        memory_total_bytes=int(memory.total) if memory is not None else None,
        temperature_c=float(temp) if temp is not None else None,
        power_w=power / 1000 if power is not None else None,
        power_limit_w=limit / 1000 if limit is not None else None,
        processes=[
            GpuProcess(pid=p.pid, used_memory_bytes=getattr(p, "usedGpuMemory", None) or None)
            for p in procs
        ],
    )


def probe_nvml() -> GpusSection:
    """Read every GPU through NVML; raises ImportError or an NVMLError when it cannot."""
    import pynvml as nvml

    with _NVML_LOCK:
        if not _nvml_state["ready"]:
            nvml.nvmlInit()  # loads libnvidia-ml.so; kept loaded, as init costs seconds on 8 GPUs
            _nvml_state["ready"] = True
        cuda = _nvml_call(nvml.nvmlSystemGetCudaDriverVersion_v2)
        section = GpusSection(
            source="nvml",
            driver_version=_nvml_call(nvml.nvmlSystemGetDriverVersion),
            cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
        )
        for index in range(nvml.nvmlDeviceGetCount()):
            section.items.append(_nvml_gpu(nvml, index))
    return section


def _bounded(probe: Any, timeout_s: float) -> Any:
    """Run probe in a daemon thread: a wedged driver must not hold the snapshot."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = probe()
        except BaseException as exc:  # handed back to the caller below
            box["error"] = exc

    thread = threading.Thread(target=run, name="ctxd-nvml", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        _nvml_state["hung"] = True  # never ask a hung NVML again in this process
        raise ProbeError(f"NVML did not answer within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def observe(timeout_s: float, smi: str | None, use_nvml: bool = True) -> GpusSection:
    """NVML, else nvidia-smi, else a section that says there is no NVIDIA GPU, and why."""
    reasons = []
    if use_nvml and not os.path.exists(NVIDIA_DRIVER):
        # no driver: NVML cannot answer, and importing pynvml to hear so costs 2.4 MB of RSS
        reasons.append(f"NVML: no NVIDIA driver loaded ({NVIDIA_DRIVER} is absent)")
    elif use_nvml and not _nvml_state["hung"]:
        try:
            section: GpusSection = _bounded(probe_nvml, timeout_s)
            return section
        except Exception as exc:  # NVMLError_LibraryNotFound on a machine without a driver
            reasons.append(f"NVML: {type(exc).__name__}: {exc}"[:160])
    if smi:
        try:
            return probe_smi(smi, timeout_s)
        except ProbeError as exc:
            return GpusSection(unavailable=[Unavailable(target="nvidia-smi", reason=str(exc))],
                               reason="; ".join(reasons))  # fmt: skip
    reasons.append("nvidia-smi not found")
    return GpusSection(reason="no NVIDIA GPU (" + "; ".join(reasons) + ")")


def _watched_pids(ctx: CollectContext) -> set[int]:
    # Collectors run concurrently: the last snapshot's rows are the watched pids we can rely on.
    # Signals map GPU processes onto the current rows again.
    return {p.pid for p in ctx.previous.processes.items} if ctx.previous else set()


def collect(watches: list[Watch], ctx: CollectContext) -> GpusSection:
    try:
        timeout = ctx.settings.gpu_probe_timeout_s
        section = observe(timeout, shutil.which("nvidia-smi"))
        watched = _watched_pids(ctx)
        for gpu in section.items:
            for proc in gpu.processes:
                proc.watched = proc.pid in watched
                if not proc.name:  # NVML gives pids only
                    with contextlib.suppress(psutil.Error):
                        proc.name = psutil.Process(proc.pid).name()
        return section
    except Exception as exc:  # never raise into the snapshot
        reason = redact.text(f"{type(exc).__name__}: {exc}")[:200]
        return GpusSection(unavailable=[Unavailable(target=NAME, reason=reason)])
