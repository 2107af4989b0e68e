"""The real Codex CLI, offline against a scripted Responses API, with ctxd's hooks as
`ctxd install codex` writes them.

As `tests/test_harness_claude.py` does for Claude Code: nothing is registered with ctxd by
hand; the scripted agent launches an SGLang-like server that dies at once with CUDA out of
memory, relaunches it with other flags (it then waits forever for its ranks) and rebuilds a
wheel; then `codex exec resume --last "continue"`. What the model receives for that turn is
what this test reads. Codex ends a command's process group when the command returns, so the
agent sends its launches off with `setsid nohup … &`, as an agent working in Codex must.

Codex runs a hook only once a person trusts it (`/hooks` in its TUI); a headless test passes
`--dangerously-bypass-hook-trust` instead.
"""

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import Server, free_port
from tests.scripted_model import Step
from tests.scripted_responses import MODEL, ScriptedResponses
from tests.test_harness_claude import (
    ASK,
    LAST_WORDS,
    LOOK,
    READ,
    SECRET,
    TOKEN_FROM_FILE,
    check_scenario_dump,
    come_back_later,
    gpu_server,  # noqa: F401  (ctxd with the stand-in nvidia-smi, a fixture)
    running_launcher,
    workspace,  # noqa: F401  (the scenario's checkout, a fixture)
)

MODULES = Path(__file__).resolve().parents[1] / ".harness" / "node_modules"
CODEX = MODULES / ".bin" / "codex"  # the npm launcher (node), which starts the native binary
# The native binary the launcher starts: run directly, as the launcher itself replaces its node
# process with it where Node has `process.execve` (Node 22.15+); under an older Node the
# launcher stays the binary's parent, a `node …/bin/codex` the workspace scan would take for
# the agent's own work.
NATIVE = sorted(MODULES.glob("@openai/codex-*/vendor/*/bin/codex"))
LAUNCH = (
    "setsid nohup python3 launch_server.py --model-path meta-llama/Llama-3.1-8B-Instruct --tp 8"
    " --port 30000"
)
KEY_VARIABLE = "SCRIPTED_RESPONSES_KEY"


def model_config(url: str) -> str:
    """Codex's config.toml for a scripted model: a custom provider on the Responses API."""
    return (
        f'model = "{MODEL}"\nmodel_provider = "scripted"\napproval_policy = "never"\n'
        'sandbox_mode = "danger-full-access"\n\n[model_providers.scripted]\n'
        f'name = "scripted"\nbase_url = "{url}"\nenv_key = "{KEY_VARIABLE}"\n'
        'wire_api = "responses"\n'
    )


def codex(args: list[str], cwd: Path, home: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "OPENAI_", "CODEX_"))},
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        KEY_VARIABLE: "sk-scripted-model",
    }
    argv = [str(NATIVE[0] if NATIVE else CODEX), "exec", *args]
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.skipif(not CODEX.exists(), reason="Codex not installed (`make test` does, with npm)")
def test_continue_after_unregistered_work_carries_what_the_agent_did(
    gpu_server: Server,  # noqa: F811  (the fixture imported above)
    workspace: Path,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    server = gpu_server
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    model = ScriptedResponses(
        [
            Step(
                bash=f"mkdir -p logs; {TOKEN_FROM_FILE} {LAUNCH} --mem-fraction-static 0.95"
                " > logs/attempt1.log 2>&1 &"
            ),
            Step(bash="sleep 3; tail -3 logs/attempt1.log"),
            Step(
                bash=f"{TOKEN_FROM_FILE} {LAUNCH} --mem-fraction-static 0.85"
                " --disable-cuda-graph --log-level debug > server.log 2>&1 &"
            ),
            Step(bash="make wheel"),
            Step(bash=LOOK),
            Step(bash=READ),
            Step(text=LAST_WORDS),
            Step(text="Picking up where we were."),
        ]
    )
    (home / ".codex" / "config.toml").write_text(model_config(model.url))
    (home / ".weights-token").write_text(SECRET)  # the user's, as a person keeps a token
    # installed the way a user installs it: one command, nothing registered by hand
    installed = subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", server.url, "install", "codex"],
        capture_output=True, text=True, check=True,
        env={**os.environ, "HOME": str(home), "CODEX_HOME": str(home / ".codex")},
    )  # fmt: skip
    assert "created" in installed.stdout and "hooks.json" in installed.stdout
    assert "/hooks" in installed.stdout and "trust" in installed.stdout
    headless = ["--dangerously-bypass-hook-trust", "--skip-git-repo-check"]
    try:
        prompt = ASK
        codex([*headless, prompt], workspace, home)
        come_back_later()
        codex(["resume", "--last", *headless, "continue"], workspace, home)
    finally:
        model.close()

    context = model.context_of_last_turn()
    (Path(__file__).parent / "artifacts").mkdir(exist_ok=True)
    (Path(__file__).parent / "artifacts" / "harness_codex_continue.txt").write_text(context)
    launcher = running_launcher(workspace)

    # once, as a developer message after the user's "continue": the resume's dump waits for
    # the prompt (UserPromptSubmit), so that it quotes it
    assert context.count("## Handover") == 1, context
    assert model.roles_of_last_turn() == ["user", "developer"], model.roles_of_last_turn()
    assert "[ctxd] Saved working state of session" in context
    # ctxd's MCP server, from the table install wrote into config.toml, offered to the model
    assert any(t.get("name") == "mcp__ctxd" for t in model.requests[-1]["tools"])
    check_scenario_dump(context, launcher, server.data_dir)


def serving(folder: Path, port: int) -> psutil.Process | None:
    """This test's web server: the process of its folder that serves `port`."""
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        cmdline = proc.info["cmdline"] or []
        mine = proc.info["cwd"] and Path(proc.info["cwd"]).is_relative_to(folder)
        if mine and "http.server" in cmdline and str(port) in cmdline:
            return proc
    return None


@pytest.mark.skipif(not CODEX.exists(), reason="Codex not installed (`make test` does, with npm)")
def test_a_plain_nohup_launch_codex_ends_is_said_so_and_the_setsid_relaunch_is_followed(
    gpu_server: Server,  # noqa: F811  (the fixture imported above)
    workspace: Path,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    """The agent starts a web server with a plain `nohup … &`: Codex ends the command's
    process group as the command returns, and the server goes with it, nothing in its log.
    The agent finds it down and relaunches it with `setsid`. Asked to continue, the model is
    told why the first one ended and how to launch, and that the second one runs."""
    server = gpu_server
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    port = free_port()
    # the agent types a token on its line: what reaches the model, and ctxd's files, never holds it
    token = f"DOCS_TOKEN={SECRET}"
    serve = f"nohup python3 -m http.server {port} --bind 127.0.0.1 > logs/web.log 2>&1 &"
    probe = (
        f'sleep 2; python3 -c "import urllib.request as u; print(u.urlopen('
        f"'http://127.0.0.1:{port}/').status)\" 2>&1 | tail -1"
    )
    model = ScriptedResponses(
        [
            Step(bash=f"mkdir -p logs; {token} {serve}"),
            Step(bash=probe),
            Step(bash=f"{token} setsid {serve}"),
            Step(bash=probe),
            Step(
                text="The first server died with its command; relaunched with setsid, it answers."
            ),
            Step(text="Picking up where we were."),
        ]
    )
    (home / ".codex" / "config.toml").write_text(model_config(model.url))
    subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", server.url, "install", "codex"],
        capture_output=True, text=True, check=True,
        env={**os.environ, "HOME": str(home), "CODEX_HOME": str(home / ".codex")},
    )  # fmt: skip
    headless = ["--dangerously-bypass-hook-trust", "--skip-git-repo-check"]
    try:
        codex([*headless, "Serve the docs folder over HTTP so I can look at it."], workspace, home)
        codex(["resume", "--last", *headless, "continue"], workspace, home)
    finally:
        model.close()
    context = model.context_of_last_turn()
    (Path(__file__).parent / "artifacts" / "harness_codex_setsid_continue.txt").write_text(context)
    web = serving(workspace, port)
    assert web is not None, "the setsid relaunch is not running"
    rows = [line for line in context.splitlines() if line.startswith("| **attempt ")]
    assert len(rows) == 2, context
    first, second = rows
    # the first: ended as its command returned, and why, and how to launch instead
    assert "Codex ends a command's process group" in first and "setsid nohup" in first, first
    # the second: the running server, its pid and port
    assert "running" in second and f"(pid {web.pid})" in second, second
    assert "`setsid` added" in second, second  # what changed: how it was sent off
    assert f"127.0.0.1:{port}" in context and "listening" in context, context
    assert "DOCS_TOKEN=[REDACTED]" in context and SECRET not in context, context
    for path in server.data_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
