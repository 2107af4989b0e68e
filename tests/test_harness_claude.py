"""The real Claude Code CLI, offline against a scripted model, with ctxd's hooks as installed.

Nothing is registered with ctxd by hand: the scripted agent launches an SGLang-like server
with `nohup` that dies at once with CUDA out of memory, relaunches it with other flags (it
then waits forever for its ranks: rank 3 opens a FIFO an earlier run of the user's left in
the weights' cache) and rebuilds a wheel; then the user sends a bare "continue". What the
model receives for that turn is what this test reads.
"""

import contextlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import psutil
import pytest
from ctxd.render import pagedata
from ctxd.store.database import Store

from tests.conftest import Server, start_server, stop_server, wait_until
from tests.scripted_model import ScriptedModel, Step

CLAUDE = Path(__file__).resolve().parents[1] / ".harness" / "node_modules" / ".bin" / "claude"
SECRET = "wst_Zq8vR2mXw4LkP9sT7yB3nC6dF1gH5jK0aE"  # the weight store's token
# Read from the user's file as the agent launches: the line holds no secret, so it is shown as
# typed and runs again as it is. Codex types SECRET itself, and so does Gemini (Gemini CLI runs
# no command with `$(…)`: test_harness_gemini_adapter).
TOKEN_FROM_FILE = "WEIGHTS_TOKEN=$(cat ~/.weights-token)"
# The user's first prompt: the hang is the user's report; the conversation reproduces it.
ASK = (
    "Bring up our SGLang server for Llama-3.1-8B-Instruct on this 8-GPU box: it hangs while loading"
    " the weights and never opens its port. Find out why."
)
# What the agent says at the end of its first turn, having read the relaunch's log and the
# launcher's staging code: what it changed, what the log told it (rank 3 not ready, its slice
# from the cache), what the code does with the cache, and what it does next.
LAST_WORDS = (
    "Relaunched with --mem-fraction-static 0.85 (0.95 ran out of memory), CUDA graphs off and"
    " debug logging: it got past the OOM, but rank 3 has not reported ready, and its slice came"
    " from the cache. stage_weights streams from the store only the slices missing from"
    " .weights-cache: any file there, whatever its type, counts as cached. Next I find out why"
    " rank 3 does not load its cached slice."
)
# The agent's look at the relaunch's log before it answers: 3 s, past the launcher's first
# report of which ranks are ready; then at the code that decides where a slice comes from.
LOOK = "sleep 3; tail -3 server.log"
READ = 'grep -n -A12 "def stage_weights" launch_server.py'

LAUNCHER = '''\
"""An SGLang-like launcher: it starts its 8 tensor-parallel workers (RANK set, `--tp-rank N`,
the server's own flags), which each read their slice of the weights and then wait for every
rank to report ready. A slice not in the cache yet is streamed from the weight store through
a pipe and kept in the cache as a file; a slice already there is read from it. The user's run
of yesterday was stopped while tp3 streamed: its pipe is still in the cache, a FIFO nothing
will write, which the cache check takes for a slice, so rank 3's open() never returns, the
others wait forever and the port never opens. With a static memory fraction over 0.9 and
CUDA graphs on, graph capture runs out of GPU memory after the load, as SGLang's does. Log
lines carry the real time; the stand-in nvidia-smi shows the workers holding memory."""
import argparse, datetime, glob, os, subprocess, sys, threading, time

def log(text, file=sys.stdout, who=" TP0"):  # the launcher's own lines carry no rank
    print(f"[{datetime.datetime.now():%Y-%m-%d %H:%M:%S}{who}] {text}", file=file, flush=True)

def slice_path(rank):
    return os.path.join(os.environ["WEIGHTS_CACHE"], f"tp{rank}.safetensors")

def load_shard(rank):
    with open(slice_path(rank), "rb") as weights:
        return weights.read()

def wait_for_all_ranks(rank):
    while not os.path.exists(f"/dev/shm/ready-{os.getppid()}"):
        time.sleep(0.5)

def worker(rank):
    held = bytearray(48 * 2**20)  # some host memory, as a CUDA process has
    for _ in range(3):  # its NCCL and pin-memory threads, idle
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    load_shard(rank)
    open(os.path.join(os.environ["WEIGHTS_CACHE"], f".loaded-{os.getppid()}-{rank}"), "w").close()
    wait_for_all_ranks(rank)

def stream_slice(path):
    """A slice streamed from the weight store into its pipe by this launcher's stream thread,
    as the rank reads it, then kept in the cache as a file."""
    data = bytes(4096)  # as the store sends it
    with open(path, "wb") as pipe:
        pipe.write(data)
    with open(path + ".part", "wb") as kept:
        kept.write(data)
    os.replace(path + ".part", path)

def stage_weights(cache, tp):
    """Each rank's slice as a pipe its stream thread fills, so no rank waits for a whole copy;
    a slice in the cache already is read from there. Returns the ranks whose slice was, and
    the stream threads."""
    os.makedirs(cache, exist_ok=True)
    cached, streams = [], []
    for rank in range(tp):
        path = os.path.join(cache, f"tp{rank}.safetensors")
        if os.path.lexists(path):
            cached.append(rank)
            continue
        os.mkfifo(path)
        streams.append(threading.Thread(target=stream_slice, args=(path,), daemon=True))
        streams[-1].start()
    return cached, streams

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path"); parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--port", type=int); parser.add_argument("--log-level", default="info")
    parser.add_argument("--disable-cuda-graph", action="store_true")
    parser.add_argument("--mem-fraction-static", type=float, default=0.88)
    parser.add_argument("--worker", action="store_true"); parser.add_argument("--tp-rank", type=int)
    args = parser.parse_args()
    if args.worker:
        worker(args.tp_rank)
        sys.exit(0)
    log(f"server_args: {vars(args)}")
    cache = os.path.abspath(".weights-cache")
    debug = args.log_level == "debug"
    cached, streams = stage_weights(cache, args.tp)
    if debug:
        token = os.environ.get("WEIGHTS_TOKEN", "")  # debug logging prints the header
        log(f"DEBUG stage_weights: {len(cached)} of {args.tp} slices in {cache} already, read"
            f" from there; {args.tp - len(cached)} from http://weights.lab:8081/llama-8b/"
            f" (Authorization: Bearer {token})", who="")
    workers = [
        subprocess.Popen([sys.executable, "launch_server.py", "--worker", "--tp-rank", str(r),
                          *sys.argv[1:]],
                         env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r),
                              "WEIGHTS_CACHE": cache})
        for r in range(args.tp)
    ]
    for shard in range(1, 5):  # an 8B model: 4 shards, some 16 GB, a second from NVMe
        time.sleep(0.25)
        log(f"Loading safetensors checkpoint shards: {shard * 25}% Completed | {shard}/4")
    for stream in streams:  # the streamed slices are read and kept before the load ends
        stream.join(timeout=30)
    log("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=137.62 GiB")
    log(f"KV Cache is allocated. mem_fraction_static={args.mem_fraction_static}")
    if not args.disable_cuda_graph and args.mem_fraction_static > 0.9:
        log("Capture cuda graph begin. This can take up to several minutes.")
        print("Traceback (most recent call last):", file=sys.stderr)
        print('  File "launch_server.py", line 71, in <module>', file=sys.stderr)
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has"
              " a total capacity of 139.81 GiB of which 1.19 GiB is free. Of the allocated memory"
              " 132.84 GiB is allocated by PyTorch, and 1.02 GiB is reserved by PyTorch but"
              " unallocated.", file=sys.stderr)
        for w in workers:
            w.kill()
        sys.exit(1)
    log("Cuda graph is disabled." if args.disable_cuda_graph else "Capture cuda graph end.")
    log("Waiting for all TP ranks to report ready")
    began = since = time.monotonic()
    ready = set()
    while time.monotonic() - began < 30:  # at least a second, until no rank came for one
        time.sleep(0.25)  # (a busy box loads slower)
        now = {int(p.rsplit("-", 1)[1]) for p in glob.glob(f"{cache}/.loaded-{os.getpid()}-*")}
        if now != ready:
            ready, since = now, time.monotonic()
        settled = time.monotonic() - since >= 1 and time.monotonic() - began >= 1
        if len(ready) == args.tp or settled:
            break
    if debug:
        late = [r for r in range(args.tp) if r not in ready]
        came = {r: "from the cache" if r in cached else "streamed" for r in late}
        said = ", ".join(f"rank {r} (tp{r}.safetensors: {came[r]})" for r in late)
        waited = round(time.monotonic() - began)
        log(f"DEBUG wait_for_all_ranks: {len(ready)} of {args.tp} ranks ready after {waited} s;"
            f" not yet: {said}", who="")
    for w in workers:
        w.wait()
'''

GITIGNORE = "logs/\n*.log\ndist/\n.weights-cache/\n"

MAKEFILE = """\
wheel:
\tmkdir -p dist
\tpython3 -c "import os, zipfile; z = zipfile.ZipFile('dist/kernel-0.2-py3-none-any.whl', 'w', \\
\t  zipfile.ZIP_DEFLATED); z.writestr('kernel/__init__.py', 'from .tables import TABLE'); \\
\t  z.writestr('kernel/tables.py', 'TABLE = %r' % os.urandom(24000).hex()); \\
\t  z.writestr('kernel-0.2.dist-info/METADATA', 'Name: kernel\\nVersion: 0.2')"
"""

LAUNCH = (
    "nohup python3 launch_server.py --model-path meta-llama/Llama-3.1-8B-Instruct --tp 8"
    " --port 30000"
)

# A stand-in `nvidia-smi` first on the service's PATH: 8 H200s, the launcher's workers (its
# children, in the scenario's checkout) holding 119 GiB each, idle, the way a hang after the weights
# loaded looks; the CUDA error of the first launch then happens on a machine with GPUs.
NVIDIA_SMI = """\
#!/usr/bin/env python3
import os, sys
def workers():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
            cwd = os.readlink(f"/proc/{pid}/cwd")
            ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            parent = open(f"/proc/{ppid}/cmdline", "rb").read()
        except OSError:
            continue
        line = b" ".join(cmd)
        if cwd.endswith("/sglang-debug") and b"launch_server.py" in line and b"launch_server.py" in parent:
            found.append(int(pid))  # a tensor-parallel worker: a GPU each
        elif cwd.endswith("/trainer") and b"train.py" in line and b"train.py" not in parent:
            found.append(int(pid))  # a training run on GPU 0
    return sorted(found)[:8]
# What a process holds: its CUDA context alone while it has not loaded its weights (the rank
# still reading its slice), a trainer its batch, a loaded TP worker 0.85 of an H200.
def used_mib(pid):
    try:
        stack = open(f"/proc/{pid}/wchan").read()
        cmd = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return 0
    if "fifo" in stack or "wait_for_partner" in stack:
        return 612
    return 41230 if b"train.py" in cmd else 121190
held = workers()
query = next((a for a in sys.argv if a.startswith("--query")), "")
if query.startswith("--query-gpu"):
    print("index, uuid, name, driver_version, compute_cap, utilization.gpu [%], memory.used [MiB], memory.total [MiB], temperature.gpu, power.draw [W], power.limit [W]")
    for i in range(8):
        used = used_mib(held[i]) + 510 if i < len(held) else 4  # with the driver's own
        print(f"{i}, GPU-0000000{i}-h200, NVIDIA H200, 570.211.01, 9.0, 0, {used}, 143771, 34, 118.50, 700.00")
elif query.startswith("--query-compute-apps"):
    print("gpu_uuid, pid, process_name, used_gpu_memory [MiB]")
    for i, pid in enumerate(held):
        print(f"GPU-0000000{i}-h200, {pid}, python3, {used_mib(pid)}")
else:
    print("NVIDIA-SMI 570.211.01    Driver Version: 570.211.01    CUDA Version: 12.8")
"""  # noqa: E501


# The user comes back once the relaunch has hung: ctxd calls a tree stuck after this long idle
# (2 min by default; shortened so the test does not wait that long).
STUCK_AFTER_S = 6


def come_back_later() -> None:
    """The user's pause before "continue": past the stuck threshold, and a sample or two."""
    time.sleep(STUCK_AFTER_S + 5)


@pytest.fixture
def gpu_server(tmp_path: Path) -> Iterator[Server]:
    """ctxd serving with the stand-in nvidia-smi first on its PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"
    env = {"PATH": path, "CTXD_STUCK_AFTER_S": str(STUCK_AFTER_S)}
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        yield srv
    finally:
        stop_server(srv)


@contextlib.contextmanager
def checkout(top: Path, message: str) -> Iterator[None]:
    """`top` committed as a git checkout of its own; after, the processes working in it (this
    test's own) are killed."""
    git = ["git", "-C", str(top), "-c", "user.name=dev", "-c", "user.email=dev@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", message], check=True)
    try:
        yield
    finally:
        for proc in psutil.process_iter(["cwd"]):
            if proc.info["cwd"] and Path(proc.info["cwd"]).is_relative_to(top):
                proc.kill()


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    # a checkout as a person has one, not under pytest's folders: the model reads its path
    top = Path(tempfile.mkdtemp(prefix="work-")) / "sglang-debug"
    top.mkdir()
    (top / "launch_server.py").write_text(LAUNCHER)
    (top / "Makefile").write_text(MAKEFILE)
    (top / ".gitignore").write_text(GITIGNORE)
    # the user's run of yesterday evening, stopped while it streamed rank 3's slice: its pipe
    # is still in the (ignored) cache, unchanged since
    left = top / ".weights-cache" / "tp3.safetensors"
    left.parent.mkdir()
    os.mkfifo(left)
    yesterday = time.time() - (15 * 3600 + 17 * 60)
    os.utime(left, (yesterday, yesterday))
    with checkout(top, "SGLang launcher and the kernel's Makefile"):
        yield top
    shutil.rmtree(top.parent, ignore_errors=True)


def claude_env(home: Path, model: ScriptedModel) -> dict[str, str]:
    """Claude Code's environment offline: the scripted model, a home of its own, no ctxd
    setting of the test run's."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "ANTHROPIC_"))},
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-ant-scripted-model",
        "IS_SANDBOX": "1",  # root may skip permission prompts only in a sandbox
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def claude(args: list[str], cwd: Path, home: Path, model: ScriptedModel) -> None:
    env = claude_env(home, model)
    argv = [str(CLAUDE), *args, "--dangerously-skip-permissions", "--output-format", "json"]
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def running_launcher(workspace: Path) -> psutil.Process:
    """The relaunched server: the process of this test's folder that is not a worker."""
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        cmdline = proc.info["cmdline"] or []
        mine = proc.info["cwd"] and Path(proc.info["cwd"]).is_relative_to(workspace)
        if (
            mine
            and "--disable-cuda-graph" in cmdline
            and not any("launch_server.py" in " ".join(p.cmdline()) for p in [proc.parent()] if p)
        ):
            return proc
    raise AssertionError("the relaunched server is not running")


def check_scenario_dump(context: str, launcher: psutil.Process, data_dir: Path) -> None:
    """What the model must be handed of this scenario, whatever the harness: the objective,
    the running launch with its tree, flags, log and port, both attempts each with its own
    end, the wheel, and never the secret (nor in ctxd's files). Gemini CLI hands the model
    its hooks' text with `<`, `>` and `&` as HTML entities: they are read back first."""
    context = html.unescape(context)
    # the objective from the first prompt, as the user's words
    assert "it hangs while loading the weights" in context
    # the running launch: PID, tree, flags
    assert str(launcher.pid) in context
    workers = launcher.children()
    assert len(workers) == 8 and all(str(w.pid) in context for w in workers[:1])
    assert "--disable-cuda-graph" in context and "--log-level" in context
    # its log tail, its expected port not listening
    assert "Waiting for all TP ranks to report ready" in context
    assert re.search(r"30000.*not listening|not listening.*30000", context), context
    # both attempts, in order, a table row each: the first died after the load, with its
    # own log's error; the second runs, with what changed; the old error is not the live
    # attempt's; each one's whole line as the agent wrote it, in its folder
    attempts = context.split("## Attempts", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in attempts.splitlines() if line.startswith("| **attempt")]
    first, second = rows
    assert re.search(
        r"(died|exited with status 1) after \d+ s|its process gone before ctxd first scanned",
        first,
    ), first
    assert "torch.OutOfMemoryError: CUDA out of" in first
    assert f"(pid {launcher.pid})" in second and "running for" in second
    assert "--mem-fraction-static 0.95 → 0.85" in second and "OutOfMemoryError" not in second
    lines = attempts.split("as you wrote it:", 2)
    assert "--mem-fraction-static 0.95 > logs/attempt1.log 2>&1 &" in lines[1]
    assert (
        f"cd {launcher.cwd()} && " in lines[2]
        and "--log-level debug > server.log 2>&1 &" in lines[2]
    )
    # the handover: the objective, what runs now in its phase with its workers, the failure
    handover = context.split("## Handover", 1)[1].split("\n## ", 1)[0]
    assert (
        f"(pid {launcher.pid})" in handover and "8 workers expected (--tp 8), 8 alive" in handover
    )
    assert (
        "**stuck**" in handover
        and "**Last attempt that died, before what runs now**: attempt 1" in (handover)
    )
    # the running tree's token, by name; where a line typed it, where its value is
    assert "WEIGHTS_TOKEN=[REDACTED]" in context
    if "WEIGHTS_TOKEN=[REDACTED] " in lines[2]:
        assert f"`/proc/{launcher.pid}/environ`" in attempts
    # one clock: no launch reads older than the prompt that asked for it (a kernel start
    # time is read from whole-second boot time, up to a second early)
    asked = re.search(r"\*\*Objective\*\* \(the user's first prompt, (\d\d:\d\d:\d\d)\)", handover)
    assert asked, handover
    # the prompt that resumed the conversation, quoted: the dump came with it, not before it
    assert re.search(
        r"\*\*The user's latest message\*\* \(\d\d:\d\d:\d\d, the one this dump was taken"
        r" for\): “continue”: go on where",
        handover,
    ), handover
    assert all(row.split(" | ")[1] >= asked[1] for row in rows), (asked[1], rows)
    assert "stuck (see Now)" in second
    now = context.split("## Now", 1)[1].split("\n## ", 1)[0]
    assert "OutOfMemoryError" not in "".join(x for x in now.splitlines() if "not listening" in x)
    # past the threshold, idle with its port closed: stuck, and rank 3 is the one apart, named
    # by the job's own line (the others wait for it)
    stuck = [line for line in now.splitlines() if "stuck:" in line]
    assert stuck and "critical" in stuck[0], now
    # where the ranks wait is said once, in the handover's line of the running attempt
    assert "where each waits: as the handover says" in stuck[0], stuck[0]
    assert "rank 3 (pid" in handover and "open(slice_path(rank)" in handover, handover
    assert "opening /" in handover and "/.weights-cache/tp3.safetensors" in handover, handover
    assert "a FIFO no process writes" in handover, handover  # the kernel's fifo_open says so
    # and it was there before the run: the user's run of yesterday left it
    assert re.search(
        r"the FIFO is older than this run: unchanged since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC,"
        r" 15 h 1[67] min before pid \d+ \(the top of its tree\) started",
        handover,
    ), handover
    assert "attempt 2's log says last: “" in handover, handover  # the attempt's, not the launcher's
    # the note names only what the dump would have shown: a worker's environment never is
    note = context.split("left out: ", 1)[-1].split("\n", 1)[0]
    assert "workers' environments" not in note and "relaunch blocks" not in note, note
    assert "wait_for_all_ranks" in context or "time.sleep(0.5)" in handover, handover
    # no chatter of ctxd's own in what the model gets
    assert "Where this dump lives" not in context and "Watched without being asked" not in context
    # the rebuilt wheel and the recent commands
    assert "kernel-0.2-py3-none-any.whl" in context
    assert "make wheel" in context
    # the launcher's debug line on the ranks not ready, in the handover or the log's tail
    assert "rank 3 (tp3.safetensors: from the cache)" in context
    # what the agent's newest look at the code showed it: the cache check it read
    assert f"What `{READ}` showed you at " in context, context
    assert "        if os.path.lexists(path):" in context, context
    # the token the launcher's debug line printed is shown redacted, the line kept, where shown
    if "(Authorization: Bearer" in context:
        assert "(Authorization: Bearer [REDACTED])" in context
    # the token the agent put on a command line: never in what ctxd adds, nor in its files
    assert SECRET not in context
    for path in data_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


@pytest.mark.skipif(
    not CLAUDE.exists(), reason="Claude Code not installed (`make test` does, with npm)"
)
def test_continue_after_unregistered_work_carries_what_the_agent_did(
    gpu_server: Server, workspace: Path, tmp_path: Path
) -> None:
    server = gpu_server
    home = tmp_path / "home"
    home.mkdir()
    # installed the way a user installs it: one command, nothing registered by hand
    installed = subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", server.url, "install", "claude"],
        capture_output=True, text=True, check=True, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    assert "created" in installed.stdout

    model = ScriptedModel(
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
    (home / ".weights-token").write_text(SECRET)  # the user's, as a person keeps a token
    try:
        claude(
            ["-p", ASK],
            workspace, home, model,
        )  # fmt: skip
        come_back_later()
        claude(["--continue", "-p", "continue"], workspace, home, model)
    finally:
        model.close()
    check_conversation_words(server)

    context = model.context_of_last_turn()
    (Path(__file__).parent / "artifacts").mkdir(exist_ok=True)
    (Path(__file__).parent / "artifacts" / "harness_claude_continue.txt").write_text(context)
    launcher = running_launcher(workspace)

    # once, and within Claude Code's 10,000-character hook output limit
    assert context.count("## Handover") == 1, context
    added = context[context.index("## Handover") - 400 :]
    assert len(added) <= 10_000
    check_scenario_dump(context, launcher, server.data_dir)
    # the line read the token from a file: shown as typed, so it runs again as it is
    assert f"&& {TOKEN_FROM_FILE} nohup python3 launch_server.py" in context, context
    # `claude -p` is never woken: its waiters went at once (it would have waited for them
    # before exiting), so no news was spent on it and the handover tells none
    assert "News ctxd sent to wake you" not in context
    # Claude Code posted its events itself: the only ctxd processes it started per event were
    # the two SessionStart hooks (one per run), whatever the number of tool calls and prompts
    health = httpx.get(f"{server.url}/health", timeout=10).json()
    assert health["hooks_by_command"] == 2 and health["hooks_posted"] >= 10, health


def check_conversation_words(server: Server) -> None:
    """The Stop hook's `last_assistant_message` and the prompts are in the narrative: the
    version the resume took holds the first turn's last words; one taken now, the second's,
    and both prompts, the bare "continue" as an empty text."""
    (session,) = httpx.get(f"{server.url}/api/sessions", timeout=10).json()
    base = f"{server.url}/api/sessions/{session['id']}/snapshots"
    narratives = [
        httpx.get(f"{base}/{v['version']}", timeout=10).json()["narrative"]
        for v in httpx.get(base, timeout=10).json()
    ]
    said = [n["agent_said"]["text"] for n in narratives if n["agent_said"]]
    assert LAST_WORDS in said, said
    taken = httpx.post(base, json={"force": True}, timeout=60).json()["header"]["version"]
    now = httpx.get(f"{base}/{taken}", timeout=10).json()["narrative"]
    assert now["agent_said"]["text"] == "Picking up where we were."
    prompts = [m["text"] for m in now["user_messages"]]
    assert prompts == [ASK, "continue"], prompts  # the resumed turn's word, as typed


SUMMARY = "The user asked which dataset shard is corrupt; the agent found shard 7 is."
LONG_OUTPUT = (
    "for n in $(seq 1 40000); do echo shard $n ok; done;"
    " echo 'FATAL: checksum mismatch in shard 7, see verify.log'"
)


def recorded(server: Server, sid: str, command: str) -> dict:
    """The command action ctxd recorded, once it has (PostToolUse is reported asynchronously)."""
    store = Store(server.data_dir / "ctxd.db")

    def found() -> list[dict]:
        return [a for a in store.list_actions(sid, "command") if a["command"] == command]

    return wait_until(found, f"{command!r} recorded")[0]


def notes(server: Server, sid: str) -> dict[int, str]:
    """The note of each version of a session."""
    base = f"{server.url}/api/sessions/{sid}/snapshots"
    versions = [v["version"] for v in httpx.get(base, timeout=10).json()]
    return {
        n: httpx.get(f"{base}/{n}", timeout=10).json()["header"]["note"] or "" for n in versions
    }


@pytest.mark.skipif(
    not CLAUDE.exists(), reason="Claude Code not installed (`make test` does, with npm)"
)
def test_a_long_output_and_a_compaction_as_the_real_cli_reports_them(
    server: Server, tmp_path: Path
) -> None:
    home, work = tmp_path / "home", tmp_path / "shards"
    home.mkdir()
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", server.url, "install", "claude"],
        capture_output=True, text=True, check=True, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    # (the `sleep` keeps `claude -p` running while the long output's asynchronous hook reports)
    steps = [Step(bash=LONG_OUTPUT), Step(bash="sleep 2; ls"), Step(text="Shard 7 is corrupt.")]
    model = ScriptedModel([*steps, Step(text=SUMMARY)])
    try:
        claude(["-p", "Which dataset shard is corrupt? The loader says one is."], work, home, model)
        # its output was too long to inline: Claude Code kept it in a file, ctxd read its end
        action = recorded(server, "shards", LONG_OUTPUT)
        assert action["output_tail"].endswith(
            "FATAL: checksum mismatch in shard 7, see verify.log\n"
        )
        assert "shard 1 ok" not in action["output_tail"]
        assert isinstance(action["duration_s"], float)  # the CLI's duration_ms
        claude(["--continue", "-p", "/compact"], work, home, model)
    finally:
        model.close()
    # PreCompact took a version; PostCompact's summary (reported asynchronously) went with it
    store = Store(server.data_dir / "ctxd.db")
    compacting = "Claude Code: compaction (manual trigger)"
    (taken,) = [n for n, note in notes(server, "shards").items() if note == compacting]
    wait_until(lambda: store.harness_summary("shards", taken), "PostCompact's summary kept")
    page = pagedata.version_page(store, "shards", taken)
    assert page.harness_summary is not None, "PostCompact's summary was never kept"
    assert page.harness_summary.text == SUMMARY and page.harness_summary.harness == "Claude Code"
    assert "verify.log" in page.harness_summary.only_in_dump  # the dump has it, the summary not


class FailingModel(ScriptedModel):
    """A model API that refuses every request as too long (HTTP 400), as Anthropic's does."""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        class Refusing(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                error = {"type": "invalid_request_error", "message": "prompt is too long"}
                body = json.dumps({"type": "error", "error": error}).encode()
                self.send_response(400)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Refusing


@pytest.mark.skipif(
    not CLAUDE.exists(), reason="Claude Code not installed (`make test` does, with npm)"
)
def test_a_turn_the_api_refuses_leaves_a_snapshot_saying_so(server: Server, tmp_path: Path):
    home, work = tmp_path / "home", tmp_path / "refused"
    home.mkdir()
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", server.url, "install", "claude"],
        capture_output=True, text=True, check=True, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    model = FailingModel([])
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CTXD_", "ANTHROPIC_"))},
        "HOME": str(home), "ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "sk-ant-x",
        "IS_SANDBOX": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }  # fmt: skip
    argv = [str(CLAUDE), "-p", "Summarize the training logs.", "--output-format", "json"]
    try:
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=240)
    finally:
        model.close()
    assert done.returncode == 1  # the turn failed: Claude Code ran its StopFailure hooks
    failed = "Claude Code: the turn failed: invalid_request"
    wait_until(  # StopFailure is reported asynchronously
        lambda: any(n.startswith(failed) for n in notes(server, "refused").values()),
        "a snapshot of the failed turn",
    )
