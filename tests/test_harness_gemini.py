"""The real Gemini CLI, offline against a scripted Gemini API, with ctxd's hooks as
`ctxd install gemini` writes them.

As `tests/test_harness_claude.py` does for Claude Code: nothing is registered with ctxd by
hand; the scripted agent launches an SGLang-like server with `nohup` that dies at once with
CUDA out of memory, relaunches it with other flags (it then waits forever for its ranks) and
rebuilds a wheel; then `gemini --resume latest -p continue`. What the model receives for that
turn is what this test reads. Gemini leaves a command's background jobs running when the
command returns, so a plain `nohup … &` launches.

Gemini runs hooks only in a folder it trusts: a headless run passes `--skip-trust`.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Server
from tests.scripted_gemini import MODEL, ScriptedGemini
from tests.scripted_model import Step
from tests.test_harness_claude import (
    ASK,
    LAST_WORDS,
    LOOK,
    READ,
    SECRET,
    check_scenario_dump,
    come_back_later,
    gpu_server,  # noqa: F401  (ctxd with the stand-in nvidia-smi, a fixture)
    running_launcher,
    workspace,  # noqa: F401  (the scenario's checkout, a fixture)
)

# Gemini CLI runs no command with `$(…)` (test_harness_gemini_adapter): the agent reads the
# user's token file with `read`, so the line shown holds no secret and runs again as it is.
TOKEN_FROM_FILE = "read -r WEIGHTS_TOKEN < ~/.weights-token; export WEIGHTS_TOKEN;"
GEMINI = Path(__file__).resolve().parents[1] / ".harness" / "node_modules" / ".bin" / "gemini"
LAUNCH = (
    "nohup python3 launch_server.py --model-path meta-llama/Llama-3.1-8B-Instruct --tp 8"
    " --port 30000"
)
# Gemini's own settings for a scripted model: an API key (any) and no folder-trust prompt.
ITS_OWN_VARIABLES = ("CTXD_", "GEMINI_", "GOOGLE_")  # of this machine: not the test's
AUTH = '{"security": {"auth": {"selectedType": "gemini-api-key"}}}\n'


def gemini(args: list[str], cwd: Path, home: Path, model_url: str) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(ITS_OWN_VARIABLES)},
        "HOME": str(home),
        "GEMINI_API_KEY": "scripted-model-key",
        "GOOGLE_GEMINI_BASE_URL": model_url,
    }  # fmt: skip
    argv = [str(GEMINI), "-m", MODEL, "--yolo", "--skip-trust", *args]
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.skipif(
    not GEMINI.exists(), reason="Gemini CLI not installed (`make test` does, with npm)"
)
def test_continue_after_unregistered_work_carries_what_the_agent_did(
    gpu_server: Server,  # noqa: F811  (the fixture imported above)
    workspace: Path,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    server = gpu_server
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(AUTH)
    (home / ".weights-token").write_text(SECRET)  # the user's, as a person keeps a token
    model = ScriptedGemini(
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
    # installed the way a user installs it: one command, nothing registered by hand
    installed = subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", server.url, "install", "gemini"],
        capture_output=True, text=True, check=True, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    assert "settings.json" in installed.stdout
    try:
        prompt = ASK
        gemini(["-p", prompt], workspace, home, model.url)
        come_back_later()
        gemini(["--resume", "latest", "-p", "continue"], workspace, home, model.url)
    finally:
        model.close()

    context = model.context_of_last_turn()
    (Path(__file__).parent / "artifacts").mkdir(exist_ok=True)
    (Path(__file__).parent / "artifacts" / "harness_gemini_continue.txt").write_text(context)
    launcher = running_launcher(workspace)

    # once, in the user's turn after "continue", as Gemini wraps a hook's context: the
    # resume's dump waits for the prompt (BeforeAgent), so that it quotes it
    assert context.count("## Handover") == 1, context
    assert context.count("<hook_context>") == 1 and context.startswith("continue\n<hook_context>")
    assert "[ctxd] Saved working state of session" in context
    # Gemini writes `>` as `&gt;` in it (`… > server.log` reads `&gt; server.log`): the lead
    # says so in words, and those words reach the model as written
    assert "&gt; server.log 2>&1" not in context and "&gt; server.log" in context
    assert "writes each less-than sign in it as &lt; and each greater-than sign as &gt;" in context
    # ctxd's MCP server, from the entry install wrote into settings.json, offered to the model
    assert any(name.startswith("mcp_ctxd_") for name in model.tool_names()), model.tool_names()
    check_scenario_dump(context, launcher, server.data_dir)
