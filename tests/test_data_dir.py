"""One data directory whichever way ctxd starts: `ctxd serve` without `--data-dir`, a hook's
autostart and the always-on unit all keep the store in the per-user folder."""

import os
import subprocess
import sys
from pathlib import Path

import httpx
from ctxd.cli import service_unit
from ctxd.hookclient import autostart
from ctxd.settings import Settings

from tests.conftest import free_port, wait_until


def test_serve_autostart_and_the_unit_share_one_per_user_default(monkeypatch, tmp_path: Path):
    monkeypatch.delenv("CTXD_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    expected = tmp_path / "xdg" / "ctxd"
    assert Settings().data_dir == autostart.data_dir() == expected
    argv = service_unit.serve_argv("http://127.0.0.1:8765")
    assert argv[argv.index("--data-dir") + 1] == str(expected)

    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert Settings().data_dir == tmp_path / "home" / ".local" / "share" / "ctxd"


def test_serve_without_data_dir_keeps_its_store_in_the_per_user_folder(tmp_path: Path):
    """Started from any folder, it writes nothing there: the store is the user's one."""
    here, xdg = tmp_path / "somewhere", tmp_path / "xdg"
    here.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    serve = subprocess.Popen(
        [sys.executable, "-m", "ctxd", "serve", "--port", str(port)],
        cwd=here, env={**env, "XDG_DATA_HOME": str(xdg)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _up(url), "the service up", limit=60)
        assert (xdg / "ctxd" / "ctxd.db").exists()
        assert list(here.iterdir()) == []
    finally:
        serve.terminate()
        serve.wait(timeout=30)


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
