import platform
import socket
from pathlib import Path

import pytest
from ctxd.collectors import CollectContext, host
from ctxd.collectors.host import parse_os_release
from ctxd.settings import Settings


def context() -> CollectContext:
    return CollectContext(settings=Settings())


def test_collect_reports_this_machine(tmp_path: Path) -> None:
    release = tmp_path / "os-release"
    release.write_text('NAME="Debian GNU/Linux"\nPRETTY_NAME="Debian GNU/Linux 13 (trixie)"\n')
    info = host.collect([], context(), os_release=release)
    assert info.unavailable == []
    assert info.hostname == socket.gethostname()
    assert info.os == "Debian GNU/Linux 13 (trixie)"
    assert info.kernel == platform.release()
    assert info.cpu_count and info.cpu_count >= 1
    assert len(info.load_avg) == 3
    assert info.memory_total_bytes and info.memory_available_bytes
    assert 0 < info.memory_available_bytes <= info.memory_total_bytes
    assert platform.python_version() in info.python


def test_missing_os_release_falls_back_to_platform(tmp_path: Path) -> None:
    info = host.collect([], context(), os_release=tmp_path / "absent")
    assert info.os == platform.platform(terse=True)


def test_static_facts_are_cached(tmp_path: Path) -> None:
    release = tmp_path / "os-release"
    release.write_text("PRETTY_NAME=First\n")
    ctx = context()
    assert host.collect([], ctx, os_release=release).os == "First"
    release.write_text("PRETTY_NAME=Second\n")
    assert host.collect([], ctx, os_release=release).os == "First"


def test_failing_probe_becomes_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> tuple[float, float, float]:
        raise OSError("no load average here")

    monkeypatch.setattr(host.os, "getloadavg", broken)
    info = host.collect([], context())
    assert info.load_avg == []
    assert [(u.target, u.reason) for u in info.unavailable] == [
        ("load_avg", "OSError: no load average here")
    ]
    assert info.hostname


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('PRETTY_NAME="Ubuntu 24.04.1 LTS"\n', "Ubuntu 24.04.1 LTS"),
        ("ID=alpine\nPRETTY_NAME='Alpine Linux v3.20'\n", "Alpine Linux v3.20"),
        ("PRETTY_NAME=Plain\n", "Plain"),
        ('PRETTY_NAME="Unbalanced\n', "Unbalanced"),
        ("# comment\nNAME=x\n", ""),
        ("", ""),
    ],
)
def test_parse_os_release(text: str, expected: str) -> None:
    assert parse_os_release(text) == expected


def test_disks_for_watched_paths_and_the_data_dir(tmp_path: Path) -> None:
    """The disk of the work (a watched log's folder, as far as it exists) is named first; ctxd's
    store, on the same filesystem, adds no line; with nothing watched, the store's is shown."""
    from datetime import UTC, datetime

    from ctxd.models import LogWatch, Watch

    log = Watch(id=1, session="t", created_at=datetime.now(UTC),
                spec=LogWatch(path=str(tmp_path / "not-yet" / "*.log")))  # fmt: skip
    ctx = CollectContext(settings=Settings(data_dir=tmp_path / "data"))
    info = host.collect([log], ctx)
    assert info.disks and info.disks[0].path == str(tmp_path)
    assert len(info.disks) == 1  # the same filesystem is listed once
    assert host.collect([], ctx).disks[0].path.endswith("data")
    assert 0 < info.disks[0].free_bytes <= info.disks[0].total_bytes
    assert info.uptime_s and info.uptime_s > 0 and info.swap_total_bytes is not None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n",
            "AMD EPYC 9654 96-Core Processor",
        ),
        ("processor : 0\nBogoMIPS : 50\nModel : Raspberry Pi 4\n", "Raspberry Pi 4"),
        ("", ""),
    ],
)
def test_parse_cpu_model(text: str, expected: str) -> None:
    assert host.parse_cpu_model(text) == expected
