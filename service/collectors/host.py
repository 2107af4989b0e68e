"""Facts about the machine itself: name, OS, kernel, CPUs, load, memory and Python."""

import os
import platform
import shlex
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from service.collectors import CollectContext
from service.models import HostInfo, Unavailable, Watch

NAME = "host"

OS_RELEASE = Path("/etc/os-release")


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
        "cpu_count": lambda: psutil.cpu_count(logical=True) or os.cpu_count(),
        "memory_total_bytes": lambda: psutil.virtual_memory().total,
        "python": lambda: f"{platform.python_implementation()} {platform.python_version()}",
    }
    return _probe(probes)


def _probe(probes: dict[str, Callable[[], Any]]) -> tuple[dict[str, Any], list[Unavailable]]:
    values: dict[str, Any] = {}
    failures: list[Unavailable] = []
    for field, probe in probes.items():
        try:
            values[field] = probe()
        except Exception as exc:  # one missing fact must not hide the others
            failures.append(Unavailable(target=field, reason=f"{type(exc).__name__}: {exc}"[:200]))
    return values, failures


def collect(watches: list[Watch], ctx: CollectContext, os_release: Path = OS_RELEASE) -> HostInfo:
    try:
        cached = ctx.memory.get(NAME)
        if cached is None:
            cached = ctx.memory[NAME] = _static(os_release)
        static, static_failures = cached
        dynamic, failures = _probe(
            {
                "load_avg": lambda: [round(x, 2) for x in os.getloadavg()],
                "memory_available_bytes": lambda: psutil.virtual_memory().available,
            }
        )
        return HostInfo(**static, **dynamic, unavailable=[*static_failures, *failures])
    except Exception as exc:  # never raise into the snapshot
        return HostInfo(unavailable=[Unavailable(target=NAME, reason=repr(exc)[:200])])
