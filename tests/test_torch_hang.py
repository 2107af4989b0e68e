"""A real torch.distributed hang, as an agent meets it on a box without GPUs: the first
launch asks torchrun for NCCL and dies with torch's own error; the relaunch on gloo brings up
4 ranks, three of which wait in a real gloo all_reduce for the fourth, which blocks opening its
weight shard (a FIFO that last night's stopped export left). Through the hook endpoint as
Claude Code sends it, then "continue": the handover names the hang, the odd rank with its
source line, the ranks' collective, the first attempt's error, the user's latest instruction
and the agent's words.

Needs torch: the interpreter running the tests, or the one `CTXD_TORCH_PYTHON` names (CI
installs no torch: a 500 MB wheel for one test; it is run where torch is)."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import claude_hooks, free_port, start_server, stop_server, tagged, wait_until

STUCK_AFTER_S = 8
SERVE_TP = textwrap.dedent(
    '''
    """Tensor-parallel warm-up: each rank loads its weight shard, then all ranks all_reduce
    once; rank 0 then serves on --port."""
    import argparse, datetime, os, socket
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="nccl")
    parser.add_argument("--port", type=int, default=29700)
    parser.add_argument("--shards", default="shards")
    args, _ = parser.parse_known_args()
    rank = int(os.environ["RANK"])


    def log(msg):
        print(f"[{datetime.datetime.now():%Y-%m-%d %H:%M:%S} rank{rank}] {msg}", flush=True)


    def load_shard(rank):
        with open(os.path.join(args.shards, f"shard-{rank}.bin"), "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.float32)


    dist.init_process_group(args.backend)
    log(f"process group up ({args.backend}, world size {dist.get_world_size()})")
    weights = load_shard(rank)
    log(f"shard loaded: {weights.numel()} floats")
    t = weights.sum().reshape(1)
    dist.all_reduce(t)
    log(f"all_reduce done: {t.item()}")
    if rank == 0:
        server = socket.create_server(("127.0.0.1", args.port))
        log(f"listening on {args.port}")
        while True:
            server.accept()[0].close()
    dist.barrier()
    '''
)


def ended(pid: int) -> bool:
    try:
        process = psutil.Process(pid)
        return process.status() == psutil.STATUS_ZOMBIE and process.num_threads() <= 1
    except psutil.NoSuchProcess:
        return True


def torch_python() -> str:
    for python in (os.environ.get("CTXD_TORCH_PYTHON"), sys.executable):
        if python and subprocess.run([python, "-c", "import torch.distributed"],
                                     capture_output=True).returncode == 0:  # fmt: skip
            return python
    pytest.skip("torch is not installed (set CTXD_TORCH_PYTHON to an interpreter that has it)")


def test_a_real_gloo_hang_is_handed_over_with_its_odd_rank(tmp_path: Path, tag: str) -> None:
    python = torch_python()
    bin_dir = Path(python).parent  # torchrun lives beside its interpreter
    workspace = tmp_path / "tp-warmup"
    (workspace / "logs").mkdir(parents=True)
    (workspace / "shards").mkdir()
    (workspace / "serve_tp.py").write_text(SERVE_TP)
    for rank in range(3):
        (workspace / "shards" / f"shard-{rank}.bin").write_bytes(bytes(4096))
    # last night's export was stopped while it streamed shard 3: its pipe is still there,
    # unchanged since, and the open never returns
    os.mkfifo(workspace / "shards" / "shard-3.bin")
    last_night = time.time() - (9 * 3600 + 41 * 60)
    os.utime(workspace / "shards" / "shard-3.bin", (last_night, last_night))
    env = {"CTXD_WATCH_ROOTS": f'["{tmp_path}"]', "CTXD_STUCK_AFTER_S": str(STUCK_AFTER_S)}
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    client = httpx.Client(base_url=server.url, timeout=60)
    shell = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    port = free_port()
    calls = 0

    hook = claude_hooks(client, "tp-1", workspace)

    def bash(command: str) -> str:
        nonlocal calls
        calls += 1
        done = subprocess.run(["bash", "-c", command], cwd=workspace, env=shell,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        hook("PostToolUse", tool_name="Bash", tool_use_id=f"toolu_{calls}",
             tool_input={"command": command},
             tool_response={"stdout": done.stdout, "stderr": done.stderr,
                            "interrupted": False})  # fmt: skip
        return done.stdout

    try:
        hook("UserPromptSubmit", prompt="The 4-rank TP warm-up (serve_tp.py) hangs before it"
             " ever listens. Find which rank and why.")  # fmt: skip
        first = (f"NCCL_DEBUG=INFO nohup torchrun --standalone --nproc-per-node 4 serve_tp.py"
                 f" --port {port} --tag {tag} > logs/tp1.log 2>&1 &")  # fmt: skip
        bash(first)
        launched = tagged(tag)
        wait_until(lambda: "Root Cause" in (workspace / "logs" / "tp1.log").read_text(),
                   "the NCCL launch to fail", limit=90)  # fmt: skip
        # torchrun prints its failure table, then tears down: its last thread ends before the
        # agent relaunches (a zombie no parent reaps is ended: its pidfd has told)
        wait_until(lambda: all(ended(pid) for pid in launched), "the NCCL launch to end",
                   limit=30)  # fmt: skip
        bash("grep -m1 Error logs/tp1.log")
        hook(
            "Stop",
            stop_hook_active=False,
            last_assistant_message="NCCL refuses to start here: this box has no GPUs.",
        )
        hook("UserPromptSubmit", prompt="Use gloo on this box, and keep NCCL_DEBUG=INFO for"
             " when we move back to the GPU nodes.")  # fmt: skip
        second = (f"NCCL_DEBUG=INFO nohup torchrun --standalone --nproc-per-node 4 serve_tp.py"
                  f" --backend gloo --port {port} --tag {tag} > logs/tp2.log 2>&1 &")  # fmt: skip
        bash(second)
        wait_until(lambda: (workspace / "logs" / "tp2.log").read_text().count("shard loaded")
                   == 3, "three ranks to load their shards", limit=90)  # fmt: skip
        bash("tail -3 logs/tp2.log")
        # the agent looks at the code the missing rank runs, and says what it saw
        bash('grep -n -B2 -A4 "def load_shard" serve_tp.py')
        hook("Stop", stop_hook_active=False,
             last_assistant_message="Relaunched on gloo: ranks 0-2 loaded their shards, rank 3"
             " has not, and load_shard opens shards/shard-3.bin as it does the others; waiting"
             f" for the all_reduce and for rank 0 to listen on {port}.")  # fmt: skip
        time.sleep(STUCK_AFTER_S + 6)  # the user comes back once it has hung
        dump = hook("UserPromptSubmit", prompt="continue")["context"]
        (Path(__file__).parent / "artifacts").mkdir(exist_ok=True)
        (Path(__file__).parent / "artifacts" / "torch_hang_continue.md").write_text(dump)
    finally:
        stop_server(server)

    handover = dump.split("## Handover", 1)[1].split("\n## ", 1)[0]
    assert "Find which rank and why" in handover
    assert "keep NCCL_DEBUG=INFO" in handover  # the user's latest instruction
    assert "waiting for the all_reduce" in handover  # the agent's own last words
    # and what its look at the code showed it
    assert 'What `grep -n -B2 -A4 "def load_shard" serve_tp.py` showed you at ' in dump, dump
    assert "**stuck**" in handover and "4 workers expected (--nproc-per-node 4), 4 alive" in (
        handover
    )
    # the odd rank, by its own source line and what it opens; the others in the collective
    assert "rank 3 (pid" in handover and "with open(os.path.join(" in handover, handover
    assert "shard-3.bin, a FIFO no process writes" in handover, handover
    assert "the FIFO is older than this run" in handover and " 9 h 41 min before pid" in handover
    assert "`dist.all_reduce(t)`" in handover and "torch.distributed all_reduce" in handover
    # the first attempt ended with torch's own error, read from its own log
    # (torch's CUDA builds: no GPU found; its CPU builds: no NCCL in the build)
    assert any(
        error in dump
        for error in (
            "ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
            "RuntimeError: Distributed package doesn't have NCCL built in",
        )
    ), dump
    assert first in dump and second in dump  # both lines as the agent wrote them
    assert "NCCL_DEBUG=INFO" in dump.split("Environment:", 1)[1]
    assert len(tagged(tag)) == 5  # torchrun and its 4 ranks still hang (ended by the tag)
