"""A single-node Slurm of its own (Debian's slurmctld, slurmd and munge), for the slurm watch's
tests and the engines bench: its munge key, slurm.conf, state and spool in one folder, its
daemons on free ports, ended by their handles. Root only (slurmd runs jobs as their users).
"""

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue")


def missing() -> str | None:
    """Why no single-node Slurm can be started here; None when one can."""
    if os.geteuid() != 0:
        return "a single-node Slurm needs root (slurmd runs jobs as their users)"
    absent = [name for name in DAEMONS if shutil.which(name) is None]
    if absent:
        return f"not installed: {', '.join(absent)} (apt-get install slurm-wlm munge)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(ready: Callable[[], object], what: str, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


@dataclass
class Cluster:
    conf: Path
    jobs: Path  # where jobs run and write their output

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def sbatch(self, *args: str) -> str:
        done = subprocess.run(
            ["sbatch", "--parsable", *args],
            cwd=self.jobs,
            env=self.env(),
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip().split(";")[0]

    def state(self, job: str) -> str:
        out = subprocess.run(
            ["scontrol", "show", "job", "-o", job], env=self.env(), capture_output=True, text=True
        ).stdout
        return out.split("JobState=")[1].split()[0] if "JobState=" in out else ""

    def wait_state(self, job: str, states: set[str], within: float = 60) -> str:
        found: list[str] = []

        def reached() -> bool:
            found[:] = [self.state(job)]
            return found[0] in states

        _wait(reached, f"job {job} to be {states}", within)
        return found[0]


def write_conf(root: Path) -> Path:
    node = socket.gethostname()
    cpus = max(2, os.cpu_count() or 2)
    conf = root / "slurm.conf"
    conf.write_text(
        f"""ClusterName=ctxdtest
SlurmctldHost={node}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/sock
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# the gatherer sstat reads a running step's CPU and memory from, polled each second
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
AccountingStorageType=accounting_storage/none
MinJobAge=3600
ReturnToService=2
NodeName={node} CPUs={cpus} State=UNKNOWN
# a node that never comes: a job that asks for its feature stays pending
NodeName=ghost NodeAddr=127.0.0.9 CPUs=1 Features=h200 State=FUTURE
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
    )
    return conf


@contextmanager
def running(root: Path) -> Iterator[Cluster]:
    """munged, slurmctld and slurmd under `root`, until the node is idle; stopped after."""
    root.chmod(0o755)
    for sub in ("state", "spool", "munge", "jobs"):
        (root / sub).mkdir()
        (root / sub).chmod(0o755)
    key = root / "munge" / "key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = write_conf(root)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    munge = root / "munge"
    started: list[subprocess.Popen] = []
    try:
        started.append(
            subprocess.Popen(
                [
                    "munged",
                    "-F",
                    "--force",
                    "--num-threads=4",
                    f"--socket={munge}/sock",
                    f"--key-file={key}",
                    f"--log-file={munge}/log",
                    f"--pid-file={munge}/pid",
                    f"--seed-file={munge}/seed",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        _wait(lambda: (munge / "sock").exists(), "munged's socket")
        for daemon in ("slurmctld", "slurmd"):
            started.append(
                subprocess.Popen(
                    [daemon, "-D", "-f", str(conf)],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-o", "%t", "-n", socket.gethostname()],
                                 env=env, capture_output=True, text=True).stdout  # fmt: skip
            return out.strip() == "idle"

        _wait(idle, "the node to be idle", within=120)
        yield Cluster(conf=conf, jobs=root / "jobs")
    finally:
        for proc in reversed(started):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
