"""`ctxd install|uninstall claude` on real settings files that already hold other hooks."""

import json
import os
import subprocess
import sys
from pathlib import Path

THEIRS = {
    "model": "opus",
    "hooks": {
        "PostToolUse": [
            {"matcher": "Edit", "hooks": [{"type": "command", "command": "prettier --write"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
    },
}
THEIR_MCP = {"mcpServers": {"github": {"type": "http", "url": "https://example.com/mcp"}}}


def ctxd(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "ctxd", *args], cwd=cwd, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_install_merges_is_idempotent_and_uninstall_removes_exactly_ours(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".claude").mkdir(parents=True)
    work.mkdir()
    settings, mcp = home / ".claude" / "settings.json", home / ".claude.json"
    settings.write_text(json.dumps(THEIRS, indent=4))
    mcp.write_text(json.dumps(THEIR_MCP))
    original = settings.read_text(), mcp.read_text()

    dry = ctxd(home, work, "install", "claude", "--dry-run")
    assert dry.returncode == 0 and "+" in dry.stdout and "hook claude" in dry.stdout
    assert (settings.read_text(), mcp.read_text()) == original  # a dry run writes nothing

    done = ctxd(home, work, "install", "claude")
    assert done.returncode == 0, done.stderr
    merged = json.loads(settings.read_text())
    assert merged["model"] == "opus"
    post = merged["hooks"]["PostToolUse"]
    assert post[0] == THEIRS["hooks"]["PostToolUse"][0]  # theirs kept, first
    assert post[1]["hooks"][0]["command"].endswith("hook claude")
    assert post[1]["hooks"][0]["async"] is True
    assert {"SessionStart", "UserPromptSubmit", "PreCompact"} <= set(merged["hooks"])
    servers = json.loads(mcp.read_text())["mcpServers"]
    assert servers["github"] == THEIR_MCP["mcpServers"]["github"]
    assert servers["ctxd"] == {"type": "http", "url": "http://127.0.0.1:8765/mcp"}
    assert (settings.with_name("settings.json.ctxd-backup")).read_text() == original[0]

    once = settings.read_text(), mcp.read_text()
    again = ctxd(home, work, "install", "claude")
    assert again.returncode == 0 and "already installed" in again.stdout
    assert (settings.read_text(), mcp.read_text()) == once

    gone = ctxd(home, work, "uninstall", "claude")
    assert gone.returncode == 0, gone.stderr
    assert json.loads(settings.read_text()) == THEIRS
    assert json.loads(mcp.read_text()) == THEIR_MCP
    assert "nothing to remove" in ctxd(home, work, "uninstall", "claude").stdout


def test_project_scope_and_files_it_will_not_touch(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "repo"
    (work / "src").mkdir(parents=True)
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    done = ctxd(home, work / "src", "--url", "http://127.0.0.1:9999", "install", "claude",
                "--scope", "project")  # fmt: skip
    assert done.returncode == 0, done.stderr
    hooks = json.loads((work / ".claude" / "settings.json").read_text())["hooks"]
    assert "--url http://127.0.0.1:9999 hook claude" in hooks["Stop"][0]["hooks"][0]["command"]
    mcp = json.loads((work / ".mcp.json").read_text())
    assert mcp["mcpServers"]["ctxd"]["url"] == "http://127.0.0.1:9999/mcp"
    assert not (home / ".claude").exists()

    broken = work / ".claude" / "settings.json"
    broken.write_text("{ not json")
    refused = ctxd(home, work, "install", "claude", "--scope", "project")
    assert refused.returncode == 2 and "is not JSON" in refused.stderr
    assert broken.read_text() == "{ not json"


def test_doctor_says_what_to_fix_then_that_all_is_well(server, tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    before = ctxd(home, work, "--url", server.url, "doctor")
    assert before.returncode == 1
    assert f"ok   service at {server.url}" in before.stdout
    assert (
        "FIX  Claude Code hooks: none" in before.stdout and "ctxd install claude" in before.stdout
    )
    down = ctxd(home, work, "--url", "http://127.0.0.1:9", "doctor")
    assert down.returncode == 1 and "start it: `ctxd serve`" in down.stdout
    ctxd(home, work, "--url", server.url, "install", "claude").check_returncode()
    after = ctxd(home, work, "--url", server.url, "doctor")
    assert after.returncode == 0, after.stdout
    assert "ok   Claude Code hook (user)" in after.stdout and "MCP server 'ctxd'" in after.stdout


def test_install_replaces_the_hooks_of_an_earlier_version_that_ran_python_m_service(tmp_path):
    """Before the package was called `ctxd`, install wrote `python -m service … hook claude`;
    that module is gone, so a new install must replace those entries, not add beside them."""
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".claude").mkdir(parents=True)
    work.mkdir()
    old = f"{sys.executable} -m service --url http://127.0.0.1:8765 hook claude"
    entry = {"hooks": [{"type": "command", "command": old, "timeout": 60}]}
    settings = home / ".claude" / "settings.json"
    settings.write_text(json.dumps({"hooks": {"UserPromptSubmit": [entry], "Stop": [entry]}}))

    done = ctxd(home, work, "install", "claude")
    assert done.returncode == 0, done.stderr
    commands = [h["command"] for entries in json.loads(settings.read_text())["hooks"].values()
                for e in entries for h in e["hooks"]]  # fmt: skip
    assert commands and not any("-m service" in c for c in commands)
    assert all(c.endswith("hook claude") for c in commands)
    assert sum(1 for c in commands if c.endswith("hook claude")) == 7  # one per event, once
