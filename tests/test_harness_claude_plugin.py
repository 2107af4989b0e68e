"""ctxd as a Claude Code plugin (`integrations/claude-code/`): the same hooks and MCP server
`ctxd install claude` registers, the real CLI loading the folder with `--plugin-dir`, adding the
folder as a marketplace (its `.claude-plugin/marketplace.json`) and installing ctxd from it, and
ctxd wired twice (plugin and `ctxd install`) acting once per event."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from ctxd import __version__
from ctxd.harness import claude
from ctxd.harness.files import MCP_NAME
from ctxd.store.database import Store

from tests.conftest import Server, wait_until
from tests.scripted_model import ScriptedModel, Step
from tests.test_harness_claude import CLAUDE

PLUGIN = Path(__file__).resolve().parents[1] / "integrations" / "claude-code"
MARKETPLACE = PLUGIN / ".claude-plugin" / "marketplace.json"
PROMPT = "Find out why the nightly export writes an empty CSV."


def test_the_plugin_registers_what_install_registers():
    manifest = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "ctxd" and manifest["version"] == __version__
    hooks = json.loads((PLUGIN / "hooks" / "hooks.json").read_text())
    # one source of truth: the block `ctxd install claude` merges, with `ctxd` from PATH
    assert hooks["hooks"] == claude.config("ctxd hook claude")["hooks"]
    servers = json.loads((PLUGIN / ".mcp.json").read_text())["mcpServers"]
    assert servers == {MCP_NAME: {"type": "http", "url": "http://127.0.0.1:8765/mcp"}}


def test_the_marketplace_lists_this_folder_as_the_plugin():
    market = json.loads(MARKETPLACE.read_text())
    manifest = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())
    # what Claude Code's marketplace schema requires: a kebab-case name, an owner, the plugins
    assert re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", market["name"]) and market["owner"]["name"]
    (entry,) = market["plugins"]
    assert entry["name"] == manifest["name"]
    assert (MARKETPLACE.parents[1] / entry["source"]).resolve() == PLUGIN  # this very folder
    assert entry["description"] == manifest["description"]  # said alike before and after
    assert entry.get("version", manifest["version"]) == manifest["version"]


def claude_env(home: Path, bin_dir: Path, server: Server, model: ScriptedModel) -> dict[str, str]:
    """Claude Code offline against `model`, with this installation's ctxd as `ctxd` on PATH
    (the plugin's hooks call it so, as a user's would)."""
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "ctxd"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m ctxd "$@"\n')
    shim.chmod(0o755)
    return {
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


def run_claude(args: list[str], work: Path, env: dict[str, str]) -> None:
    argv = [str(CLAUDE), *args, "--dangerously-skip-permissions", "--output-format", "json"]
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


# A tool call's hooks run asynchronously, and `claude -p` ends the ones still running when it
# exits: a last step that takes a moment leaves the call before it the time to report.
STAY = Step(bash="sleep 2; ls")

needs_claude = pytest.mark.skipif(
    not CLAUDE.exists(), reason="Claude Code not installed (`make test` does, with npm)"
)


@needs_claude
def test_claude_code_adds_the_marketplace_and_installs_ctxd_from_it(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "ANTHROPIC_"))},
        "HOME": str(home),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }

    def plugin(*args: str) -> str:
        done = subprocess.run(
            [str(CLAUDE), "plugin", *args], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return done.stdout

    checked = plugin("validate", str(PLUGIN))  # the marketplace file, by Claude Code's schema
    assert "Validation passed" in checked and "warning" not in checked.lower(), checked
    plugin("marketplace", "add", str(PLUGIN))  # what `/plugin marketplace add` does
    plugin("install", "ctxd@ctxd")
    (ours,) = [p for p in json.loads(plugin("list", "--json")) if p["id"] == "ctxd@ctxd"]
    assert ours["enabled"] and ours["version"] == __version__
    assert ours["mcpServers"] == {MCP_NAME: {"type": "http", "url": "http://127.0.0.1:8765/mcp"}}
    details = plugin("details", "ctxd@ctxd")
    hooks = next(line for line in details.splitlines() if line.strip().startswith("Hooks"))
    assert f"Hooks ({len(claude.config('x')['hooks'])})" in hooks
    assert all(event in hooks for event in claude.config("x")["hooks"])


@needs_claude
def test_claude_code_loads_the_plugin_folder_and_its_hooks_reach_ctxd(
    server: Server, tmp_path: Path
):
    home, work = tmp_path / "home", tmp_path / "exporter"
    for folder in (home, work):
        folder.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    model = ScriptedModel([Step(bash="echo rows=0 > export.log"), STAY, Step(text="Empty.")])
    env = claude_env(home, tmp_path / "bin", server, model)
    try:
        run_claude(["-p", PROMPT, "--plugin-dir", str(PLUGIN)], work, env)
    finally:
        model.close()

    # UserPromptSubmit ran `ctxd hook claude`: the session of this checkout has the objective
    sessions = httpx.get(f"{server.url}/api/sessions", timeout=10).json()
    ours = [s for s in sessions if s["id"] == "exporter"]
    assert ours, sessions

    def dump_with_the_command() -> str:  # PostToolUse is asynchronous: it may land after exit
        dump = httpx.get(f"{server.url}/api/sessions/exporter/resume", timeout=30).text
        return dump if "echo rows=0" in dump else ""

    dump = wait_until(dump_with_the_command, "the tool call's record", limit=60)
    assert PROMPT in dump
    assert "echo rows=0 > export.log" in dump


@needs_claude
def test_ctxd_wired_twice_by_its_plugin_and_by_install_acts_once_per_event(
    server: Server, tmp_path: Path
):
    home, work = tmp_path / "home", tmp_path / "exporter"
    for folder in (home, work):
        folder.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    model = ScriptedModel(
        [Step(bash="echo rows=0 > export.log"), STAY, Step(text="Empty."), Step(text="On it.")]
    )
    env = claude_env(home, tmp_path / "bin", server, model)
    # ctxd's hooks in the user's settings (this installation's path) and in the plugin
    # (`ctxd` from PATH): two commands, so Claude Code runs both for every event
    installed = subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", server.url, "install", "claude"],
        capture_output=True, text=True, env=env, cwd=work, timeout=60,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    try:
        run_claude(["-p", PROMPT, "--plugin-dir", str(PLUGIN)], work, env)
        run_claude(["--continue", "-p", "continue", "--plugin-dir", str(PLUGIN)], work, env)
    finally:
        model.close()
    # the resume's dump once, though both hooks asked for it
    context = model.context_of_last_turn()
    assert context.count("## Handover") == 1, context
    assert "echo rows=0 > export.log" in context
    # the tool call recorded once, though both hooks reported it
    store = Store(server.data_dir / "ctxd.db")
    commands = [a["command"] for a in store.list_actions("exporter", "command")]
    assert commands.count("echo rows=0 > export.log") == 1, commands


@needs_claude
def test_a_subagent_claude_code_starts_is_handed_the_dump(server: Server, tmp_path: Path):
    """The Agent tool starts a subagent with none of the conversation: ctxd's SubagentStart
    hook hands it the session's dump, which the subagent's first request to the model holds."""
    home, work = tmp_path / "home", tmp_path / "exporter"
    for folder in (home, work):
        folder.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    task = "Read export.log and say how many rows it wrote."
    # a pause as a model's between tool calls: the calls before it are registered
    # asynchronously, and a loaded machine starts their hook processes late
    model = ScriptedModel([Step(bash="echo rows=0 > export.log"), Step(bash="sleep 2"),
                           Step(agent=task), Step(text="It wrote 0 rows."), STAY,
                           Step(text="Empty.")])  # fmt: skip
    env = claude_env(home, tmp_path / "bin", server, model)
    try:
        run_claude(["-p", PROMPT, "--plugin-dir", str(PLUGIN)], work, env)
    finally:
        model.close()
    (first,) = [body for body in model.requests
                if task in ScriptedModel.texts(body["messages"][0])]  # fmt: skip
    handed = "\n".join(ScriptedModel.texts(m) for m in first["messages"])
    assert "# exporter · v" in handed, handed[-3000:]  # the dump, its title line
    assert PROMPT in handed and "echo rows=0 > export.log" in handed
