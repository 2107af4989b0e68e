"""`ctxd install|uninstall opencode` on real config folders that already hold other settings:
the plugin file in place, the MCP entry in the 1.x or the 2.0 form the file uses (a file with
none: the installed opencode's form), nothing of theirs changed, idempotent, a dry run writes
nothing, uninstall removes exactly ours."""

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


def ctxd(home: Path, cwd: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "XDG_"))}
    env = {**env, "HOME": str(home), **({"PATH": path} if path is not None else {})}
    return subprocess.run(
        [sys.executable, "-m", "ctxd", *args], cwd=cwd, env=env,
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
    assert not plugin.parent.exists()  # the plugins folder made for it goes with it


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
    # opencode 1.x calls the named export (older loaders) or the default export's server, 2.x
    # the default export's setup: the two exports, and the 1.x plugin builds its hooks
    probe = (
        f"const m = await import({json.dumps(plugin.as_uri())});"
        "const hooks = await m.CtxdPlugin({directory: '/', worktree: '/'});"
        "const d = m.default;"
        "console.log(JSON.stringify([Object.keys(m).sort(), Object.keys(hooks).sort(),"
        " [d.id, typeof d.setup, d.server === m.CtxdPlugin]]))"
    )
    done = subprocess.run(
        [node, "--input-type=module", "-e", probe], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    exports, hooks, definition = json.loads(done.stdout)
    assert exports == ["CtxdPlugin", "default"]
    assert {"event", "chat.message", "tool.execute.after"} <= set(hooks)
    assert {"experimental.chat.system.transform", "experimental.session.compacting"} <= set(hooks)
    assert definition == ["ctxd", "function", True]


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


def fake_opencode(where: Path, package: str | None, version: str) -> str:
    """A folder for PATH holding an `opencode` command: a link into an npm package of that
    name and version (as `npm install -g` leaves it), or, with no package, a native binary
    that says its version (as opencode 2's installer leaves it). Nothing runs it but ctxd."""
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True)
    script = f"#!/bin/sh\necho {version}\n"
    if package is None:
        (bin_dir / "opencode").write_text(script)
        (bin_dir / "opencode").chmod(0o755)
    else:
        root = where / "lib" / "node_modules" / package
        (root / "bin").mkdir(parents=True)
        meta = {"name": package, "version": version, "bin": {"opencode": "./bin/opencode"}}
        (root / "package.json").write_text(json.dumps(meta))
        (root / "bin" / "opencode").write_text("#!/bin/sh\nexit 3\n")  # not asked: read
        (root / "bin" / "opencode").chmod(0o755)
        (bin_dir / "opencode").symlink_to(root / "bin" / "opencode")
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.parametrize(
    ("package", "version", "form"),
    [
        ("@opencode/cli", "2.0.22", "2.x"),  # npm's opencode 2
        (None, "2.1.3", "2.x"),  # opencode 2's installer: a native binary, asked
        ("opencode-ai", "1.18.33", "1.x"),
        (None, "1.18.33", "1.x"),
        (None, "", "1.x"),  # says no version: the form both read
        ("opencode-ai", "1.17.2", "1.x"),
    ],
)
def test_a_new_config_gets_the_form_the_installed_opencode_reads(
    tmp_path: Path, package: str | None, version: str, form: str
):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    path = fake_opencode(tmp_path / "opencode", package, version)
    folder = home / ".config" / "opencode"
    config, plugin = folder / "opencode.json", folder / "plugins" / "ctxd.js"
    done = ctxd(home, work, "install", "opencode", path=path)
    assert done.returncode == 0, done.stderr
    # an opencode older than the plugin's known floor is said, with what to do
    assert ("note: opencode 1.17.2 is older than 1.18.29" in done.stdout) == (version == "1.17.2")
    mcp = json.loads(config.read_text())["mcp"]
    ours = mcp["servers"]["ctxd"] if form == "2.x" else mcp["ctxd"]
    assert ours["url"] == "http://127.0.0.1:8765/mcp" and len(mcp) == 1
    # in the plugin folder both read, named by no `plugin` or `plugins` key (a second load)
    assert plugin.read_text().startswith("// ctxd for opencode")
    assert set(json.loads(config.read_text())) == {"mcp"}
    assert "already installed" in ctxd(home, work, "install", "opencode", path=path).stdout
    ctxd(home, work, "uninstall", "opencode", path=path).check_returncode()
    assert not config.exists() and not plugin.exists()


def test_a_config_in_one_form_keeps_it_whatever_opencode_is_installed(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    folder = home / ".config" / "opencode"
    folder.mkdir(parents=True)
    config = folder / "opencode.json"
    v2 = fake_opencode(tmp_path / "v2", "@opencode/cli", "2.0.22")
    v1 = fake_opencode(tmp_path / "v1", "opencode-ai", "1.18.33")

    config.write_text(json.dumps(THEIRS))  # 1.x form, opencode 2 installed: 2 reads it
    ctxd(home, work, "install", "opencode", path=v2).check_returncode()
    assert json.loads(config.read_text())["mcp"]["ctxd"]["type"] == "remote"
    ctxd(home, work, "uninstall", "opencode", path=v2).check_returncode()
    assert json.loads(config.read_text()) == THEIRS

    config.write_text(json.dumps(THEIRS_V2))  # the 2.x form stays the 2.x form
    ctxd(home, work, "install", "opencode", path=v1).check_returncode()
    assert "ctxd" in json.loads(config.read_text())["mcp"]["servers"]
    ctxd(home, work, "uninstall", "opencode", path=v1).check_returncode()
    assert json.loads(config.read_text()) == THEIRS_V2

    # installed by ctxd for 1.x, reinstalled after opencode 2 came: the 2.x form
    config.write_text("{}")
    ctxd(home, work, "install", "opencode", path=v1).check_returncode()
    assert set(json.loads(config.read_text())["mcp"]) == {"ctxd"}
    ctxd(home, work, "install", "opencode", path=v2).check_returncode()
    assert json.loads(config.read_text())["mcp"] == {
        "servers": {"ctxd": json.loads(config.read_text())["mcp"]["servers"]["ctxd"]}
    }
