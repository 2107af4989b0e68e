"""`ctxd install|uninstall claude` on real settings files that already hold other hooks."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import start_server, stop_server

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


def ctxd(
    home: Path, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`ctxd ARGS` as a user whose HOME is `home`, with no CTXD_* or XDG_* of this machine."""
    mine = {k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "XDG_"))}
    return subprocess.run(
        [sys.executable, "-m", "ctxd", *args], cwd=cwd,
        env={**mine, "HOME": str(home), **(env or {})}, capture_output=True, text=True, timeout=60,
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
    # Claude Code posts a tool call itself (no process per event); SessionStart, which may
    # start ctxd, stays a command
    posted = "http://127.0.0.1:8765/api/hooks/claude/http"
    assert post[1]["hooks"][0] == {"type": "http", "timeout": 30, "url": posted}
    start = merged["hooks"]["SessionStart"][0]["hooks"][0]
    assert start["type"] == "command" and start["command"].endswith("hook claude")
    assert {"SessionStart", "UserPromptSubmit", "PreCompact"} <= set(merged["hooks"])
    servers = json.loads(mcp.read_text())["mcpServers"]
    assert servers["github"] == THEIR_MCP["mcpServers"]["github"]
    assert servers["ctxd"] == {"type": "http", "url": "http://127.0.0.1:8765/mcp"}
    assert (settings.with_name("settings.json.ctxd-backup")).read_text() == original[0]
    # the backup is named among what it did
    assert f"kept the file as it was in {settings}.ctxd-backup" in done.stdout, done.stdout

    once = settings.read_text(), mcp.read_text()
    again = ctxd(home, work, "install", "claude")
    assert again.returncode == 0 and "already installed" in again.stdout
    assert (settings.read_text(), mcp.read_text()) == once

    gone = ctxd(home, work, "uninstall", "claude")
    assert gone.returncode == 0, gone.stderr
    assert f"restored {settings}" in gone.stdout
    assert (settings.read_text(), mcp.read_text()) == original  # byte for byte
    assert not list(home.rglob("*.ctxd-backup"))  # the backups, once restored, are gone
    assert "nothing to remove" in ctxd(home, work, "uninstall", "claude").stdout


def test_uninstall_after_the_person_edited_the_file_leaves_no_backup(tmp_path: Path):
    """Edited since the install: uninstall takes ctxd's entries out of the file as it is now and
    removes the backup, older than the person's edits (it would stay for good otherwise)."""
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".claude").mkdir(parents=True)
    work.mkdir()
    settings = home / ".claude" / "settings.json"
    settings.write_text(json.dumps(THEIRS, indent=4))
    ctxd(home, work, "install", "claude").check_returncode()
    edited = json.loads(settings.read_text())
    edited["model"] = "sonnet"  # the person's edit, after the install
    settings.write_text(json.dumps(edited))
    gone = ctxd(home, work, "uninstall", "claude")
    assert gone.returncode == 0, gone.stderr
    assert f"cleaned {settings}" in gone.stdout and "removed the backup" in gone.stdout
    left = json.loads(settings.read_text())
    assert left["model"] == "sonnet" and "ctxd" not in settings.read_text()
    assert not list(home.rglob("*.ctxd-backup"))


def test_project_scope_and_files_it_will_not_touch(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "repo"
    (work / "src").mkdir(parents=True)
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    done = ctxd(home, work / "src", "--url", "http://127.0.0.1:9999", "install", "claude",
                "--scope", "project")  # fmt: skip
    assert done.returncode == 0, done.stderr
    # the hooks name this machine's ctxd: in the personal file, never the one a team shares
    assert not (work / ".claude" / "settings.json").exists()
    hooks = json.loads((work / ".claude" / "settings.local.json").read_text())["hooks"]
    assert hooks["Stop"][0]["hooks"][0]["url"] == "http://127.0.0.1:9999/api/hooks/claude/http"
    start = hooks["SessionStart"][0]["hooks"][0]["command"]
    assert "--url http://127.0.0.1:9999 hook claude" in start
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
    assert "FIX  no agent harness is wired to ctxd" in before.stdout
    assert "→ `ctxd install`" in before.stdout
    down = ctxd(home, work, "--url", "http://127.0.0.1:9", "doctor")
    assert down.returncode == 1 and "start it: `ctxd serve --port 9`" in down.stdout
    ctxd(home, work, "--url", server.url, "install", "claude").check_returncode()
    after = ctxd(home, work, "--url", server.url, "doctor")
    assert after.returncode == 0, after.stdout
    assert f"ok   Claude Code (user): ctxd's hooks and MCP server call {server.url}" in after.stdout


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
    commands = [h.get("command", h.get("url", ""))
                for entries in json.loads(settings.read_text())["hooks"].values()
                for e in entries for h in e["hooks"]]  # fmt: skip
    assert commands and not any("-m service" in c for c in commands)
    posted = [c for c in commands if c.endswith("/api/hooks/claude/http")]
    assert len(posted) == 10  # one per event Claude Code posts itself, once
    commands = [c for c in commands if c not in posted]
    assert all(c.endswith(("hook claude", "hook claude --wake")) for c in commands)
    assert sum(1 for c in commands if c.endswith("hook claude")) == 1  # SessionStart's; the
    # other eight events Claude Code posts itself
    assert sum(1 for c in commands if c.endswith("hook claude --wake")) == 2  # launch, turn end


def test_project_install_moves_hooks_an_earlier_ctxd_put_in_the_shared_settings(tmp_path):
    home, work = tmp_path / "home", tmp_path / "repo"
    (work / ".claude").mkdir(parents=True)
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    old = f"{sys.executable} -m ctxd hook claude"
    shared = work / ".claude" / "settings.json"
    entry = {"hooks": [{"type": "command", "command": old}]}
    shared.write_text(json.dumps({"model": "opus", "hooks": {"Stop": [entry]}}))

    done = ctxd(home, work, "install", "claude", "--scope", "project")
    assert done.returncode == 0, done.stderr
    assert json.loads(shared.read_text()) == {"model": "opus"}  # the team's file: theirs only
    local = json.loads((work / ".claude" / "settings.local.json").read_text())
    assert local["hooks"]["SessionStart"][0]["hooks"][0]["command"].endswith("hook claude")


def test_round_trip_with_another_url_in_a_fresh_home(server, tmp_path: Path):
    """Installed for a non-default URL: the hooks and the MCP server call it, doctor checks
    that URL and is green, and uninstall leaves every file as it was, byte for byte: the
    existing one restored, the created ones gone, no backup left."""
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".claude").mkdir(parents=True)
    work.mkdir()
    settings, mcp = home / ".claude" / "settings.json", home / ".claude.json"
    settings.write_text('{\n    "model": "opus"\n}\n')  # the user's own layout
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}

    env_url = {"CTXD_URL": server.url}
    done = ctxd(home, work, "install", "claude", env=env_url)
    assert done.returncode == 0, done.stderr
    assert f"updated {settings}" in done.stdout and f"created {mcp}" in done.stdout
    commands = {
        h.get("command", h.get("url"))
        for entries in json.loads(settings.read_text())["hooks"].values()
        for e in entries
        for h in e["hooks"]
    }
    # this installation's interpreter running its hook client by its path: no `ctxd` command
    hook = f"{sys.executable} -S -I {HOOK_CLIENT} --url {server.url} hook claude"
    assert commands == {hook, f"{hook} --wake", f"{server.url}/api/hooks/claude/http"}
    assert json.loads(mcp.read_text())["mcpServers"]["ctxd"]["url"] == server.url + "/mcp"

    # doctor without CTXD_URL still checks the URL the hooks call, and finds it up
    doctor = ctxd(home, work, "doctor")
    assert f"ok   service at {server.url}" in doctor.stdout, doctor.stdout
    assert f"ok   Claude Code (user): ctxd's hooks and MCP server call {server.url}" in (
        doctor.stdout
    )
    doctor = ctxd(home, work, "doctor", env=env_url)
    assert doctor.returncode == 0, doctor.stdout

    gone = ctxd(home, work, "uninstall", "claude", env=env_url)
    assert gone.returncode == 0, gone.stderr
    assert f"restored {settings}" in gone.stdout and f"removed {mcp}" in gone.stdout
    after = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    assert after == before


def test_doctor_tells_another_installations_hooks_and_a_disagreeing_mcp_server(server, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".claude").mkdir(parents=True)
    work.mkdir()
    ctxd(home, work, "--url", server.url, "install", "claude").check_returncode()
    settings, mcp = home / ".claude" / "settings.json", home / ".claude.json"
    other = "/opt/other-venv/lib/python3.11/site-packages/ctxd/hookclient/__main__.py"
    settings.write_text(settings.read_text().replace(str(HOOK_CLIENT), other))
    doctor = ctxd(home, work, "--url", server.url, "doctor")
    assert doctor.returncode == 1
    assert "FIX  Claude Code (user): not this installation's ctxd" in doctor.stdout
    assert other in doctor.stdout  # what differs, said

    ctxd(home, work, "--url", server.url, "install", "claude").check_returncode()
    mcp.write_text(mcp.read_text().replace(server.url, "http://127.0.0.1:9"))
    doctor = ctxd(home, work, "--url", server.url, "doctor")
    assert doctor.returncode == 1 and "127.0.0.1:9/mcp" in doctor.stdout, doctor.stdout


HARNESS_BIN = Path(__file__).resolve().parents[1] / ".harness" / "node_modules" / ".bin"
HOOK_CLIENT = Path(__file__).resolve().parents[1] / "service/ctxd/hookclient/__main__.py"


def test_install_with_no_harness_named_wires_each_one_found(tmp_path: Path):
    """The real harness CLIs (npm-installed for the end-to-end tests) on PATH: each is found
    and wired, and `uninstall` with no name takes ctxd out of each again."""
    from ctxd.harness.registry import MODULES, adapter

    found = [n for n in MODULES if (HARNESS_BIN / adapter(n).program).exists()]
    if not found:
        pytest.skip("no harness CLI installed (make test installs them with npm)")
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    path = {"PATH": f"{HARNESS_BIN}{os.pathsep}{os.environ['PATH']}", "CODEX_HOME": ""}
    done = ctxd(home, work, "install", env=path)
    assert done.returncode == 0, done.stderr
    for name in found:
        assert f"{adapter(name).label}: created" in done.stdout, done.stdout
    gone = ctxd(home, work, "uninstall", env=path)
    assert gone.returncode == 0, gone.stderr
    assert not [p for p in home.rglob("*") if p.is_file()], gone.stdout  # as it was: empty
    bare = tmp_path / "bare"
    bare.mkdir()
    nothing = ctxd(bare, work, "install", env={"PATH": os.path.dirname(sys.executable)})
    # nothing done is an error, saying where it looked
    assert nothing.returncode == 2 and "no agent harness found" in nothing.stderr
    assert "Claude Code: `claude` on PATH or " in nothing.stderr, nothing.stderr
    assert str(bare / ".config" / "opencode") in nothing.stderr


def test_a_harness_is_found_by_its_settings_folder_without_its_program_on_path(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    path = {"PATH": os.path.dirname(sys.executable), "CODEX_HOME": ""}
    done = ctxd(home, work, "install", env=path)
    assert done.returncode == 0, done.stderr
    assert "Codex: created" in done.stdout, done.stdout
    assert not (home / ".claude").exists()  # only what is there is wired


def test_a_hook_installed_with_a_token_file_reaches_a_service_that_wants_the_token(tmp_path):
    """CTXD_TOKEN_FILE at install goes into the hook command: the harness that runs the hook
    carries no CTXD_* variable, and its events still reach the service."""
    token = "t0ken-for-the-hook-" + "x" * 16
    held = tmp_path / "token"
    held.write_text(token + "\n")
    held.chmod(0o600)
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", env={"CTXD_TOKEN": token})
    try:
        home, work = tmp_path / "home", tmp_path / "work"
        home.mkdir()
        work.mkdir()
        given = {"CTXD_URL": server.url, "CTXD_TOKEN_FILE": str(held)}
        ctxd(home, work, "install", "claude", env=given).check_returncode()
        settings = json.loads((home / ".claude" / "settings.json").read_text())
        command = settings["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
        assert f"--token-file {held}" in command and token not in command

        payload = {"hook_event_name": "UserPromptSubmit", "session_id": "c1", "cwd": str(work),
                   "prompt": "find why the server hangs after loading its weights"}  # fmt: skip
        harness_env = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
        ran = subprocess.run(
            shlex.split(command), input=json.dumps(payload), env=harness_env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert ran.returncode == 0 and "ctxd" not in ran.stderr, ran.stderr
        listed = httpx.get(
            server.url + "/api/sessions", headers={"Authorization": f"Bearer {token}"}
        )
        assert [s["id"] for s in listed.json()] == ["work"]
    finally:
        stop_server(server)


def test_install_and_doctor_speak_json_for_scripts(server, tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    done = ctxd(home, work, "--url", server.url, "install", "claude", "--json")
    said = json.loads(done.stdout)
    assert [h["harness"] for h in said] == ["claude"]
    assert {what for _, what in said[0]["files"]} == {"created"}
    doctor = ctxd(home, work, "--json", "--url", server.url, "doctor")
    findings = json.loads(doctor.stdout)
    assert doctor.returncode == 0 and all(f["ok"] for f in findings)
    assert any("Claude Code (user)" in f["what"] for f in findings)


def test_the_cli_takes_a_token_file(tmp_path: Path):
    token = "cli-token-" + "y" * 20
    held = tmp_path / "token"
    held.write_text(token + "\n")
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", env={"CTXD_TOKEN": token})
    try:
        home = tmp_path / "home"
        home.mkdir()
        refused = ctxd(home, tmp_path, "--url", server.url, "sessions")
        assert refused.returncode != 0
        listed = ctxd(home, tmp_path, "--url", server.url, "--token-file", str(held), "sessions")
        assert listed.returncode == 0, listed.stderr
        by_env = ctxd(home, tmp_path, "--url", server.url, "sessions",
                      env={"CTXD_TOKEN_FILE": str(held)})  # fmt: skip
        assert by_env.returncode == 0, by_env.stderr
    finally:
        stop_server(server)


def test_install_follows_no_planted_link_and_refuses_a_settings_path_that_is_no_file(tmp_path):
    home, work = tmp_path / "home", tmp_path / "repo"
    (work / ".claude").mkdir(parents=True)
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    # links planted where a temporary file of the next installs could be (another account's
    # doing, in a folder it may write): none is followed, their target stays as it was
    target = tmp_path / "precious"
    target.write_text("untouched\n")
    for pid in range(os.getpid(), os.getpid() + 400):
        (work / ".claude" / f".settings.local.json.{pid}.tmp").symlink_to(target)
    done = ctxd(home, work, "--url", "http://127.0.0.1:9999", "install", "claude",
                "--scope", "project")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "untouched\n"
    settings = work / ".claude" / "settings.local.json"
    assert not settings.is_symlink() and "hook claude" in settings.read_text()
    # a FIFO where the settings file should be: refused at once, not waited on forever
    fifo = home / ".claude" / "settings.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    refused = ctxd(home, work, "install", "claude")
    assert refused.returncode == 2 and "is not a regular file" in refused.stderr, refused.stderr
