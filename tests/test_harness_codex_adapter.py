"""The Codex adapter alone: its payloads (as the real CLI sent them) in ctxd's words, its hook
output, `ctxd hook codex` against a real server, and `ctxd install|uninstall codex` on real
files that already hold someone else's hooks and config."""

import json
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
from ctxd.harness.codex import ADAPTER as CODEX
from ctxd.harness.codex import tool_actions as from_codex
from ctxd.harness.registry import adapter
from ctxd.hookclient.harnesses import HOOKS

from tests.conftest import Server, wait_until

SESSION = "01a233bc-3314-7bf1-84a3-64b2b6c78caf"


def payload(event: str, cwd: Path | str, **fields: object) -> dict[str, object]:
    """A Codex 0.171 hook payload, with the fields it sent for every event."""
    return {
        "session_id": SESSION,
        "transcript_path": f"/home/u/.codex/sessions/2026/12/01/rollout-{SESSION}.jsonl",
        "cwd": str(cwd),
        "hook_event_name": event,
        "model": "gpt-5.5",
        "permission_mode": "bypassPermissions",
        **fields,
    }


def shell(command: str, output: str = "", **tool_input: str) -> dict[str, object]:
    return payload(
        "PostToolUse", "/home/u/repo", turn_id="t1", tool_name="Bash",
        tool_input={"command": command, **tool_input}, tool_response=output,
        tool_use_id="call_0001",
    )  # fmt: skip


def test_registered_as_an_adapter_and_a_command_hook():
    assert adapter("codex") is CODEX and HOOKS["codex"].label == CODEX.label
    assert CODEX.label == "Codex"


def test_shell_calls_become_commands_with_no_exit_status():
    [action] = from_codex(shell("nohup python3 serve.py > s.log 2>&1 &", "started\n"))
    assert action == {
        "kind": "command", "command": "nohup python3 serve.py > s.log 2>&1 &",
        "cwd": "/home/u/repo", "exit_status": None, "duration_s": None,
        "output_tail": "started\n", "background": False, "tool_id": "call_0001",
        "harness": "codex", "refused": None,
    }  # fmt: skip
    # a command that exits 1 reaches the hook as an empty output, like any other
    assert from_codex(shell("false"))[0]["exit_status"] is None
    assert from_codex(shell("make", workdir="build"))[0]["cwd"] == "/home/u/repo/build"
    assert from_codex(shell("make", workdir="/srv/x"))[0]["cwd"] == "/srv/x"
    long = from_codex(shell("echo " + "x" * 20_000, "y" * 10_000))[0]
    assert long["command"].endswith("…[cut]") and long["output_tail"].startswith("…[cut]")


def test_prompts_and_what_is_not_a_command():
    prompt = payload("UserPromptSubmit", "/w", turn_id="t1", prompt="find why it hangs")
    assert from_codex(prompt) == [
        {"kind": "prompt", "text": "find why it hangs", "harness": "codex"}
    ]
    assert from_codex(payload("UserPromptSubmit", "/w", prompt="  ")) == []
    assert from_codex({**shell("ls"), "tool_name": "apply_patch"}) == []
    assert from_codex({**shell("ls"), "hook_event_name": "PreToolUse"}) == []
    assert from_codex({**shell(""), "tool_input": {}}) == []
    assert from_codex("not a payload") == [] and from_codex(None) == []


def test_events_in_ctxd_words():
    kinds = {
        "SessionStart": "start", "UserPromptSubmit": "prompt", "PostToolUse": "tool",
        "PreCompact": "compact", "PostCompact": "other", "Stop": "idle", "SessionEnd": "end",
        "PreToolUse": "other", "Interrupt": "interrupted",
    }  # fmt: skip
    for name, kind in kinds.items():
        event = CODEX.event(payload(name, "/w"))
        assert (event.kind, event.name, event.conversation) == (kind, name, SESSION)
        assert event.transcript_path == ""  # a Codex rollout is not read as a transcript
    for source in ("startup", "resume", "clear", "compact"):
        assert CODEX.event(payload("SessionStart", "/w", source=source)).source == source
    assert CODEX.event(payload("PreCompact", "/w", trigger="auto")).compaction == "auto"
    assert CODEX.event(shell("make")).actions[0]["command"] == "make"
    assert CODEX.event({**shell("make"), "hook_event_name": "Stop"}).actions == ()
    assert HOOKS["codex"].event_name({"hook_event_name": 3}) is None


def test_output_states_the_dump_as_context_and_tells_the_person():
    answer = {"session": "s1", "context": "## Objective\n\nfix it", "message": "recording"}
    said = HOOKS["codex"].output("SessionStart", answer)
    assert said is not None
    assert said["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    context = said["hookSpecificOutput"]["additionalContext"]
    assert context.startswith("[ctxd] Saved working state of session `s1`")
    assert context.endswith("## Objective\n\nfix it")
    assert said["systemMessage"] == "ctxd: recording"
    codex = HOOKS["codex"]
    assert codex.output("PostToolUse", {"context": "x"}) is None  # only where Codex injects
    assert HOOKS["codex"].output("Stop", {}) is None
    assert HOOKS["codex"].trouble("UserPromptSubmit", "down") == {"systemMessage": "ctxd: down"}
    assert HOOKS["codex"].trouble("PostToolUse", "down") is None


def hook(url: str, body: dict[str, object]) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    return subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", url, "hook", "codex"],
        input=json.dumps(body), capture_output=True, text=True, timeout=60, env=environ,
    )  # fmt: skip


def test_hook_runner_records_then_hands_back_the_state_on_resume(server: Server, tmp_path: Path):
    repo = tmp_path / "Train Loop"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    steps = [
        payload("SessionStart", repo, source="startup"),
        payload("UserPromptSubmit", repo, turn_id="t1", prompt="train without running out"),
        {**shell("python3 train.py --lr 3e-4 | tail -1", "loss 0.31\n"), "cwd": str(repo)},
    ]
    for body in steps:
        out = hook(server.url, body)
        assert (out.returncode, out.stdout, out.stderr) == (0, "", ""), out
    # `codex exec resume --last "continue"`: the resume's dump comes with the prompt after it
    back = hook(server.url, payload("SessionStart", repo, source="resume"))
    assert (back.returncode, back.stdout, back.stderr) == (0, "", "")
    go = hook(server.url, payload("UserPromptSubmit", repo, turn_id="t2", prompt="continue"))
    assert go.returncode == 0 and go.stderr == ""
    said = json.loads(go.stdout)["hookSpecificOutput"]
    assert said["hookEventName"] == "UserPromptSubmit"
    dump = said["additionalContext"]
    assert dump.startswith("[ctxd] Saved working state of session `train-loop`")
    assert "train without running out" in dump and "train.py --lr 3e-4" in dump
    assert "“continue”: go on where you left off" in dump
    # the person pressed Esc: where the turn stood is a version of its own, nothing printed
    versions = len(httpx.get(f"{server.url}/api/sessions/train-loop/snapshots").json())
    stop = hook(server.url, payload("Interrupt", repo, turn_id="t2"))
    assert (stop.returncode, stop.stdout, stop.stderr) == (0, "", ""), stop
    after = httpx.get(f"{server.url}/api/sessions/train-loop/snapshots").json()
    assert len(after) == versions + 1
    version = max(v["version"] for v in after)
    newest = httpx.get(f"{server.url}/api/sessions/train-loop/snapshots/{version}")
    assert newest.json()["header"]["note"] == "Codex: the person interrupted the turn"


THEIR_HOOKS = {
    "hooks": {
        "PostToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "audit-log"}]}
        ],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
    }
}
THEIR_CONFIG = """\
# my Codex settings
model = "gpt-5.5"  # the one I like

[mcp_servers.github]
url = "https://example.com/mcp"
"""


def ctxd(home: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "CODEX_"))}
    return subprocess.run(
        [sys.executable, "-m", "ctxd", *args], cwd=cwd,
        env={**environ, "HOME": str(home), **env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_install_merges_is_idempotent_and_uninstall_removes_exactly_ours(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    (home).mkdir()
    work.mkdir()
    hooks, config = codex_home / "hooks.json", codex_home / "config.toml"
    hooks.write_text(json.dumps(THEIR_HOOKS, indent=4))
    config.write_text(THEIR_CONFIG)
    original = hooks.read_text(), config.read_text()
    where = {"CODEX_HOME": str(codex_home)}

    dry = ctxd(home, work, "install", "codex", "--dry-run", **where)
    assert dry.returncode == 0 and "hook codex" in dry.stdout and "[mcp_servers.ctxd]" in dry.stdout
    assert (hooks.read_text(), config.read_text()) == original  # a dry run writes nothing

    done = ctxd(home, work, "install", "codex", **where)
    assert done.returncode == 0, done.stderr
    assert f"updated {hooks}" in done.stdout and f"updated {config}" in done.stdout
    assert "only once you trust it" in done.stdout and "/hooks" in done.stdout
    merged = json.loads(hooks.read_text())["hooks"]
    post = merged["PostToolUse"]
    assert post[0] == THEIR_HOOKS["hooks"]["PostToolUse"][0]  # theirs kept, first
    assert post[1]["matcher"] == "Bash" and post[1]["hooks"][0]["command"].endswith("hook codex")
    assert all("async" not in h for e in merged.values() for x in e for h in x["hooks"])
    assert set(merged) == {
        "SessionStart", "UserPromptSubmit", "PostToolUse", "PreCompact", "PostCompact", "Stop",
        "Interrupt", "SessionEnd",
    }  # fmt: skip
    assert merged["SessionEnd"][0]["hooks"][0]["timeout"] <= 3  # Codex clamps it to 3 s
    text = config.read_text()
    assert text.startswith(THEIR_CONFIG)  # comments and all, untouched
    parsed = tomllib.loads(text)
    assert parsed["model"] == "gpt-5.5"
    assert parsed["mcp_servers"] == {
        "github": {"url": "https://example.com/mcp"},
        "ctxd": {"url": "http://127.0.0.1:8765/mcp"},
    }
    assert hooks.with_name("hooks.json.ctxd-backup").read_text() == original[0]
    assert config.with_name("config.toml.ctxd-backup").read_text() == original[1]
    assert not (home / ".codex").exists()  # CODEX_HOME, not ~/.codex

    once = hooks.read_text(), config.read_text()
    again = ctxd(home, work, "install", "codex", **where)
    assert again.returncode == 0 and "already installed" in again.stdout
    assert (hooks.read_text(), config.read_text()) == once

    moved = ctxd(home, work, "--url", "http://127.0.0.1:9999", "install", "codex", **where)
    assert moved.returncode == 0, moved.stderr
    assert hooks.read_text().count("hook codex") == 8 and "9999 hook codex" in hooks.read_text()
    assert tomllib.loads(config.read_text())["mcp_servers"]["ctxd"] == {
        "url": "http://127.0.0.1:9999/mcp"
    }
    assert config.read_text().count("[mcp_servers.ctxd]") == 1

    gone = ctxd(home, work, "uninstall", "codex", **where)
    assert gone.returncode == 0, gone.stderr
    assert "trust" not in gone.stderr
    assert json.loads(hooks.read_text()) == THEIR_HOOKS
    assert config.read_text() == THEIR_CONFIG
    assert "nothing to remove" in ctxd(home, work, "uninstall", "codex", **where).stdout


def test_user_scope_without_codex_home_and_project_scope(tmp_path: Path):
    home, repo = tmp_path / "home", tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    user = ctxd(home, repo, "install", "codex")
    assert user.returncode == 0, user.stderr
    assert (home / ".codex" / "hooks.json").exists() and (home / ".codex" / "config.toml").exists()

    project = ctxd(home, repo / "src", "--url", "http://127.0.0.1:9999", "install", "codex",
                   "--scope", "project")  # fmt: skip
    assert project.returncode == 0, project.stderr
    assert "trust_level" in project.stdout  # a project's hooks load only in a trusted project
    hooks = json.loads((repo / ".codex" / "hooks.json").read_text())["hooks"]
    assert "--url http://127.0.0.1:9999 hook codex" in hooks["Stop"][0]["hooks"][0]["command"]
    config = tomllib.loads((repo / ".codex" / "config.toml").read_text())
    assert config["mcp_servers"]["ctxd"]["url"] == "http://127.0.0.1:9999/mcp"

    gone = ctxd(home, repo, "uninstall", "codex", "--scope", "project")
    assert gone.returncode == 0, gone.stderr
    assert f"removed {repo / '.codex' / 'hooks.json'}" in gone.stdout
    assert not (repo / ".codex" / "hooks.json").exists()  # created by the install: gone
    assert not (repo / ".codex" / "config.toml").exists()
    assert (home / ".codex" / "hooks.json").exists()  # the user scope's stays


def test_config_it_will_not_touch_or_not_change(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    config = home / ".codex" / "config.toml"

    config.write_text("model = \n")  # not TOML: refused, nothing written
    bad = ctxd(home, work, "install", "codex")
    assert bad.returncode != 0 and "not TOML" in bad.stderr
    assert config.read_text() == "model = \n" and not (home / ".codex" / "hooks.json").exists()

    inline = 'mcp_servers = { github = { url = "https://example.com/mcp" } }\n'
    config.write_text(inline)  # an inline table cannot take ctxd's table
    refused = ctxd(home, work, "install", "codex")
    assert refused.returncode != 0 and "would not fit" in refused.stderr
    assert config.read_text() == inline

    theirs = '[mcp_servers.ctxd]\nurl = "http://10.0.0.2:8765/mcp"\n'
    config.write_text(theirs)  # a ctxd server the user wrote: left as it is
    kept = ctxd(home, work, "install", "codex")
    assert kept.returncode == 0, kept.stderr
    assert config.read_text() == theirs
    assert ctxd(home, work, "uninstall", "codex").returncode == 0
    assert config.read_text() == theirs

    (home / ".codex" / "hooks.json").write_text('{"hooks": []}')
    odd = ctxd(home, work, "install", "codex")
    assert odd.returncode != 0 and "'hooks' is not an object" in odd.stderr


def test_a_launch_codex_ended_with_its_command_says_so(rooted_server: Server, tmp_path: Path):
    """Codex ends a command's process group as the command returns: a plain `nohup … &` goes
    with it, no error in its log. Its attempt says why (as ctxd sees it here: the launch's
    group ended at once, as Codex ends it); a `setsid` launch is no such case."""
    work = tmp_path / "svc"
    work.mkdir()
    client = httpx.Client(base_url=rooted_server.url, timeout=60)

    def send(event: dict[str, object]) -> dict:
        answer = client.post("/api/hooks/codex", json={"payload": event})
        answer.raise_for_status()
        return dict(answer.json())

    send(payload("UserPromptSubmit", work, turn_id="t0", prompt="Start the mock server"))
    line = "nohup python3 -c 'import time; time.sleep(300)' --serve > serve.log 2>&1 &"
    shell_of_codex = subprocess.Popen(["bash", "-c", line], cwd=work, start_new_session=True)
    shell_of_codex.wait(timeout=30)
    os.killpg(shell_of_codex.pid, signal.SIGTERM)  # what Codex does as the command returns
    send(payload("PostToolUse", work, turn_id="t1", tool_name="Bash",
                 tool_input={"command": line}, tool_response="", tool_use_id="call_1"))  # fmt: skip

    def row() -> str:
        dump = client.get("/api/sessions/svc/resume").text
        rows = [r for r in dump.splitlines() if r.startswith("| **attempt 1**")]
        return rows[0] if rows and "running" not in rows[0] else ""

    said = wait_until(row, "the attempt seen to end")
    assert "Codex ends a command's process group" in said and "setsid nohup" in said, said
    assert CODEX.left_behind("setsid nohup python3 serve.py > s.log 2>&1 &") is None
