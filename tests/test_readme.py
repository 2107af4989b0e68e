"""The README's shell blocks, run as written against a fresh server: the tour with the `ctxd`
of this installation, the HTTP examples with curl (only the port is this server's)."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def block_after(heading: str) -> list[str]:
    """The commands of the first ```sh block under a heading, continuation lines joined and
    comments dropped."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    body = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert body, f"no shell block under {heading!r}"
    joined = body.group(1).replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def test_the_tour_runs_as_written(server, tmp_path: Path):
    env = {**os.environ, "CTXD_URL": server.url}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    said = {}
    for line in block_after("## A five-minute tour"):
        assert line.startswith(("ctxd ", "echo ")), line
        # the tour's log is written where it says, under this test's folder
        line = line.replace("/tmp/ctxd-demo.log", str(tmp_path / "ctxd-demo.log"))
        ran = subprocess.run(
            line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert ran.returncode == 0, f"{line}\n{ran.stdout}\n{ran.stderr}"
        said[shlex.split(line)[1]] = ran.stdout
    assert "find why the server hangs after loading its weights" in said["resume"]
    assert "tp 8 with CUDA graphs" in said["resume"]
    assert "retry with --disable-cuda-graph" in said["diff"]
    # the tour writes the log it watches: its dump shows the line, not "no such file"
    assert "Capturing CUDA graphs" in said["resume"] and "no such file" not in said["resume"]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_http_examples_answer_2xx(server, tmp_path: Path):
    port = server.url.rsplit(":", 1)[1]
    for line in block_after("### HTTP API and MCP"):
        assert line.startswith("curl "), line
        command = line.replace("localhost:8765", f"localhost:{port}")
        ran = subprocess.run(
            f"{command} -o /dev/null -w '%{{http_code}}'", shell=True, cwd=tmp_path,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert ran.stdout.startswith("2"), f"{line}: HTTP {ran.stdout} {ran.stderr}"
