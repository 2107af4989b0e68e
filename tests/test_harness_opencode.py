"""The real opencode CLI (1.18.33, the 1.x npm serves), offline against a scripted
OpenAI-compatible model, with ctxd's plugin as `ctxd install opencode` puts it: the one file
that also carries opencode 2's plugin definition (its default export), loaded by 1.x.

Nothing is registered with ctxd by hand: the scripted agent launches a training run in the
background with `nohup` that dies at once with CUDA out of memory, relaunches it with a
smaller batch (it then stalls on a data loader: the loader of shard 3 opens a FIFO the user's
run of yesterday left in the data cache) and reads its log; then the user sends
"continue" to the same session. What the model receives for that turn is what this test reads.
"""

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import Server
from tests.scripted_model import Step
from tests.scripted_openai import MODEL, ScriptedOpenAI
from tests.test_harness_claude import checkout, come_back_later, gpu_server  # noqa: F401

OPENCODE = Path(__file__).resolve().parents[1] / ".harness" / "node_modules" / ".bin" / "opencode"
SECRET = "dst_Wq3vT8mLx2KpR7sY4bN9cD6fG1hJ5kZ0aQ"  # the datastore's token
# read from the checkout's ignored file as the agent launches (opencode refuses a command that
# reads outside it): the line shown as typed holds no secret
TOKEN_FROM_FILE = "DATASTORE_TOKEN=$(cat .datastore-token)"
# What the agent says at the end of its first turn, having read the relaunch's log (its tail
# says which loader it waits for, and that its shard came from the cache) and the trainer's
# staging code.
LAST_WORDS = (
    "Relaunched with --batch-size 64 (256 ran out of memory): it stalls after step 3 again,"
    " waiting for dataloader worker 3, whose shard came from the cache. stage_shards fetches"
    " from the store only the shards missing from .data-cache: any file there, whatever its"
    " type, counts as cached. Next I find out why worker 3 never delivers."
)

TRAINER = '''\
"""A training run that stalls: its 4 data loader workers (processes, as torch's DataLoader
starts them) read their shards and feed a queue. A shard not in the cache yet is streamed from
the data store through a pipe and kept in the cache as a file; one in the cache already is read
from it. The user's run of yesterday was stopped while shard 3 streamed: its pipe is still in
the cache, a FIFO nothing will write, which the cache check takes for a shard, so worker 3's
open() never returns and after three steps the loop waits for its batch forever. A batch of
256 asks more GPU memory than a GPU has."""
import argparse, multiprocessing as mp, os, sys, threading, time

def load_worker(worker_id, shards, out, epoch_done):
    with open(os.path.join(shards, f"shard-{worker_id}.bin"), "rb") as shard:
        out.put(shard.read(4096))
    epoch_done.wait()  # a worker stays up until the epoch ends

def stream_shard(path):
    """A shard streamed from the data store into its pipe by the trainer's stream thread, as
    its worker reads it, then kept in the cache as a file."""
    data = os.urandom(4096)  # as the store sends it
    with open(path, "wb") as pipe:
        pipe.write(data)
    with open(path + ".part", "wb") as kept:
        kept.write(data)
    os.replace(path + ".part", path)

def stage_shards(shards):
    """Each worker's shard as a pipe its stream thread fills, so no worker waits for a whole
    copy; a shard in the cache already is read from there. Returns the workers whose was."""
    os.makedirs(shards, exist_ok=True)
    cached = []
    for worker_id in range(4):
        path = os.path.join(shards, f"shard-{worker_id}.bin")
        if os.path.lexists(path):
            cached.append(worker_id)
            continue
        os.mkfifo(path)
        threading.Thread(target=stream_shard, args=(path,), daemon=True).start()
    return cached

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr"); parser.add_argument("--batch-size", type=int)
    args = parser.parse_args()
    if args.batch_size > 128:
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 162.00 GiB. GPU 0 has"
              " a total capacity of 139.81 GiB of which 139.40 GiB is free.", file=sys.stderr)
        sys.exit(1)
    held = bytearray(160 * 2**20)  # the model and optimizer state, on the host side
    shards = os.path.abspath(".data-cache")
    cached = stage_shards(shards)
    batches = [mp.Queue() for _ in range(4)]  # a batch in turn from each worker
    epoch_done = mp.Event()
    workers = [mp.Process(target=load_worker, args=(w, shards, batches[w], epoch_done),
                          name=f"loader-{w}") for w in range(4)]
    for w in workers:
        w.start()
    for step in range(1, 4):
        batches[step - 1].get()
        print(f"step {step} loss {2.5 / step:.3f} lr {args.lr}", flush=True)
    came = "from the cache" if 3 in cached else "streamed from the data store"
    print(f"waiting for dataloader worker 3 (shard-3.bin: {came})", flush=True)
    batches[3].get()  # as torch's DataLoader with its default timeout=0: for ever
'''

LAUNCH = "nohup python3 train.py --lr 3e-4"


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    top = tmp_path / "trainer"
    top.mkdir()
    (top / "train.py").write_text(TRAINER)
    (top / ".gitignore").write_text("*.log\n.data-cache/\n.datastore-token\n")
    # the user's run of yesterday evening, stopped while it streamed shard 3: its pipe is still
    # in the (ignored) cache, unchanged since
    left = top / ".data-cache" / "shard-3.bin"
    left.parent.mkdir()
    os.mkfifo(left)
    yesterday = time.time() - (15 * 3600 + 17 * 60)
    os.utime(left, (yesterday, yesterday))
    with checkout(top, "trainer"):
        yield top


def offline_env(home: Path, work: Path) -> dict[str, str]:
    """opencode with its own HOME and XDG folders, and no way out: every fetch it might try
    (models.dev, npm, updates) goes to a closed port instead of hanging or succeeding.

    With any plugin configured, opencode waits at start for its npm install of
    `@opencode-ai/plugin` into each config folder; offline, npm's retries make that 70 s, so
    no retries: it fails at once, opencode logs it and loads the plugin (ctxd's needs no
    package)."""
    dead = "http://127.0.0.1:9"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "OPENAI_"))}
    return {
        **env,
        # the opencode `ctxd install` finds, as on a machine where npm installed it
        "PATH": f"{OPENCODE.parent}{os.pathsep}{env['PATH']}",
        "HOME": str(home),
        "PWD": str(work),  # opencode takes its directory from PWD, not from the process cwd
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "NO_PROXY": "127.0.0.1,localhost",
        "npm_config_registry": dead,
        "npm_config_fetch_retries": "0",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    }  # fmt: skip


def provider_config(model: ScriptedOpenAI) -> dict:
    """A custom provider through `@ai-sdk/openai-compatible`, which opencode carries inside
    its binary (nothing is downloaded for it)."""
    scripted = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Scripted",
        "options": {"baseURL": model.url, "apiKey": "sk-scripted-model"},
        "models": {MODEL: {"name": "Scripted", "tool_call": True}},
    }
    chosen = f"scripted/{MODEL}"
    return {"provider": {"scripted": scripted}, "model": chosen, "small_model": chosen}


def opencode(args: list[str], work: Path, env: dict[str, str]) -> str:
    argv = [str(OPENCODE), "run", "--dir", str(work), *args]
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def trainer_session(server: Server) -> str:
    """The ctxd session the plugin recorded the conversation in (the checkout's only one)."""
    (session,) = httpx.get(f"{server.url}/api/sessions", timeout=10).json()
    return str(session["id"])


def trainer(workspace: Path) -> psutil.Process:
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        mine = proc.info["cwd"] and Path(proc.info["cwd"]).is_relative_to(workspace)
        parent = proc.parent()
        loader = parent is not None and "--batch-size" in parent.cmdline()
        if mine and "--batch-size" in (proc.info["cmdline"] or []) and not loader:
            return proc  # the run itself, not one of its data loader workers
    raise AssertionError("the training run is not running")


@pytest.mark.skipif(
    not OPENCODE.exists(), reason="opencode not installed (`make test` does, with npm)"
)
def test_continue_after_a_background_launch_carries_what_the_agent_did(
    gpu_server: Server,  # noqa: F811  (the fixture imported above)
    workspace: Path,
    tmp_path: Path,
) -> None:
    server = gpu_server  # its CUDA OOM happens on a machine with GPUs (a stand-in nvidia-smi)
    home = tmp_path / "home"
    home.mkdir()
    env = offline_env(home, workspace)
    (workspace / ".datastore-token").write_text(SECRET)  # the user's, kept out of git
    model = ScriptedOpenAI(
        [
            Step(bash=f"{TOKEN_FROM_FILE} {LAUNCH} --batch-size 256 > train1.log 2>&1 &"),
            Step(bash="sleep 2; tail -2 train1.log"),
            Step(bash=f"{TOKEN_FROM_FILE} {LAUNCH} --batch-size 64 > train.log 2>&1 &"),
            Step(bash="sleep 3; tail -2 train.log"),
            Step(bash='grep -n -A12 "def stage_shards" train.py'),
            Step(text=LAST_WORDS),
            Step(text="Picking up where we were."),
        ]
    )
    config = home / ".config" / "opencode" / "opencode.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps(provider_config(model), indent=2))
    # installed the way a user installs it: one command, nothing registered by hand
    installed = subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", server.url, "install", "opencode"],
        capture_output=True, text=True, check=True, env=env, cwd=workspace,
    )  # fmt: skip
    assert "updated" in installed.stdout, installed.stdout + installed.stderr
    assert (home / ".config" / "opencode" / "plugins" / "ctxd.js").exists()
    # the 1.x form: the installed opencode is 1.18.33, read from its npm package
    assert json.loads(config.read_text())["mcp"]["ctxd"]["url"] == f"{server.url}/mcp"
    try:
        opencode(["The training run stalls after three steps; find out why."], workspace, env)
        come_back_later()
        opencode(["--continue", "continue"], workspace, env)
    finally:
        model.close()
    # the agent's last reply, which the plugin sends as the session goes idle
    sid = trainer_session(server)
    base = f"{server.url}/api/sessions/{sid}/snapshots"
    taken = httpx.post(base, json={"force": True}, timeout=60).json()["header"]["version"]
    narrative = httpx.get(f"{base}/{taken}", timeout=10).json()["narrative"]
    assert narrative["agent_said"]["text"] == "Picking up where we were.", narrative
    prompts = [m["text"] for m in narrative["user_messages"]]
    assert len(prompts) == 2 and "stalls after three steps" in prompts[0], prompts
    assert prompts[1] == "continue", prompts  # the bare "continue", kept as typed

    context = model.context_of_last_turn()
    (Path(__file__).parent / "artifacts").mkdir(exist_ok=True)
    (Path(__file__).parent / "artifacts" / "harness_opencode_continue.txt").write_text(context)
    run = trainer(workspace)

    # once, in the turn of the bare "continue"
    assert context.count("## Handover") == 1, context
    assert "continue" in context.split("## Handover")[0].lower()
    # the objective from the first prompt, in the user's words
    assert "stalls after three steps" in context
    # the launch the agent made in the background: its PID, flags and log tail
    assert str(run.pid) in context, context
    assert "--batch-size 64" in context or "--batch-size" in context
    assert "waiting for dataloader worker 3 (shard-3.bin: from the cache)" in context
    # what the agent's newest look at the code showed it: the cache check it read
    assert 'What `grep -n -A12 "def stage_shards" train.py` showed you at ' in context, context
    assert "        if os.path.lexists(path):" in context, context
    # the loader it waits for opens a FIFO older than the run: the user's run of yesterday's
    assert re.search(
        r"shard-3\.bin, a FIFO no process writes \(the open waits for a writer\); the FIFO is"
        r" older than this run: unchanged since .{23}, 15 h 1[67] min before pid \d+ \(the top"
        r" of its tree\) started",
        context,
    ), context
    # both attempts, in order, each with its own end: the first died at once of its own error
    # what the model is handed: no chatter of ctxd's own, however short the dump
    assert "Where this dump lives" not in context and "set one with `ctxd note" not in context
    attempts = context.split("## Attempts", 1)[1].split("\n## ", 1)[0]
    first, second = [line for line in attempts.splitlines() if line.startswith("| **attempt")]
    assert "--batch-size 256 > train1.log" in attempts and "torch.OutOfMemoryError" in first
    assert f"(pid {run.pid})" in second and "--batch-size 256 → 64" in second
    assert "DATASTORE_TOKEN" not in second, second  # read from the file both times: no change
    assert "OutOfMemoryError" not in second
    # the line as typed (it reads its token from a file); the tree's token redacted by name
    assert f"&& {TOKEN_FROM_FILE} nohup python3 train.py --lr" in attempts, attempts
    assert "DATASTORE_TOKEN=[REDACTED]" in context, context
    # a loader forked from the trainer waits in its own code, not in the parent's `w.start()`
    assert "w.start()" not in context and "Popen._launch" not in context, context
    # ctxd's MCP tools, from the entry `ctxd install opencode` merged into opencode.json
    offered = [tool["function"]["name"] for tool in model.requests[0]["tools"]]
    assert any(name.startswith("ctxd") for name in offered), offered
    # every model call's system prompt says, once, that ctxd records the session and where
    sid = trainer_session(server)
    for request in model.requests:
        system = "\n".join(model.texts(m) for m in request["messages"] if m["role"] == "system")
        assert system.count("[ctxd] ctxd records the working state of this session") == 1
        assert f"`ctxd resume {sid}` prints it" in system
    # the first turn got no dump: nothing was lost then
    first_turn = "\n".join(
        json.dumps(m) for m in model.requests[0]["messages"] if m["role"] == "user"
    )
    assert "## Handover" not in first_turn
    # the token in the run's environment: never in what ctxd adds, nor in its files
    assert SECRET not in context
    for path in server.data_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
