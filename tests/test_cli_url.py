"""One story for where the service is: `--url` before or after the command, a bare port as this
machine's, `ctxd serve` on the port CTXD_URL names, the exact command that starts the service
a call could not reach, and doctor's word when the CLI and the hooks call different services."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import Server, free_port
from tests.test_install import ctxd as as_user


def test_url_goes_before_or_after_the_command_and_a_bare_port_is_this_machines(
    server: Server, tmp_path: Path
):
    port = server.url.rsplit(":", 1)[1]
    for argv in (["--url", port, "sessions"], ["sessions", "--url", port],
                 ["sessions", "--json", "--url", server.url]):  # fmt: skip
        done = as_user(tmp_path, tmp_path, *argv)
        assert done.returncode == 0, (argv, done.stderr)
    by_variable = as_user(tmp_path, tmp_path, "sessions", env={"CTXD_URL": port})
    assert by_variable.returncode == 0, by_variable.stderr


def test_a_call_that_reaches_nothing_says_the_command_that_starts_that_service(tmp_path: Path):
    port = free_port()
    done = as_user(tmp_path, tmp_path, "sessions", "--url", str(port))
    assert done.returncode != 0
    assert f"start it with `ctxd serve --port {port}`" in done.stderr, done.stderr


def test_serve_listens_on_the_port_ctxd_url_names(tmp_path: Path):
    port = free_port()
    mine = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    env = {**mine, "CTXD_URL": f"127.0.0.1:{port}", "HOME": str(tmp_path)}
    served = subprocess.Popen(
        [sys.executable, "-m", "ctxd", "serve", "--data-dir", str(tmp_path / "data")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline, answer = time.monotonic() + 30, None
        while time.monotonic() < deadline and answer is None:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            except httpx.HTTPError:
                time.sleep(0.1)
        assert answer is not None and answer.status_code == 200
        # and the CLI, reading the same variable, reaches it with no --url
        assert as_user(tmp_path, tmp_path, "sessions", env={"CTXD_URL": str(port)}).returncode == 0
    finally:
        served.send_signal(signal.SIGTERM)
        served.wait(timeout=15)


def test_doctor_says_when_the_cli_and_the_hooks_call_different_services(
    server: Server, tmp_path: Path
):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".claude").mkdir(parents=True)
    work.mkdir()
    as_user(home, work, "install", "claude", "--url", server.url).check_returncode()
    elsewhere = f"http://127.0.0.1:{free_port()}"
    doctor = as_user(home, work, "doctor", "--url", elsewhere)
    assert doctor.returncode == 1
    assert f"FIX  this CLI talks to {elsewhere}, but the hooks of claude call {server.url}" in (
        doctor.stdout
    ), doctor.stdout
    assert f"→ export CTXD_URL={server.url}" in doctor.stdout
    agreed = as_user(home, work, "doctor", "--url", server.url)
    assert agreed.returncode == 0 and "this CLI talks to" not in agreed.stdout, agreed.stdout
