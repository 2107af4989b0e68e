"""`ctxd install --no-wake` (issue 40) for each harness that can be woken: Claude Code gets no
waiter hook, opencode's plugin is written with waking off, and `ctxd doctor` takes either as
this installation's, current (a reinstall without `--no-wake` would change it, by design)."""

from pathlib import Path

import pytest

from tests.conftest import Server
from tests.test_install import ctxd

CHECKS = {
    "claude": (Path(".claude/settings.json"), "--wake", "Claude Code (user)"),
    "opencode": (Path(".config/opencode/plugins/ctxd.js"), "const WAKES_INSTALLED = true",
                 "opencode (user)"),
}  # fmt: skip


@pytest.mark.parametrize("harness", list(CHECKS))
def test_no_wake_installs_without_waking_and_doctor_calls_it_current(
    server: Server, tmp_path: Path, harness: str
) -> None:
    (home, work), (written, waking, label) = (tmp_path / "home", tmp_path / "work"), CHECKS[harness]
    home.mkdir()
    work.mkdir()
    ctxd(home, work, "--url", server.url, "install", harness, "--no-wake").check_returncode()
    assert waking not in (home / written).read_text()
    doctor = ctxd(home, work, "--url", server.url, "doctor")
    assert f"ok   {label}: ctxd's hooks and MCP server call {server.url}" in doctor.stdout, (
        doctor.stdout
    )
    assert "waking the idle agent off" in doctor.stdout, doctor.stdout
    # installed again with waking on: the waiter comes back, and doctor says nothing of it off
    ctxd(home, work, "--url", server.url, "install", harness).check_returncode()
    assert waking in (home / written).read_text()
    doctor = ctxd(home, work, "--url", server.url, "doctor")
    assert f"ok   {label}" in doctor.stdout and "waking the idle agent off" not in doctor.stdout
