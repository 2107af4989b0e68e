"""The opencode plugin's own `node --test` suite, run from pytest so CI runs it too."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN_DIR = Path(__file__).resolve().parents[1] / "integrations" / "opencode"


def test_opencode_plugin_under_node_test_runner():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed; the opencode plugin's tests need Node 18 or later")
    done = subprocess.run(
        [node, "--test", f"{PLUGIN_DIR}{os.sep}"],
        capture_output=True, text=True, timeout=300, cwd=PLUGIN_DIR.parents[1],
        env={**os.environ, "CTXD_PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "# fail 0" in done.stdout and "# pass 11" in done.stdout
