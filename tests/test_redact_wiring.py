"""Secrets at the log collector's cuts: redacted before any cut, and PEM windows withheld."""

from datetime import UTC, datetime
from pathlib import Path

from ctxd.collectors import CollectContext, logs
from ctxd.models import LogsSection, LogWatch, Watch
from ctxd.settings import Limits, Settings

GHP36 = "ghp_" + "Q7w8E9r0T1y2U3i4O5p6A7s8D9f0G1h2"
PEM64 = [
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
    "MZR4xG0kz3iVvF8X8Q1nBC+0XyZ3Tk7fS8uZfz5hJ2QjL1bF9Yv7t0rW2k8nQ9P3",
    "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU3v",
]


def _collect(path: Path, lines: int) -> str:
    spec = LogWatch(path=str(path), lines=lines)
    watch = Watch(id=1, session="s", created_at=datetime.now(UTC), spec=spec)
    section: LogsSection = logs.collect([watch], CollectContext(settings=Settings(limits=Limits())))
    return section.model_dump_json()


def test_token_straddling_the_line_cut(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("x" * 1979 + " " + GHP36 + " more\n")  # 20 of 36 before the cut
    assert GHP36[4:20] not in _collect(log, 5)


def test_token_straddling_the_error_summary(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("RuntimeError: " + "y" * 265 + " " + GHP36 + "\n")
    assert GHP36[4:20] not in _collect(log, 5)


def test_window_inside_a_private_key(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("-----BEGIN PRIVATE KEY-----\n" + "\n".join(PEM64 * 5) + "\n")
    out = _collect(log, 2)
    assert not any(line[:24] in out for line in PEM64)
