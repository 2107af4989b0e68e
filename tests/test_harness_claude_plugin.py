"""ctxd as a Claude Code plugin (`integrations/claude-code/`): the same hooks and MCP server
`ctxd install claude` registers, and the real CLI loading the folder with `--plugin-dir`."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from ctxd import __version__
from ctxd.harness import claude
from ctxd.harness.files import MCP_NAME

from tests.conftest import Server
from tests.scripted_model import ScriptedModel, Step
from tests.test_harness_claude import CLAUDE

PLUGIN = Path(__file__).resolve().parents[1] / "integrations" / "claude-code"
PROMPT = "Find out why the nightly export writes an empty CSV."


def test_the_plugin_registers_what_install_registers():
    manifest = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "ctxd" and manifest["version"] == __version__
    hooks = json.loads((PLUGIN / "hooks" / "hooks.json").read_text())
    # one source of truth: the block `ctxd install claude` merges, with `ctxd` from PATH
    assert hooks["hooks"] == claude.config("ctxd hook claude")["hooks"]
    servers = json.loads((PLUGIN / ".mcp.json").read_text())["mcpServers"]
    assert servers == {MCP_NAME: {"type": "http", "url": "http://127.0.0.1:8765/mcp"}}


@pytest.mark.skipif(
    not CLAUDE.exists(), reason="Claude Code not installed (`make test` does, with npm)"
)
def test_claude_code_loads_the_plugin_folder_and_its_hooks_reach_ctxd(
    server: Server, tmp_path: Path
):
    home, work, bin_dir = tmp_path / "home", tmp_path / "exporter", tmp_path / "bin"
    for folder in (home, work, bin_dir):
        folder.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    # the plugin calls `ctxd` from PATH: this installation's, as a user's would be
    shim = bin_dir / "ctxd"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m ctxd "$@"\n')
    shim.chmod(0o755)
    model = ScriptedModel([Step(bash="echo rows=0 > export.log"), Step(text="Empty export.")])
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "ANTHROPIC_"))},
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "CTXD_URL": server.url,
        "CTXD_AUTOSTART": "0",
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-ant-scripted-model",
        "IS_SANDBOX": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    argv = [str(CLAUDE), "-p", PROMPT, "--plugin-dir", str(PLUGIN),
            "--dangerously-skip-permissions", "--output-format", "json"]  # fmt: skip
    try:
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=240)
    finally:
        model.close()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    # UserPromptSubmit ran `ctxd hook claude`: the session of this checkout has the objective
    sessions = httpx.get(f"{server.url}/api/sessions", timeout=10).json()
    ours = [s for s in sessions if s["id"] == "exporter"]
    assert ours, sessions
    dump = ""
    for _ in range(50):  # PostToolUse is asynchronous: its record may land just after exit
        dump = httpx.get(f"{server.url}/api/sessions/exporter/resume", timeout=30).text
        if "echo rows=0" in dump:
            break
        time.sleep(0.2)
    assert PROMPT in dump
    assert "echo rows=0 > export.log" in dump
