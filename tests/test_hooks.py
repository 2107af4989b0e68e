"""`ctxd hook claude` fed Claude Code's hook payloads on stdin, against a real server."""

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from ctxd.harness.policy import is_continue
from ctxd.harness.resolve import slug
from ctxd.hookclient.harnesses import HOOKS
from ctxd.hookclient.hook import HookError, parse_payload

from tests.conftest import Server, free_port


def hook(url: str, payload: object, **env: str) -> subprocess.CompletedProcess:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    # The timeout only keeps a hung hook from hanging the suite; speed is not asserted here.
    return subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", url, "hook", "claude"],
        input=text, capture_output=True, text=True, timeout=60, env={**environ, **env},
    )  # fmt: skip


def context(out: subprocess.CompletedProcess, event: str = "UserPromptSubmit") -> str:
    """What the hook hands the model, from Claude Code's JSON hook output."""
    said = json.loads(out.stdout)["hookSpecificOutput"]
    assert said["hookEventName"] == event
    return str(said["additionalContext"])


def payload(event: str, cwd: Path | str, **fields: str) -> dict[str, str]:
    return {
        "session_id": "3f1c2a9e-5b7d-4c1e-9a0b-7e2d8c6f4a11",
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": str(cwd),
        "permission_mode": "default",
        "hook_event_name": event,
        **fields,
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    top = tmp_path / "work" / "Train Loop"
    (top / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    return top


def test_prompts_compaction_and_resume_in_a_git_checkout(
    server: Server, client: httpx.Client, repo: Path
):
    # A plain prompt from a subfolder: the session is made for the git top-level.
    first = hook(server.url, payload("UserPromptSubmit", repo / "src", prompt="fix the OOM"))
    assert (first.returncode, first.stdout, first.stderr) == (0, "", "")
    found = client.get("/api/sessions", params={"cwd": str(repo / "src")}).json()
    assert [(s["id"], s["cwd"], s["title"]) for s in found] == [
        ("train-loop", str(repo), "Train Loop")
    ]
    client.put("/api/sessions/train-loop", json={"objective": "train without OOM"})

    pre = hook(server.url, payload("PreCompact", repo, trigger="auto", custom_instructions=""))
    assert (pre.returncode, pre.stdout) == (0, "")
    snap = client.get("/api/sessions/train-loop/snapshots/1").json()
    assert "compaction (auto trigger)" in snap["header"]["note"]
    assert snap["narrative"]["latest_message"] == "fix the OOM"

    back = hook(server.url, payload("SessionStart", repo, source="compact"))
    assert back.returncode == 0 and back.stderr == ""
    dump = context(back, "SessionStart")
    assert dump.startswith("[ctxd] Saved working state of session `train-loop`")
    assert "train without OOM" in dump and "fix the OOM" in dump
    assert "`ctxd resume train-loop`" in dump  # the full dump

    fresh = hook(server.url, payload("SessionStart", repo, source="startup"))
    assert (fresh.returncode, fresh.stdout) == (0, "")

    stop = hook(server.url, payload("Stop", repo, stop_hook_active="false"))
    assert (stop.returncode, stop.stdout, stop.stderr) == (0, "", "")


def test_an_empty_or_bare_continue_prompt_prints_a_continue_dump(
    server: Server, client: httpx.Client, repo: Path, tmp_path: Path
):
    log = tmp_path / "train.log"
    pad = "grad_norm=0.31 lr=3e-4 tokens/s=181234 " * 2
    log.write_text("".join(f"step {i} loss {1 / (i + 1):.4f} {pad}\n" for i in range(400)))
    client.put("/api/sessions/train-loop", json={"objective": "converge", "cwd": str(repo)})
    client.post("/api/sessions/train-loop/watches", json={"kind": "log", "path": str(log)})
    for prompt in ("", "  Continue. "):
        out = hook(server.url, payload("UserPromptSubmit", repo, prompt=prompt))
        assert out.returncode == 0 and "converge" in context(out), out.stderr
        # a dump that fits is handed as a model gets it too: no chatter of ctxd's own
        assert "Where this dump lives" not in context(out) and "ctxd note" not in context(out)
    versions = client.get("/api/sessions/train-loop/snapshots").json()
    assert {v["trigger"] for v in versions} == {"continue"}

    cut = hook(
        server.url, payload("UserPromptSubmit", repo, prompt="continue"), CTXD_HOOK_MAX_CHARS="2000"
    )
    dump = context(cut).split("\n\n", 1)[1]
    assert cut.returncode == 0 and len(dump.rstrip("\n")) <= 2000
    assert "converge" in dump and "Kept under 2000" in dump and "step 370 " not in dump
    assert "Where this dump lives" not in dump  # what the model gets has no chatter of ctxd's


def test_sessions_by_env_by_harness_id_and_same_named_checkouts(
    server: Server, client: httpx.Client, repo: Path, tmp_path: Path
):
    client.put("/api/sessions/train-loop", json={"cwd": str(repo)})
    other = tmp_path / "elsewhere" / "train-loop"
    other.mkdir(parents=True)
    assert hook(server.url, payload("Stop", other)).returncode == 0
    ids = [s["id"] for s in client.get("/api/sessions", params={"cwd": str(other)}).json()]
    assert len(ids) == 1 and ids[0].startswith("train-loop-")  # not the other checkout's

    no_cwd = payload("Stop", "")
    del no_cwd["cwd"]
    assert hook(server.url, no_cwd).returncode == 0
    client.get("/api/sessions/claude-3f1c2a9e-5b7d-4c1e-9a0b-7e2d8c6f4a11").raise_for_status()

    assert hook(server.url, payload("Stop", repo), CTXD_SESSION="pinned").returncode == 0
    client.get("/api/sessions/pinned").raise_for_status()


def test_service_down_or_bad_input_never_blocks_the_agent(tmp_path: Path):
    down = f"http://127.0.0.1:{free_port()}"
    for event, extra in (
        ("UserPromptSubmit", {"prompt": ""}),
        ("PreCompact", {"trigger": "manual"}),
        ("SessionStart", {"source": "resume"}),
        ("Stop", {}),
    ):
        out = hook(down, payload(event, tmp_path, **extra), CTXD_AUTOSTART="0")
        assert out.returncode == 0
        assert "not reachable" in out.stderr and "Traceback" not in out.stderr
        # the person sees it where Claude Code shows hook messages; a tool call stays quiet
        told = json.loads(out.stdout)["systemMessage"] if out.stdout else ""
        assert ("not reachable" in told) == (event != "Stop")
    for bad in ("", "not json", "[1, 2]", '{"session_id": "x"}'):
        out = hook(down, bad, CTXD_AUTOSTART="0")
        assert out.returncode == 0 and out.stderr.startswith("ctxd hook: "), out.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["nonsense"], "ctxd hook: no harness 'nonsense' runs hook commands (known: "),
        (["--bogus", "claude"], "ctxd hook: no harness '--bogus' runs hook commands"),
        (["claude", "--bogus"], "ctxd hook: ignored arguments '--bogus'"),
        (["claude", "extra", "words"], "ctxd hook: ignored arguments 'extra words'"),
        ([], "ctxd hook: "),
    ],
)
def test_bad_arguments_never_block_the_agent(tmp_path: Path, args: list[str], said: str):
    """A hook command mistyped in a settings file exits 0 whatever its stdin, saying why on
    stderr: a harness treats another exit as the hook's failure and may block the agent."""
    down = f"http://127.0.0.1:{free_port()}"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    good = json.dumps(payload("UserPromptSubmit", tmp_path, prompt="hi"))
    for stdin in (good, "", "not json", "\x00\xff garbage"):
        out = subprocess.run(
            [sys.executable, "-m", "ctxd", "--url", down, "hook", *args],
            input=stdin, capture_output=True, text=True, timeout=60,
            env={**environ, "CTXD_AUTOSTART": "0"},
        )  # fmt: skip
        assert out.returncode == 0, (args, stdin, out.stderr)
        assert out.stderr.startswith(said), (args, stdin, out.stderr)
        assert "Traceback" not in out.stderr


def test_print_config_is_the_hooks_block_for_settings_json():
    out = subprocess.run(
        [sys.executable, "-m", "ctxd", "hook", "claude", "--print-config"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    config = json.loads(out.stdout)["hooks"]
    assert set(config) == {
        "PreCompact", "PostCompact", "SessionStart", "UserPromptSubmit", "Stop", "StopFailure",
        "PostToolUse", "PostToolUseFailure", "SessionEnd", "SubagentStart", "SubagentStop",
    }  # fmt: skip
    assert config["SessionStart"][0]["matcher"] == "startup|compact|resume|clear|fork"
    tools = config["PostToolUse"][0]
    assert tools["matcher"] == "Bash|Edit|Write|MultiEdit|NotebookEdit"
    # Claude Code posts its events to this machine's ctxd itself: no process per event
    assert tools["hooks"][0] == {"type": "http", "timeout": 30,
                                 "url": "http://127.0.0.1:8765/api/hooks/claude/http"}  # fmt: skip
    start = config["SessionStart"][0]["hooks"][0]
    assert start["type"] == "command" and start["command"].endswith("hook claude")


@pytest.mark.parametrize("harness", ["codex", "gemini"])
def test_print_config_of_each_harness_that_runs_hook_commands(harness: str, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "ctxd", "hook", harness, "--print-config"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    hooks = json.loads(out.stdout)["hooks"]
    commands = {h["command"] for entries in hooks.values() for e in entries for h in e["hooks"]}
    assert len(commands) == 1 and commands.pop().endswith(f"hook {harness}")
    assert list(tmp_path.iterdir()) == []  # printed, nothing written


def test_parse_payload_and_continue_words():
    parsed = parse_payload(
        HOOKS["claude"], json.dumps(payload("PreCompact", "/w", trigger="manual"))
    )
    assert (parsed["hook_event_name"], parsed["cwd"]) == ("PreCompact", "/w")
    with pytest.raises(HookError, match="not JSON"):
        parse_payload(HOOKS["claude"], "{")
    assert all(is_continue(p) for p in ("", "   ", "continue", "Continue!", "CONTINUE."))
    assert not any(is_continue(p) for p in ("continue with the tests", "go", "no"))
    assert slug("Train Loop") == "train-loop" and slug("...") == "" and slug("Ünï") == "n"


def test_one_dump_per_turn_after_a_resume(server: Server, client: httpx.Client, repo: Path):
    """`claude --continue` with "continue" fires SessionStart(resume) then UserPromptSubmit:
    the model gets the dump once, with the prompt, which it quotes as the user's latest (a
    dump at SessionStart could only say the message was not seen yet)."""
    client.put("/api/sessions/train-loop", json={"objective": "converge", "cwd": str(repo)})
    start = hook(server.url, payload("SessionStart", repo, source="resume"))
    assert (start.returncode, start.stdout) == (0, "")
    resumed = context(hook(server.url, payload("UserPromptSubmit", repo, prompt="Continue.")))
    assert "converge" in resumed
    assert "**The user's latest message** (" in resumed
    assert "): “Continue.”: go on where you left off" in resumed, resumed
    later = hook(server.url, payload("UserPromptSubmit", repo, prompt="continue"))
    assert "converge" in context(later)  # the next turn gets its dump


def test_tool_calls_add_watches_and_attempts_by_themselves(
    server: Server, client: httpx.Client, repo: Path, tmp_path: Path
):
    """A PostToolUse of a background launch, as Claude Code sends it: no watch added by hand."""
    command = (
        "HF_TOKEN=hf_Zq8vR2mXw4LkP9sT7yB3nC6dF1gH5jK0aE nohup python3 -c 'import time; "
        "time.sleep(60)' serve.py --port 30123 > serve.log 2>&1 &"
    )
    event = payload(
        "PostToolUse", repo, tool_name="Bash", tool_use_id="toolu_01",
    )  # fmt: skip
    event["tool_input"] = {"command": command, "description": "start the server"}
    event["tool_response"] = {"stdout": "", "stderr": "", "interrupted": False}
    out = hook(server.url, event)
    assert (out.returncode, out.stdout) == (0, ""), out.stderr
    watches = client.get("/api/sessions/train-loop/watches").json()
    kinds = {w["spec"]["kind"]: w for w in watches}
    assert set(kinds) >= {"log", "port"} and all(w["auto"] for w in watches)
    assert kinds["log"]["spec"]["path"] == str(repo / "serve.log")
    assert kinds["port"]["spec"]["port"] == 30123 and "command at" in kinds["port"]["reason"]
    recent = client.get("/api/sessions/train-loop/resume", params={"fresh": "true"}).text
    assert "## Recent commands" in recent and "serve.py --port 30123" in recent
    # what a command's time is: the moment it returned (a launch: its process's start)
    assert "Each at the second the harness reported it done; a launch at its" in recent
    assert "hf_Zq8vR2mXw4LkP9sT7yB3nC6dF1gH5jK0aE" not in recent
    assert (
        b"hf_Zq8vR2mXw4LkP9sT7yB3nC6dF1gH5jK0aE" not in (server.data_dir / "ctxd.db").read_bytes()
    )


def test_ten_hooks_at_once_start_one_service(tmp_path: Path):
    """ctxd down: the first hook starts it in the background (with a lock), the others wait
    for it, and the prompt still gets its answer."""
    import psutil

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    argv = [sys.executable, "-m", "ctxd", "--url", url, "hook", "claude"]
    event = json.dumps(payload("UserPromptSubmit", tmp_path, prompt="fix the OOM"))
    hooks = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(10)
    ]  # fmt: skip
    try:
        results = [h.communicate(event, timeout=120) for h in hooks]
        assert all(h.returncode == 0 for h in hooks), results
        said = [json.loads(out)["systemMessage"] for out, _ in results if out]
        assert sum("started it" in s for s in said) == 1, said
        assert httpx.get(f"{url}/health", timeout=5).json()["status"] == "ok"
        assert (tmp_path / "xdg" / "ctxd" / "ctxd.db").exists()
    finally:
        # this test's own: the service the hooks started serves a data dir under its folder
        def ours(argv: list[str]) -> bool:
            data = argv[argv.index("--data-dir") + 1 :][:1] if "--data-dir" in argv else []
            return "serve" in argv and bool(data) and Path(data[0]).is_relative_to(tmp_path)

        servers = [p for p in psutil.process_iter(["cmdline"]) if ours(p.info["cmdline"] or [])]
        for server in servers:
            server.terminate()
        psutil.wait_procs(servers, timeout=10)
    assert len(servers) == 1


def test_objective_from_the_transcript_when_none_was_set(
    server: Server, client: httpx.Client, repo: Path, tmp_path: Path
):
    transcript = tmp_path / "home" / ".claude" / "projects" / "-work-train" / "3f1c.jsonl"
    transcript.parent.mkdir(parents=True)
    records = [
        {"type": "user", "isMeta": True, "message": {"role": "user", "content": "Caveat: x"}},
        {"type": "user", "message": {"role": "user", "content": "continue"}},
        {"type": "user", "message": {"role": "user", "content": [
            {"type": "text", "text": "Make the trainer stop running out of memory at step 400"}
        ]}},
        {"type": "user", "message": {"role": "user", "content": "and then add tests"}},
    ]  # fmt: skip
    transcript.write_text("not json\n" + "\n".join(json.dumps(r) for r in records) + "\n")
    outside = payload("SessionStart", repo, source="clear", transcript_path="/etc/passwd")
    assert hook(server.url, outside).returncode == 0
    assert client.get("/api/sessions/train-loop").json()["objective"] == ""
    start = payload("SessionStart", repo, source="compact", transcript_path=str(transcript))
    assert hook(server.url, start).returncode == 0
    session = client.get("/api/sessions/train-loop").json()
    assert session["objective"] == "Make the trainer stop running out of memory at step 400"
    assert session["objective_source"] == "the user's first prompt"


def test_session_start_keeps_the_session_for_the_agents_own_ctxd_calls(
    server: Server, repo: Path, tmp_path: Path
):
    """Claude Code loads CLAUDE_ENV_FILE's exports into its Bash tool's shells: the hook puts
    CTXD_SESSION there, once, so the agent's `ctxd note` records in its conversation's session."""
    exports = tmp_path / "claude-env.sh"
    exports.write_text("export THEIRS=1\n")
    for _ in range(2):
        started = hook(server.url, payload("SessionStart", repo, source="startup"),
                       CLAUDE_ENV_FILE=str(exports))  # fmt: skip
        assert started.returncode == 0, started.stderr
    assert exports.read_text() == "export THEIRS=1\nexport CTXD_SESSION=train-loop\n"
    noted = subprocess.run(
        ["bash", "-c", f". {exports} && {sys.executable} -m ctxd --url {server.url} note "
         '"$CTXD_SESSION" finding "the loader leaks"'],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert noted.returncode == 0, noted.stderr
    with server.client() as c:
        assert "the loader leaks" in c.get("/api/sessions/train-loop/resume").text
