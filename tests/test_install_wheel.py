"""A regular install (a wheel, not the editable checkout) starts, serves a page and writes a
dump: the templates (and the opencode plugin) travel inside the package."""

import os
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

import httpx

from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[1]


def test_a_wheel_installed_elsewhere_serves_pages_and_dumps(tmp_path: Path):
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path / "dist"), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("ctxd-*.whl"))
    target = tmp_path / "venv"
    venv.create(target, with_pip=False)
    # The wheel goes into the new environment; its dependencies come from this one's
    # site-packages (PYTHONPATH skips the .pth that makes the checkout importable).
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run(
        [str(target / "bin" / "python"), "-c", purelib], capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, str(wheel)],
        check=True, timeout=300,
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    ctxd = target / "bin" / "python"
    where = subprocess.run(
        [str(ctxd), "-c", "import ctxd.render.markdown as r; print(r.TEMPLATES)"],
        capture_output=True, text=True, check=True, cwd=tmp_path, env=env,
    ).stdout.strip()  # fmt: skip
    assert where.startswith(site), where  # not the checkout's templates
    # the opencode plugin travels too: `ctxd install opencode` copies it from the package
    (tmp_path / "home").mkdir()
    plugin = subprocess.run(
        [str(ctxd), "-m", "ctxd", "install", "opencode", "--dry-run"],
        capture_output=True, text=True, cwd=tmp_path, env={**env, "HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert plugin.returncode == 0 and "CtxdPlugin" in plugin.stdout, plugin.stderr
    source = "import ctxd.harness.opencode_install as o; print(o.plugin_source())"
    shipped = subprocess.run(
        [str(ctxd), "-c", source], capture_output=True, text=True, cwd=tmp_path, env=env
    ).stdout.strip()
    assert shipped.startswith(site), shipped
    port = free_port()
    serve = ["-m", "ctxd", "serve", "--port", str(port), "--data-dir", str(tmp_path / "d")]
    server = subprocess.Popen(
        [str(ctxd), *serve], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        httpx.put(f"{url}/api/sessions/wheel", json={"objective": "installed"}).raise_for_status()
        taken = httpx.post(f"{url}/api/sessions/wheel/snapshots", timeout=30)
        assert taken.status_code == 201, taken.text
        assert "installed" in (tmp_path / "d" / "wheel" / "latest.md").read_text()
        page = httpx.get(f"{url}/s/wheel/v/1", timeout=30)
        assert page.status_code == 200 and "<html" in page.text.lower()
    finally:
        server.terminate()
        server.wait(timeout=30)
