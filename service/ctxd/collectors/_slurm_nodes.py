"""A running Slurm job's processes, collected on each of its nodes by Slurm itself.

`srun --jobid=N --overlap --ntasks-per-node=1` runs this module's one-shot collector on every
node the job holds, beside the job's own steps (`--overlap`: it waits for none of the job's
resources; no GPU asked). No ctxd service or token is needed there, only this package where
the job's nodes see the interpreter ctxd runs with (a shared filesystem, as a cluster's
software is). Each node prints one JSON line (its name and its processes); the server reads
them under one deadline, and each node that does not answer in time is named.

On a node (`python -m ctxd.collectors._slurm_nodes JOB`): the processes whose environment
holds SLURM_JOB_ID=JOB, but this collector's own step, each with its rank (SLURM_PROCID),
its state, where it waits (the kernel's view, and what it is blocked on), its CPU over a
short sample and, for an idle Python one, its stack (py-spy, where installed). Nothing is
redacted there: the server redacts what it stores, as for every collector.
"""

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from ctxd.collectors.proc import procfs, pystacks
from ctxd.collectors.proc.argv import is_python
from ctxd.models import SlurmTask

SAMPLE_S = 0.5  # CPU time read twice this far apart: what idles, and what runs
STACKS_BUDGET_S = 3.0
TASKS_MAX = 64  # processes of the job shown per node
IDLE_PERCENT = 1.0  # below this share of a core over the sample, a process idles
END_GRACE_S = 2.0  # srun's time to end its step once told to, past the deadline


def _environ(pid: int) -> dict[str, str]:
    """Its environment as psutil reads it (as the process collector does); {} when unread."""
    try:
        return psutil.Process(pid).environ()
    except psutil.Error:
        return {}


def _rank(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def tasks_here(job: str) -> list[dict[str, Any]]:
    """This node's processes of `job` (the node side), as SlurmTask fields."""
    mine = os.environ.get("SLURM_STEP_ID")
    found: dict[int, dict[str, Any]] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        env = _environ(pid)
        if env.get("SLURM_JOB_ID") != job:
            continue
        if mine is not None and env.get("SLURM_STEP_ID") == mine:
            continue  # this collector's own step
        try:
            stat = procfs.stat_fields(pid)
            argv = procfs.cmdline(pid)
        except OSError:
            continue  # gone meanwhile
        ticks[pid] = stat.cpu_ticks
        found[pid] = {
            # a rank is a step's task's: the batch script's processes have PROCID 0 too
            "pid": pid, "ppid": stat.ppid, "step": env.get("SLURM_STEP_ID"),
            "rank": _rank(env.get("SLURM_PROCID")) if env.get("SLURM_STEP_ID") else None,
            "name": stat.name, "argv": argv[:64],
            "state": stat.letter, "threads": stat.threads,
        }  # fmt: skip
        if len(found) >= TASKS_MAX:
            break
    time.sleep(SAMPLE_S)
    for pid, task in list(found.items()):
        try:
            after = procfs.stat_fields(pid)
        except OSError:
            del found[pid]  # ended during the sample
            continue
        spent = (after.cpu_ticks - ticks[pid]) / procfs.CLOCK_TICKS
        task["busy_percent"] = round(100 * spent / SAMPLE_S, 1)
        task["state"] = after.letter
        if after.letter in ("S", "D"):
            task["waits_in"], task["blocked_on"] = procfs.waiting(pid)
    idle_python = [
        pid
        for pid, task in found.items()
        if task["busy_percent"] < IDLE_PERCENT and task["argv"] and is_python(task["argv"][0])
    ]
    for pid, taken in pystacks.take(idle_python, STACKS_BUDGET_S, pystacks.py_spy()).items():
        found[pid]["stack"] = list(taken.lines)
        found[pid]["stack_note"] = taken.note
    node = socket.gethostname()
    return [{"node": node, **task} for task in found.values()]


@dataclass
class Collected:
    """What the job's nodes said through srun: their processes, the nodes that answered, and
    why the others did not (None when all did)."""

    tasks: list[SlurmTask] = field(default_factory=list)
    answered: set[str] = field(default_factory=set)
    problem: str | None = None


def collect(job: str, nodes: int, timeout_s: float, gpus: bool = False) -> Collected:
    """The job's processes on each of its `nodes` nodes, through `srun --overlap` (the server
    side), each node's answer read as it comes until `timeout_s`; then srun is told to end
    its step (SIGTERM, as a user's Ctrl-C would), and what did not answer is said. A job
    that holds GPUs gets a step that asks for none (`--gres=gpu:0`): else the step waits
    for them."""
    argv = ["srun", f"--jobid={job}", "--overlap", f"--nodes={nodes}", "--ntasks-per-node=1",
            *(["--gres=gpu:0"] if gpus else []),
            "--quiet", sys.executable, "-m", "ctxd.collectors._slurm_nodes", job]  # fmt: skip
    try:
        srun = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        return Collected(problem="`srun` not found: no Slurm client on this host")
    try:
        out, err = srun.communicate(timeout=timeout_s)
        late = False
    except subprocess.TimeoutExpired as expired:
        srun.terminate()  # srun ends its step on the nodes, then itself
        try:
            out, err = srun.communicate(timeout=END_GRACE_S)
        except subprocess.TimeoutExpired:
            srun.kill()
            out, err = srun.communicate()
        out = out or _text(expired.stdout)
        late = True
    found = Collected()
    for line in out.splitlines():
        try:
            said = json.loads(line)
        except ValueError:
            continue
        if isinstance(said, dict) and isinstance(said.get("node"), str):
            found.answered.add(said["node"])
            listed = said.get("tasks")
            if isinstance(listed, list):
                found.tasks += [SlurmTask.model_validate(t) for t in listed if isinstance(t, dict)]
    if len(found.answered) < nodes:
        first = next((x.strip() for x in err.splitlines() if x.strip()), "")
        found.problem = (
            f"did not answer through srun within {timeout_s:g} s"
            if late
            else f"did not answer through srun{f': {first[:300]}' if first else ''}"
        )
    return found


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].replace("_", "").isdigit():
        print("usage: python -m ctxd.collectors._slurm_nodes JOB", file=sys.stderr)
        return 2
    print(json.dumps({"node": socket.gethostname(), "tasks": tasks_here(argv[0])}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
