"""`ctxd service install|uninstall`: the systemd user unit that keeps this installation's ctxd
always on, on the per-user data directory; the launchd agent for macOS."""

import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ctxd.cli import service_unit


def ctxd(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "XDG_"))}
    return subprocess.run(
        [sys.executable, "-m", "ctxd", *args], cwd=home,
        env={**env, "HOME": str(home), **extra}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def this_ctxd() -> str:
    script = Path(sys.executable).with_name("ctxd")
    return str(script) if script.exists() else f"{sys.executable} -m ctxd"


def test_install_writes_the_unit_once_and_uninstall_removes_it_and_its_link(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    unit = home / ".config" / "systemd" / "user" / "ctxd.service"
    dry = ctxd(home, "--url", "http://127.0.0.1:9111", "service", "install", "--dry-run")
    assert dry.returncode == 0 and "+ExecStart=" in dry.stdout and not unit.exists()

    done = ctxd(home, "--url", "http://127.0.0.1:9111", "service", "install")
    assert done.returncode == 0, done.stderr
    assert f"created {unit}" in done.stdout and "systemctl --user enable --now" in done.stdout
    text = unit.read_text()
    data = home / ".local" / "share" / "ctxd"
    expected = f"ExecStart={this_ctxd()} serve --host 127.0.0.1 --port 9111 --data-dir {data}\n"
    assert expected in text
    assert "Restart=on-failure" in text and "WantedBy=default.target" in text
    again = ctxd(home, "--url", "http://127.0.0.1:9111", "service", "install")
    assert "already installed" in again.stdout and unit.read_text() == text

    # `systemctl --user enable` links it; uninstall takes the link with the unit
    wants = unit.parent / "default.target.wants"
    wants.mkdir()
    (wants / "ctxd.service").symlink_to(unit)
    gone = ctxd(home, "service", "uninstall")
    assert gone.returncode == 0, gone.stderr
    assert not unit.exists() and not (wants / "ctxd.service").is_symlink()
    assert "systemctl --user stop ctxd.service" in gone.stdout
    assert "nothing to remove" in ctxd(home, "service", "uninstall").stdout


def test_the_data_directory_follows_xdg_and_a_unit_not_ours_is_left(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    config, data = tmp_path / "cfg", tmp_path / "share"
    xdg = {"XDG_CONFIG_HOME": str(config), "XDG_DATA_HOME": str(data)}
    ctxd(home, "service", "install", **xdg).check_returncode()
    unit = config / "systemd" / "user" / "ctxd.service"
    assert f"--data-dir {data / 'ctxd'}" in unit.read_text()

    unit.write_text("[Service]\nExecStart=/usr/bin/someone-elses-ctxd\n")
    refused = ctxd(home, "service", "uninstall", **xdg)
    assert refused.returncode == 2 and "not written by ctxd" in refused.stderr
    assert unit.read_text().startswith("[Service]")
    remote = ctxd(home, "--url", "http://10.0.0.5:8765", "service", "install", "--dry-run")
    assert remote.returncode == 2 and "loopback addresses only" in remote.stderr


def test_systemd_accepts_the_unit(tmp_path: Path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / "ctxd.service"
    unit.write_text(service_unit.unit_text("http://127.0.0.1:8765"))
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
    # it warns (exit 0) about what it ignores: an accepted unit draws no word at all
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


def test_the_launchd_agent_for_macos(tmp_path: Path):
    agent = plistlib.loads(service_unit.plist_text("http://127.0.0.1:8765", tmp_path).encode())
    assert agent["Label"] == "dev.ctxd.serve" and agent["RunAtLoad"] is True
    argv = agent["ProgramArguments"]
    assert argv[-7:-2] == ["serve", "--host", "127.0.0.1", "--port", "8765"]
    assert argv[-2] == "--data-dir" and argv[-1].endswith("ctxd")
    assert agent["StandardErrorPath"] == str(tmp_path / "Library" / "Logs" / "ctxd.log")


def test_percent_and_dollar_reach_ctxd_as_written(tmp_path: Path, monkeypatch):
    data = tmp_path / "da$HOME%n"
    monkeypatch.setenv("CTXD_DATA_DIR", str(data))
    text = service_unit.unit_text("http://127.0.0.1:8765")
    (exec_start,) = (x for x in text.splitlines() if x.startswith("ExecStart="))
    assert exec_start.endswith(f"--data-dir '{tmp_path}/da$$HOME%%n'")
    assert f"# Environment=CTXD_TOKEN_FILE='{tmp_path}/da$$HOME%%n/token'" in text
    assert "every local user can read the dumps" in text
    assert "After=network.target" not in text  # no such unit in a user manager
