"""Facts about the machine itself: name, OS, kernel, CPUs, load, memory, disks and Python."""

import os
import platform
import shlex
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ctxd import redact
from ctxd.collectors import CollectContext
from ctxd.models import ArtifactWatch, DiskInfo, HostInfo, LogWatch, Unavailable, Watch

NAME = "host"
SECTION = HostInfo
KIND = None
RETIRES = False

OS_RELEASE = Path("/etc/os-release")
CPUINFO = Path("/proc/cpuinfo")
DISKS_MAX = 16


def parse_cpu_model(text: str) -> str:
    """The first `model name` (x86) or `Model`/`Hardware` (Arm) line of /proc/cpuinfo."""
    for wanted in ("model name", "Model", "Hardware"):
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == wanted and value.strip():
                return value.strip()
    return ""


def _cpu_model() -> str:
    try:
        return parse_cpu_model(CPUINFO.read_text(errors="replace")) or platform.processor()
    except OSError:
        return platform.processor()


def _existing_folder(path: str) -> str | None:
    """The deepest existing folder at or above path (a glob is cut at its first wildcard)."""
    cut = min((i for i, c in enumerate(path) if c in "*?["), default=len(path))
    current = Path(path[:cut] or "/")
    for candidate in (current, *current.parents):
        if candidate.is_dir():
            return str(candidate)
    return None


def disks(paths: list[str]) -> list[DiskInfo]:
    """Free space per filesystem holding one of paths; each filesystem listed once."""
    found: list[DiskInfo] = []
    devices: set[int] = set()
    for path in paths:
        folder = _existing_folder(path)
        if folder is None:
            continue
        try:
            device = os.stat(folder).st_dev
            if device in devices:
                continue
            usage = shutil.disk_usage(folder)
        except OSError:
            continue
        devices.add(device)
        found.append(DiskInfo(path=path, total_bytes=usage.total, free_bytes=usage.free))
        if len(found) >= DISKS_MAX:
            break
    return found


def _watched_paths(watches: list[Watch]) -> list[str]:
    paths = []
    for watch in watches:
        if isinstance(watch.spec, LogWatch | ArtifactWatch) and watch.spec.path.startswith("/"):
            paths.append(_existing_folder(watch.spec.path) or watch.spec.path)
    return list(dict.fromkeys(paths))


def parse_os_release(text: str) -> str:
    """PRETTY_NAME from an os-release file (shell-quoted KEY=value lines), or "" if absent."""
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key == "PRETTY_NAME":
            try:
                words = shlex.split(value)
            except ValueError:
                words = [value.strip("\"'")]
            return " ".join(words)
    return ""


def _os_name(os_release: Path) -> str:
    try:
        pretty = parse_os_release(os_release.read_text(errors="replace"))
    except OSError:
        pretty = ""
    return pretty or platform.platform(terse=True)


def _static(os_release: Path) -> tuple[dict[str, Any], list[Unavailable]]:
    """What does not change while ctxd runs; read once and kept in ctx.memory."""
    probes: dict[str, Callable[[], Any]] = {
        "hostname": socket.gethostname,
        "os": lambda: _os_name(os_release),
        "kernel": platform.release,
        "cpu_model": _cpu_model,
        "cpu_count": lambda: psutil.cpu_count(logical=True) or os.cpu_count(),
        "memory_total_bytes": lambda: psutil.virtual_memory().total,
        "python": lambda: f"{platform.python_implementation()} {platform.python_version()}",
    }
    return _probe(probes)


def _reason(exc: Exception) -> str:
    return redact.cut(f"{type(exc).__name__}: {exc}", 200, marker="")


def _probe(probes: dict[str, Callable[[], Any]]) -> tuple[dict[str, Any], list[Unavailable]]:
    values: dict[str, Any] = {}
    failures: list[Unavailable] = []
    for field, probe in probes.items():
        try:
            values[field] = probe()
        except Exception as exc:  # one missing fact must not hide the others
            failures.append(Unavailable(target=field, reason=_reason(exc)))
    return values, failures


@dataclass
class HostMemory:
    """What does not change while ctxd runs, read on the first collection."""

    static: tuple[dict[str, Any], list[Unavailable]] | None = None


def collect(watches: list[Watch], ctx: CollectContext, os_release: Path = OS_RELEASE) -> HostInfo:
    try:
        memory = ctx.memory_of(NAME, HostMemory)
        if memory.static is None:
            memory.static = _static(os_release)
        static, static_failures = memory.static
        dynamic, failures = _probe(
            {
                "load_avg": lambda: [round(x, 2) for x in os.getloadavg()],
                "memory_available_bytes": lambda: psutil.virtual_memory().available,
                "swap_total_bytes": lambda: psutil.swap_memory().total,
                "swap_used_bytes": lambda: psutil.swap_memory().used,
                "uptime_s": lambda: max(0.0, time.time() - psutil.boot_time()),
                # the work's own disk first, named by its folder; ctxd's store on another
                "disks": lambda: disks(
                    [*_watched_paths(watches), str(ctx.settings.data_dir.resolve())]
                ),
            }
        )
        return HostInfo(**static, **dynamic, unavailable=[*static_failures, *failures])
    except Exception as exc:  # never raise into the snapshot
        return HostInfo(
            unavailable=[Unavailable(target=NAME, reason=redact.cut(repr(exc), 200, marker=""))]
        )
