"""The Gemini CLI adapter alone: its payloads (as the real CLI sent them) in ctxd's words, the
guard on its every-request PreCompress, its hook output, `ctxd hook gemini` against a real
server, and `ctxd install|uninstall gemini` on a real settings.json that already holds
someone else's settings, hooks and MCP servers."""

import json
import os
import subprocess
import sys
from pathlib import Path

from ctxd.discovery.procscan import is_excluded
from ctxd.harness.gemini import ADAPTER as GEMINI
from ctxd.harness.gemini import CompactionGuard, Gemini
from ctxd.harness.gemini import tool_actions as from_gemini
from ctxd.harness.registry import adapter
from ctxd.hookclient.harnesses import HOOKS

from tests.conftest import Server

SESSION = "058d2a9d-cbbd-4bd0-b848-bc6a8d3c0dd9"


def payload(event: str, cwd: Path | str, **fields: object) -> dict[str, object]:
    """A Gemini CLI 0.61 hook payload, with the fields it sent for every event."""
    return {
        "session_id": SESSION,
        "transcript_path": f"/home/u/.gemini/tmp/repo/chats/session-2026-12-02T00-34-{SESSION[:8]}"
        ".jsonl",
        "cwd": str(cwd),
        "hook_event_name": event,
        "timestamp": "2026-12-02T00:35:00.693Z",
        **fields,
    }  # fmt: skip


def shell(command: str, llm_content: str, **tool_input: object) -> dict[str, object]:
    return payload(
        "AfterTool", "/home/u/repo", tool_name="run_shell_command",
        tool_input={"command": command, **tool_input},
        tool_response={"llmContent": llm_content, "returnDisplay": "…"},
    )  # fmt: skip


def result(*lines: str) -> str:
    """A shell tool's text as Gemini writes it for the model."""
    return "<untrusted_context>\n" + "\n".join(lines) + "\n</untrusted_context>"


def test_registered_as_an_adapter_and_a_command_hook():
    assert adapter("gemini") is GEMINI and HOOKS["gemini"].label == GEMINI.label
    assert GEMINI.label == "Gemini CLI" and GEMINI.program == "gemini"


def test_shell_calls_become_commands_with_their_exit_status():
    sent = result("Output: started", "Background PIDs: 11053", "Process Group PGID: 11051")
    [action] = from_gemini(shell("nohup python3 serve.py > s.log 2>&1 &", sent))
    assert action == {
        "kind": "command", "command": "nohup python3 serve.py > s.log 2>&1 &",
        "cwd": "/home/u/repo", "exit_status": 0, "duration_s": None, "output_tail": "started",
        "background": False, "tool_id": None, "harness": "gemini", "refused": None,
    }  # fmt: skip
    failed = result(
        "Output: make: *** [wheel] Error 2\nmore", "Exit Code: 2", "Process Group PGID: 7"
    )
    [made] = from_gemini(shell("make", failed))
    assert (made["exit_status"], made["output_tail"]) == (2, "make: *** [wheel] Error 2\nmore")
    killed = result("Output: (empty)", "Signal: 9", "Process Group PGID: 7")
    [slept] = from_gemini(shell("sleep 9", killed))
    assert (slept["exit_status"], slept["output_tail"]) == (None, "")
    spawn = result("Output: (empty)", "Error: spawn bash ENOENT")
    assert from_gemini(shell("x", spawn))[0]["exit_status"] is None
    moved = "Command moved to background (PID: 42). Output hidden. Press Ctrl+B to view."
    [bg] = from_gemini(shell("python3 serve.py", moved, is_background=True))
    assert bg["background"] is True and bg["exit_status"] is None and bg["output_tail"] == moved
    cancelled = "Command was cancelled by user before it could complete. There was no output."
    assert from_gemini(shell("make", cancelled))[0]["exit_status"] is None
    assert from_gemini(shell("make", cancelled))[0]["refused"] is None  # it ran, then stopped
    assert from_gemini(shell("make", result("Output: ok"), dir_path="build"))[0]["cwd"] == (
        "/home/u/repo/build"
    )
    long = from_gemini(shell("echo " + "x" * 20_000, result("Output: " + "y" * 10_000)))[0]
    assert long["command"].endswith("…[cut]") and long["output_tail"].startswith("…[cut]")


def test_the_lead_of_its_context_says_how_gemini_shows_it():
    said = HOOKS["gemini"].output("BeforeAgent", {"session": "s", "context": "# s\n"})
    assert said is not None
    lead = said["hookSpecificOutput"]["additionalContext"].split("\n", 1)[0]
    assert lead.endswith("less-than sign in it as &lt; and each greater-than sign as &gt;:"
                         " a command holding them runs with the signs.")  # fmt: skip
    assert "<" not in lead and ">" not in lead  # Gemini would rewrite the signs themselves
    other = HOOKS["codex"].output("UserPromptSubmit", {"session": "s", "context": "# s\n"})
    assert other is not None and "&lt;" not in other["hookSpecificOutput"]["additionalContext"]


def test_a_command_gemini_blocked_or_cancelled_before_its_start_is_one_it_never_ran():
    """Gemini CLI 0.61 runs no command with `$(…)` or backticks (its shell tool's text, as
    the real CLI sent it when driven offline here): the agent asked, nothing ran."""
    line = "WEIGHTS_TOKEN=$(cat ~/.token) nohup python3 serve.py > s.log 2>&1 &"
    blocked = payload(
        "AfterTool", "/home/u/repo", tool_name="run_shell_command",
        tool_input={"command": line},
        tool_response={
            "llmContent": "Command injection detected: command substitution syntax ($(),"
            " backticks, <() or >()) found in command arguments. On PowerShell, @() array"
            " subexpressions and $() subexpressions are also blocked. This is a security risk"
            " and the command was blocked.",
            "returnDisplay": "Blocked: command substitution detected in shell command.",
        },
    )  # fmt: skip
    [action] = from_gemini(blocked)
    assert action["refused"] == "Blocked: command substitution detected in shell command."
    assert action["exit_status"] is None and action["command"] == line
    before = "Command was cancelled by user before it could start."
    assert from_gemini(shell("make", before))[0]["refused"] == "…"  # its returnDisplay


def test_file_edits_and_what_is_not_an_action():
    edit = payload(
        "AfterTool", "/home/u/repo", tool_name="replace",
        tool_input={"file_path": "src/a.py", "old_string": "a", "new_string": "b"},
        tool_response={"llmContent": "Successfully modified file", "returnDisplay": "…"},
    )  # fmt: skip
    assert from_gemini(edit) == [
        {"kind": "file_edit", "path": "/home/u/repo/src/a.py", "tool": "replace",
         "cwd": "/home/u/repo", "harness": "gemini"}
    ]  # fmt: skip
    wrote = {**edit, "tool_name": "write_file", "tool_input": {"file_path": "/etc/x.conf"}}
    assert from_gemini(wrote)[0]["path"] == "/etc/x.conf"
    failed = {**edit, "tool_response": {"llmContent": "no match", "error": {"message": "x"}}}
    assert from_gemini(failed) == []
    assert from_gemini({**shell("ls", "x"), "tool_name": "read_file"}) == []
    assert from_gemini({**shell("ls", "x"), "hook_event_name": "BeforeTool"}) == []
    assert from_gemini({**shell("", "x"), "tool_input": {}}) == []
    assert from_gemini("not a payload") == [] and from_gemini(None) == []


def test_events_in_ctxd_words():
    kinds = {
        "SessionStart": "start", "BeforeAgent": "prompt", "AfterTool": "tool",
        "AfterAgent": "idle", "SessionEnd": "end", "BeforeModel": "other",
        "BeforeTool": "other", "Notification": "other",
    }  # fmt: skip
    for name, kind in kinds.items():
        event = GEMINI.event(payload(name, "/w"))
        assert (event.kind, event.name, event.conversation) == (kind, name, SESSION)
        assert event.transcript_path == ""  # Gemini's session JSONL is not read as one
    for source in ("startup", "resume", "clear"):
        assert GEMINI.event(payload("SessionStart", "/w", source=source)).source == source
    assert GEMINI.event(payload("SessionStart", "/w", source="compress")).source == "compact"
    assert GEMINI.event(shell("make", result("Output: ok"))).actions[0]["command"] == "make"
    assert GEMINI.event({**shell("make", "x"), "hook_event_name": "AfterAgent"}).actions == ()
    assert HOOKS["gemini"].event_name({"hook_event_name": 3}) is None


def test_the_prompt_is_read_without_the_context_gemini_put_before_it():
    said = "<hook_context>[ctxd] Saved working state … 2&gt;&amp;1</hook_context>\n\ncontinue"
    assert GEMINI.event(payload("BeforeAgent", "/w", prompt=said)).prompt == "continue"
    twice = "<hook_context>a</hook_context>\n\n<hook_context>b\nc</hook_context>\n\nfix it"
    assert GEMINI.event(payload("BeforeAgent", "/w", prompt=twice)).prompt == "fix it"
    plain = "why does <hook_context> hang"
    assert GEMINI.event(payload("BeforeAgent", "/w", prompt=plain)).prompt == plain


def test_an_automatic_precompress_is_a_compaction_once_per_guard_period():
    """Gemini fires PreCompress (auto) before every model request: ctxd takes the first of a
    conversation for a compaction, then none until the period has passed; `/compress`
    (manual) always compresses and is a compaction each time."""
    gemini = Gemini()
    auto = [gemini.event(payload("PreCompress", "/w", trigger="auto")) for _ in range(20)]
    assert [e.kind for e in auto] == ["compact"] + ["other"] * 19
    assert auto[0].compaction == "auto"
    manual = [gemini.event(payload("PreCompress", "/w", trigger="manual")) for _ in range(2)]
    assert [e.kind for e in manual] == ["compact", "compact"]
    other = gemini.event({**payload("PreCompress", "/w", trigger="auto"), "session_id": "s2"})
    assert other.kind == "compact"  # another conversation has its own

    guard = CompactionGuard(every_s=0.0)  # a period over at once: every one is due
    assert guard.due("c") and guard.due("c")


def test_output_states_the_dump_as_context_and_tells_the_person():
    answer = {"session": "s1", "context": "## Objective\n\nfix it", "message": "recording"}
    for event in ("SessionStart", "BeforeAgent"):
        said = HOOKS["gemini"].output(event, answer)
        assert said is not None
        assert said["hookSpecificOutput"]["hookEventName"] == event
        context = said["hookSpecificOutput"]["additionalContext"]
        assert context.startswith("[ctxd] Saved working state of session `s1`")
        assert context.endswith("## Objective\n\nfix it")
        assert said["systemMessage"] == "ctxd: recording"
    assert HOOKS["gemini"].output("AfterTool", {"context": "x"}) is None
    assert HOOKS["gemini"].output("AfterAgent", {}) is None
    assert HOOKS["gemini"].trouble("BeforeAgent", "down") == {"systemMessage": "ctxd: down"}
    assert HOOKS["gemini"].trouble("PreCompress", "down") is None  # it fires on every model request
    assert HOOKS["gemini"].trouble("AfterTool", "down") is None


def test_its_processes_are_not_the_agents_work():
    bundle = "/usr/lib/node_modules/@google/gemini-cli/bundle/gemini.js"
    assert is_excluded("node", ["node", "--max-old-space-size=8192", bundle, "-p", "x"])
    assert is_excluded("gemini", ["gemini"])  # a single-binary build
    assert not is_excluded("python3", ["python3", "launch_server.py", "--model", "gemma"])


def hook(url: str, body: dict[str, object]) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    return subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", url, "hook", "gemini"],
        input=json.dumps(body), capture_output=True, text=True, timeout=60, env=environ,
    )  # fmt: skip


def test_hook_runner_records_then_hands_back_the_state_on_resume(server: Server, tmp_path: Path):
    repo = tmp_path / "Train Loop"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    steps = [
        payload("SessionStart", repo, source="startup"),
        payload("BeforeAgent", repo, prompt="train without running out"),
        payload("PreCompress", repo, trigger="auto"),
        {**shell("python3 train.py --lr 3e-4 | tail -1", result("Output: loss 0.31")),
         "cwd": str(repo)},
        payload("PreCompress", repo, trigger="auto"),
        payload("AfterAgent", repo, prompt="x", prompt_response="y", stop_hook_active=False),
    ]  # fmt: skip
    for body in steps:
        out = hook(server.url, body)
        assert (out.returncode, out.stdout, out.stderr) == (0, "", ""), out
    # `gemini --resume latest -p continue`: the resume's dump comes with the prompt after it
    back = hook(server.url, payload("SessionStart", repo, source="resume"))
    assert (back.returncode, back.stdout, back.stderr) == (0, "", "")
    go = hook(server.url, payload("BeforeAgent", repo, prompt="continue"))
    assert go.returncode == 0 and go.stderr == ""
    said = json.loads(go.stdout)["hookSpecificOutput"]
    assert said["hookEventName"] == "BeforeAgent"
    dump = said["additionalContext"]
    assert dump.startswith("[ctxd] Saved working state of session `train-loop`")
    assert "train without running out" in dump and "train.py --lr 3e-4" in dump
    assert "“continue”: go on where you left off" in dump
    # the first automatic PreCompress of the conversation took a snapshot before compaction
    with server.client() as client:
        versions = client.get("/api/sessions/train-loop/snapshots").json()
        notes = [
            client.get(f"/api/sessions/train-loop/snapshots/{v['version']}").json()["header"]
            ["note"] for v in versions
        ]  # fmt: skip
    assert "Gemini CLI: compaction (auto trigger)" in notes, notes


def test_a_blocked_launch_is_no_attempt_and_its_line_says_it_never_ran(
    server: Server, tmp_path: Path
):
    """Through `ctxd hook gemini` to a real server: the launch Gemini blocked makes no attempt
    (it never "died within 1 s") and no watch; its recent line says the harness refused it."""
    repo = tmp_path / "serve"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    line = "TOKEN=$(cat ~/.token) nohup python3 serve.py --port 30000 > s.log 2>&1 &"
    blocked = {
        **shell(line, "Command injection detected: … This is a security risk and the command"
                " was blocked."),
        "cwd": str(repo),
    }  # fmt: skip
    blocked["tool_response"]["returnDisplay"] = "Blocked: command substitution detected."
    for body in (payload("SessionStart", repo, source="startup"),
                 payload("BeforeAgent", repo, prompt="serve it"), blocked):  # fmt: skip
        assert hook(server.url, body).returncode == 0
    with server.client() as client:
        taken = client.post("/api/sessions/serve/snapshots", json={"force": True}).json()
        narrative = taken["narrative"]
        watches = client.get("/api/sessions/serve/watches").json()
    assert narrative["history"] == [] and watches == [], (narrative["history"], watches)
    (recent,) = narrative["recent_commands"]
    assert recent.endswith(
        "→ not run, the harness refused it: Blocked: command substitution detected."
    ), recent


THEIRS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "general": {"vimMode": True},
    "hooks": {
        "AfterTool": [
            {"matcher": "run_shell_command",
             "hooks": [{"type": "command", "command": "audit-log", "timeout": 5000}]}
        ],
        "AfterAgent": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
    },
    "mcpServers": {"github": {"httpUrl": "https://example.com/mcp"}},
}  # fmt: skip


def ctxd(home: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "GEMINI_"))}
    return subprocess.run(
        [sys.executable, "-m", "ctxd", *args], cwd=cwd,
        env={**environ, "HOME": str(home), **env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_install_merges_is_idempotent_and_uninstall_restores_the_file(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".gemini").mkdir(parents=True)
    work.mkdir()
    settings = home / ".gemini" / "settings.json"
    settings.write_text(json.dumps(THEIRS, indent=2) + "\n")
    original = settings.read_bytes()

    dry = ctxd(home, work, "install", "gemini", "--dry-run")
    assert dry.returncode == 0 and "hook gemini" in dry.stdout and '"mcpServers"' in dry.stdout
    assert settings.read_bytes() == original  # a dry run writes nothing

    done = ctxd(home, work, "install", "gemini")
    assert done.returncode == 0, done.stderr
    assert str(settings) in done.stdout
    assert any("only in a folder it trusts" in note for note in GEMINI.notes("user"))
    merged = json.loads(settings.read_text())
    assert {k: merged[k] for k in ("security", "general")} == {
        k: THEIRS[k] for k in ("security", "general")
    }  # fmt: skip
    hooks = merged["hooks"]
    assert set(hooks) == {
        "SessionStart", "BeforeAgent", "AfterTool", "PreCompress", "AfterAgent", "SessionEnd",
    }  # fmt: skip
    after_tool = hooks["AfterTool"]
    assert after_tool[0] == THEIRS["hooks"]["AfterTool"][0]  # theirs kept, first
    ours = after_tool[1]
    assert ours["matcher"] == "run_shell_command|write_file|replace"
    [hook_entry] = ours["hooks"]
    assert hook_entry["command"].endswith("hook gemini") and hook_entry["name"] == "ctxd"
    assert hook_entry["timeout"] == 30_000  # milliseconds
    assert all(h["timeout"] >= 10_000 for e in hooks.values() for x in e for h in x["hooks"]
               if h["command"].endswith("hook gemini"))  # fmt: skip
    assert merged["mcpServers"] == {
        "github": {"httpUrl": "https://example.com/mcp"},
        "ctxd": {"type": "http", "url": "http://127.0.0.1:8765/mcp"},
    }

    once = settings.read_bytes()
    again = ctxd(home, work, "install", "gemini")
    assert again.returncode == 0 and "already installed" in again.stdout
    assert settings.read_bytes() == once

    moved = ctxd(home, work, "--url", "http://127.0.0.1:9999", "install", "gemini")
    assert moved.returncode == 0, moved.stderr
    text = settings.read_text()
    assert text.count("hook gemini") == 6 and "9999 hook gemini" in text
    assert json.loads(text)["mcpServers"]["ctxd"]["url"] == "http://127.0.0.1:9999/mcp"

    gone = ctxd(home, work, "uninstall", "gemini")
    assert gone.returncode == 0, gone.stderr
    assert json.loads(settings.read_text()) == THEIRS
    assert settings.read_bytes() == original  # byte for byte
    assert "nothing to remove" in ctxd(home, work, "uninstall", "gemini").stdout


def test_gemini_cli_home_and_project_scope(tmp_path: Path):
    home, repo, elsewhere = tmp_path / "home", tmp_path / "repo", tmp_path / "gemini-home"
    (repo / "src").mkdir(parents=True)
    home.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    user = ctxd(home, repo, "install", "gemini", GEMINI_CLI_HOME=str(elsewhere))
    assert user.returncode == 0, user.stderr
    assert (elsewhere / ".gemini" / "settings.json").exists()
    assert not (home / ".gemini").exists()  # GEMINI_CLI_HOME, not ~

    project = ctxd(home, repo / "src", "--url", "http://127.0.0.1:9999", "install", "gemini",
                   "--scope", "project")  # fmt: skip
    assert project.returncode == 0, project.stderr
    written = json.loads((repo / ".gemini" / "settings.json").read_text())
    command = written["hooks"]["AfterAgent"][0]["hooks"][0]["command"]
    assert "--url http://127.0.0.1:9999 hook gemini" in command
    assert written["mcpServers"]["ctxd"]["url"] == "http://127.0.0.1:9999/mcp"

    gone = ctxd(home, repo, "uninstall", "gemini", "--scope", "project")
    assert gone.returncode == 0, gone.stderr
    left = repo / ".gemini" / "settings.json"  # ctxd made it: removed, or left empty
    assert not left.exists() or json.loads(left.read_text()) == {}
    assert (elsewhere / ".gemini" / "settings.json").exists()  # the user scope's stays


def test_settings_it_will_not_touch(tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".gemini").mkdir(parents=True)
    work.mkdir()
    settings = home / ".gemini" / "settings.json"
    for text, said in (
        ('{\n  // my comment\n  "general": {}\n}\n', "not JSON"),
        ('{"hooks": []}', "'hooks' is not an object"),
        ('{"mcpServers": []}', "'mcpServers' is not an object"),
    ):
        settings.write_text(text)
        refused = ctxd(home, work, "install", "gemini")
        assert refused.returncode != 0 and said in refused.stderr, refused.stderr
        assert settings.read_text() == text
