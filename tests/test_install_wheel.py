"""A regular install: the wheel holds one top-level package, `ctxd`, and nothing else; put into
a fresh virtual environment with the dependencies its own metadata names (no PYTHONPATH, no
checkout), its `ctxd` command starts, serves a page, writes a dump and answers a hook."""

import json
import os
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "service" / "ctxd"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
         "-w", str(dist), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    # a quiet build (what `make run` prints first): every folder of data is a package of its own
    assert "absent from the `packages` configuration" not in built.stdout + built.stderr
    return next(dist.glob("ctxd-*.whl"))


def test_the_wheel_holds_ctxd_alone_and_all_of_it(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"ctxd", "ctxd-0.1.0.dist-info"}
    modules = {str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")}
    assert modules <= set(names), sorted(modules - set(names))  # no package left out
    assert "ctxd/templates/dump.md.j2" in names and "ctxd/integrations/opencode/ctxd.js" in names


@pytest.mark.timeout(1800)  # its dependencies may come from the package registry
def test_the_wheel_in_a_fresh_environment_serves_dumps_and_hooks(wheel: Path, tmp_path: Path):
    target = tmp_path / "venv"
    venv.create(target, with_pip=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HOME"] = str(tmp_path / "home")
    env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
    # its dependencies come from the wheel's own metadata, not from this environment
    installed = subprocess.run(
        [str(target / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    if installed.returncode and "No matching distribution" in installed.stderr:
        pytest.skip("the package registry is out of reach: " + installed.stderr[-300:])
    assert installed.returncode == 0, installed.stderr[-3000:]
    ctxd = target / "bin" / "ctxd"

    def run(*args: str, **more: object) -> subprocess.CompletedProcess:
        return subprocess.run([str(ctxd), *args], capture_output=True, text=True, cwd=tmp_path,
                              env=env, timeout=120, **more)  # type: ignore[call-overload]  # fmt: skip

    assert run("--version").stdout.strip() == "ctxd 0.1.0"
    where = subprocess.run(
        [str(target / "bin" / "python"), "-c",
         "import ctxd, ctxd.render.markdown as r, ctxd.harness.opencode as o, "
         "ctxd.harness.adapter as a; print(ctxd.__file__); print(r.TEMPLATES); "
         "print(o.plugin_source()); print(a.hook_command('claude', 'http://h:1').split()[3])"],
        capture_output=True, text=True, check=True, cwd=tmp_path, env=env,
    ).stdout.split()  # fmt: skip
    site = str(target)
    assert all(w.startswith(site) for w in where), where  # not the checkout's
    plugin = run("install", "opencode", "--dry-run")
    assert plugin.returncode == 0 and "CtxdPlugin" in plugin.stdout, plugin.stderr

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = ["serve", "--port", str(port), "--data-dir", str(tmp_path / "d")]
    server = subprocess.Popen([str(ctxd), *serve], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        httpx.put(f"{url}/api/sessions/wheel", json={"objective": "installed"}).raise_for_status()
        taken = run("--url", url, "snapshot", "wheel")
        assert taken.returncode == 0, taken.stderr
        assert "installed" in (tmp_path / "d" / "wheel" / "latest.md").read_text()
        page = httpx.get(f"{url}/s/wheel/v/1", timeout=30)
        assert page.status_code == 200 and "<html" in page.text.lower()
        event = {"hook_event_name": "UserPromptSubmit", "session_id": "c1", "prompt": "continue",
                 "cwd": str(tmp_path), "transcript_path": ""}  # fmt: skip
        hooked = run("--url", url, "hook", "claude", input=json.dumps(event))
        assert hooked.returncode == 0, hooked.stderr
        context = json.loads(hooked.stdout)["hookSpecificOutput"]["additionalContext"]
        assert context.startswith("[ctxd] Saved working state of session")
        # the command an install writes: the wheel's interpreter, its hook client by its path
        direct = subprocess.run(
            [str(target / "bin" / "python"), "-S", "-I", where[3], "--url", url, "hook", "claude"],
            input=json.dumps({**event, "prompt": "fix the flaky test"}), capture_output=True,
            text=True, cwd=tmp_path, env=env, timeout=120,
        )  # fmt: skip
        assert (direct.returncode, direct.stdout, direct.stderr) == (0, "", "")
        prompts = httpx.get(f"{url}/api/sessions", timeout=30).json()
        assert any(s["objective"] == "fix the flaky test" for s in prompts), prompts
    finally:
        server.terminate()
        server.wait(timeout=30)
