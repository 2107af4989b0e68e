"""A newcomer's first hour as one walk: a fresh HOME holding only the harnesses' settings
folders, no harness program on PATH, the service on a port of its own that CTXD_URL names as a
bare number; install (first in a home with no harness at all), doctor before and after the
service starts, a CLI that does not reach the hooks' service, `--url` and `--json` on either
side of a command, the README's tour, uninstall. Each step asserts what the person sees."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import free_port
from tests.test_install import ctxd as as_user
from tests.test_readme import block_after

FOLDERS = (".claude", ".codex", ".gemini", ".config/opencode")
LABELS = ("Claude Code", "Codex", "Gemini CLI", "opencode")


def test_the_first_hour_takes_no_wrong_turn(tmp_path: Path):
    home, work, data = tmp_path / "home", tmp_path / "work", tmp_path / "data"
    for folder in FOLDERS:
        (home / folder).mkdir(parents=True)
    work.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # the service's port as a bare number; no harness program on PATH, only ctxd's
    env = {"PATH": os.path.dirname(sys.executable), "CODEX_HOME": "", "CTXD_URL": str(port)}

    # 0. a home with no harness at all: install fails, saying where it looked
    bare = tmp_path / "bare-home"
    bare.mkdir()
    nothing = as_user(bare, work, "install", env=env)
    assert nothing.returncode == 2 and nothing.stdout == "", nothing
    assert "no agent harness found" in nothing.stderr
    for label, folder in zip(LABELS, FOLDERS, strict=True):
        assert f"{label}: `" in nothing.stderr and str(bare / folder) in nothing.stderr
    assert not any(bare.iterdir())  # nothing written

    # 1. install finds each harness by its settings folder and says what it wrote
    installed = as_user(home, work, "install", env=env)
    assert installed.returncode == 0, installed.stderr
    for label in LABELS:
        assert f"{label}: created" in installed.stdout, installed.stdout

    # 2. doctor with the service down: the exact command that starts it on this port
    down = as_user(home, work, "doctor", env=env)
    assert down.returncode == 1
    assert f"start it: `ctxd serve --port {port}`" in down.stdout, down.stdout

    # 3. `ctxd serve` takes its port from CTXD_URL; doctor then finds nothing to fix
    served = subprocess.Popen(
        [sys.executable, "-m", "ctxd", "serve", "--data-dir", str(data)],
        env={**os.environ, **env, "HOME": str(home), "PATH": os.environ["PATH"]},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "ctxd serve did not come up on CTXD_URL's port"
            time.sleep(0.1)
        well = as_user(home, work, "doctor", env=env)
        assert well.returncode == 0, well.stdout
        assert "FIX" not in well.stdout and f"ok   service at {url}" in well.stdout, well.stdout
        for label in LABELS:
            assert f"ok   {label} (user): ctxd's hooks" in well.stdout, well.stdout

        # a shell without CTXD_URL: the CLI would talk to the default port, not the hooks'
        plain = {k: v for k, v in env.items() if k != "CTXD_URL"}
        apart = as_user(home, work, "doctor", env=plain)
        assert apart.returncode == 1
        assert "this CLI talks to http://127.0.0.1:8765, but the hooks of" in apart.stdout
        assert f"call {url}" in apart.stdout and f"export CTXD_URL={url}" in apart.stdout

        # --url (a bare port) and --json, before or after the command
        for argv in (["sessions", "--url", str(port), "--json"],
                     ["--json", "--url", str(port), "sessions"]):  # fmt: skip
            listed = as_user(home, work, *argv, env=plain)
            assert listed.returncode == 0, listed.stderr
            assert isinstance(json.loads(listed.stdout), list)
        table = as_user(home, work, "sessions", "--url", url, env=plain)
        assert table.returncode == 0 and not table.stdout.lstrip().startswith("["), table

        # 4. the README's tour, as written (its log under this test's folder)
        said = {}
        for line in block_after("## A five-minute tour"):
            line = line.replace("/tmp/ctxd-demo.log", str(work / "ctxd-demo.log"))
            ran = subprocess.run(
                line, shell=True, cwd=work, capture_output=True, text=True, timeout=60,
                env={**os.environ, **env, "HOME": str(home)},
            )  # fmt: skip
            assert ran.returncode == 0, f"{line}\n{ran.stdout}\n{ran.stderr}"
            said[shlex.split(line)[1]] = ran.stdout
        assert "Capturing CUDA graphs" in said["resume"] and "no such file" not in said["resume"]
        assert "retry with --disable-cuda-graph" in said["diff"]
    finally:
        served.send_signal(signal.SIGTERM)
        served.wait(timeout=15)

    # 5. uninstall leaves HOME as it was: the four empty folders, no backup, no plugin folder
    gone = as_user(home, work, "uninstall", env=env)
    assert gone.returncode == 0, gone.stderr
    left = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert left == sorted({*FOLDERS, ".config"}), (left, gone.stdout)
