"""`ctxd install|uninstall opencode` on real config folders that already hold other settings:
the plugin file in place, the MCP entry in the 1.x or the 2.0 form the file uses, nothing of
theirs changed, idempotent, a dry run writes nothing, uninstall removes exactly ours."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

THEIRS = {
    "$schema": "https://opencode.ai/config.json",
    "model": "anthropic/claude-sonnet-4-5",
    "plugin": ["opencode-wakatime"],
    "mcp": {"github": {"type": "remote", "url": "https://example.com/mcp", "enabled": True}},
}
THEIRS_V2 = {
    "$schema": "https://opencode.ai/config.json",
    "mcp": {"servers": {"docs": {"type": "local", "command": ["docs-mcp"]}}, "timeout": 5000},
}


def ctxd(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "XDG_"))}
    return subprocess.run(
        [sys.executable, "-m", "ctxd", *args], cwd=cwd, env={**env, "HOME": str(home)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_user_scope_install_is_idempotent_and_uninstall_removes_exactly_ours(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    folder = home / ".config" / "opencode"
    (folder / "plugins").mkdir(parents=True)
    work.mkdir()
    config, plugin = folder / "opencode.json", folder / "plugins" / "ctxd.js"
    config.write_text(json.dumps(THEIRS, indent=4))
    other_plugin = folder / "plugins" / "theirs.js"
    other_plugin.write_text("export const Theirs = async () => ({})\n")
    original = config.read_text()

    dry = ctxd(home, work, "install", "opencode", "--dry-run")
    assert dry.returncode == 0 and '"ctxd"' in dry.stdout and "CtxdPlugin" in dry.stdout
    assert config.read_text() == original and not plugin.exists()  # a dry run writes nothing

    done = ctxd(home, work, "install", "opencode")
    assert done.returncode == 0, done.stderr
    assert f"created {plugin}" in done.stdout and f"updated {config}" in done.stdout
    merged = json.loads(config.read_text())
    assert {k: v for k, v in merged.items() if k != "mcp"} == {
        k: v for k, v in THEIRS.items() if k != "mcp"
    }
    assert merged["mcp"]["github"] == THEIRS["mcp"]["github"]
    assert merged["mcp"]["ctxd"] == {
        "type": "remote", "url": "http://127.0.0.1:8765/mcp", "enabled": True, "oauth": False,
    }  # fmt: skip
    assert plugin.read_text().startswith("// ctxd for opencode")
    assert config.with_name("opencode.json.ctxd-backup").read_text() == original

    once = config.read_text(), plugin.read_text()
    again = ctxd(home, work, "install", "opencode")
    assert again.returncode == 0 and "already installed" in again.stdout
    assert (config.read_text(), plugin.read_text()) == once

    gone = ctxd(home, work, "uninstall", "opencode")
    assert gone.returncode == 0, gone.stderr
    assert f"removed {plugin}" in gone.stdout
    assert json.loads(config.read_text()) == THEIRS and not plugin.exists()
    assert other_plugin.exists()
    assert "nothing to remove" in ctxd(home, work, "uninstall", "opencode").stdout


def test_project_scope_follows_the_2_0_form_and_bakes_in_the_url(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "repo"
    (work / "src").mkdir(parents=True)
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    config = work / "opencode.json"
    config.write_text(json.dumps(THEIRS_V2))
    url = "http://127.0.0.1:9999"
    done = ctxd(home, work / "src", "--url", url, "install", "opencode", "--scope", "project")
    assert done.returncode == 0, done.stderr
    mcp = json.loads(config.read_text())["mcp"]
    assert mcp["servers"]["docs"] == THEIRS_V2["mcp"]["servers"]["docs"]
    assert mcp["servers"]["ctxd"]["url"] == f"{url}/mcp" and "ctxd" not in mcp
    assert mcp["timeout"] == 5000
    plugin = work / ".opencode" / "plugins" / "ctxd.js"
    assert f'const DEFAULT_URL = "{url}"' in plugin.read_text()
    assert not (home / ".config").exists()  # the user's settings untouched

    ctxd(home, work, "uninstall", "opencode", "--scope", "project").check_returncode()
    assert json.loads(config.read_text()) == THEIRS_V2 and not plugin.exists()


def test_files_it_will_not_touch(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    folder = home / ".config" / "opencode"
    (folder / "plugins").mkdir(parents=True)
    work.mkdir()
    theirs = folder / "plugins" / "ctxd.js"
    theirs.write_text("// someone else's ctxd.js\n")
    refused = ctxd(home, work, "install", "opencode")
    assert refused.returncode == 2 and "is not ctxd's plugin" in refused.stderr
    assert theirs.read_text() == "// someone else's ctxd.js\n"
    assert ctxd(home, work, "uninstall", "opencode").returncode == 0
    assert theirs.exists()

    theirs.unlink()
    commented = folder / "opencode.jsonc"
    commented.write_text('{\n  // my settings\n  "model": "x"\n}\n')
    refused = ctxd(home, work, "install", "opencode")
    assert refused.returncode == 2 and "opencode.jsonc is not JSON" in refused.stderr
    assert commented.read_text().startswith("{\n  // my settings")


def test_the_installed_plugin_is_a_module_node_can_load(tmp_path: Path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed; loading the plugin needs Node 18 or later")
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    ctxd(home, work, "--url", "http://127.0.0.1:9", "install", "opencode").check_returncode()
    plugin = home / ".config" / "opencode" / "plugins" / "ctxd.js"
    # opencode calls every export as a plugin: exactly one, and it builds its hooks
    probe = (
        f"const m = await import({json.dumps(plugin.as_uri())});"
        "const hooks = await m.CtxdPlugin({directory: '/', worktree: '/'});"
        "console.log(JSON.stringify([Object.keys(m), Object.keys(hooks).sort()]))"
    )
    done = subprocess.run(
        [node, "--input-type=module", "-e", probe], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    exports, hooks = json.loads(done.stdout)
    assert exports == ["CtxdPlugin"]
    assert {"event", "chat.message", "tool.execute.after"} <= set(hooks)


def test_doctor_checks_the_opencode_plugin_only_once_installed(server, tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    before = ctxd(home, work, "--url", server.url, "doctor").stdout
    assert "opencode (" not in before  # not installed: not checked
    ctxd(home, work, "--url", server.url, "install", "opencode").check_returncode()
    after = ctxd(home, work, "--url", server.url, "doctor").stdout
    assert f"ok   opencode (user): ctxd's hooks and MCP server call {server.url}" in after
    config = home / ".config" / "opencode" / "opencode.json"
    config.write_text(config.read_text().replace(server.url, "http://127.0.0.1:9"))
    elsewhere = ctxd(home, work, "--url", server.url, "doctor").stdout
    assert "FIX  opencode (user): not this installation's ctxd" in elsewhere
    assert "127.0.0.1:9/mcp" in elsewhere  # the MCP server that disagrees, named
    ctxd(home, work, "--url", server.url, "install", "opencode").check_returncode()
    plugin = home / ".config" / "opencode" / "plugins" / "ctxd.js"
    plugin.write_text(plugin.read_text().replace("CtxdPlugin", "OldCtxdPlugin"))
    stale = ctxd(home, work, "--url", server.url, "doctor").stdout
    assert "FIX  opencode (user): not this installation's ctxd" in stale
    assert "reinstalling changes " + str(plugin) in stale


def test_a_0600_config_behind_a_symlink_stays_0600_and_a_link(tmp_path: Path):
    home, work, dotfiles = tmp_path / "home", tmp_path / "work", tmp_path / "dotfiles"
    folder = home / ".config" / "opencode"
    folder.mkdir(parents=True)
    work.mkdir()
    dotfiles.mkdir()
    real = dotfiles / "opencode.json"
    real.write_text(json.dumps(THEIRS))
    real.chmod(0o600)
    link = folder / "opencode.json"
    link.symlink_to(real)
    done = ctxd(home, work, "install", "opencode")
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and link.resolve() == real
    assert "ctxd" in json.loads(real.read_text())["mcp"]
    assert real.stat().st_mode & 0o777 == 0o600


def test_the_baked_in_url_is_one_js_string_literal_whatever_it_holds():
    from ctxd.harness import opencode

    url = 'http://127.0.0.1:8765/a"b\\c\nd'
    line = next(x for x in opencode.plugin_text(url).splitlines() if "DEFAULT_URL =" in x)
    assert json.loads(line.split(" = ", 1)[1]) == url
