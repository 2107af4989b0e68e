"""The slurm watch against a real single-node Slurm (Debian's slurmctld, slurmd and munge).

The fixture (`bench/slurm_node.py`, which the engines bench shares) writes its own munge key
and slurm.conf into a temporary folder, starts munged, slurmctld and slurmd there on free
ports, waits for the node to be idle and stops them after. Root only (slurmd runs jobs as
their users), and only with the packages installed (`.ci/run` installs them when root);
skipped with the reason otherwise.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from ctxd.collectors import slurm
from ctxd.models import SessionIn, SlurmWatch
from ctxd.snapshotter import triggers

from bench import slurm_node
from bench.slurm_node import Cluster
from tests.conftest import (
    StepClock,
    start_server,
    stop_server,
    ticked_watcher,
    wait_until,
)

pytestmark = pytest.mark.skipif(slurm_node.missing() is not None, reason=str(slurm_node.missing()))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with slurm_node.running(tmp_path_factory.mktemp("slurm")) as running:
        yield running


@pytest.fixture(scope="module")
def ctxd(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    folder = tmp_path_factory.mktemp("ctxd")
    server = start_server(folder / "data", folder / "ctxd.log", env=cluster.env())
    try:
        with server.client() as client:
            yield client
    finally:
        stop_server(server)


def dump(client: httpx.Client, sid: str, *watches: dict) -> tuple[dict, str]:
    client.put(f"/api/sessions/{sid}", json={})
    for watch in watches:
        answer = client.post(f"/api/sessions/{sid}/watches", json=watch)
        assert answer.status_code == 201, answer.text
    return snapshot(client, sid)


def snapshot(client: httpx.Client, sid: str) -> tuple[dict, str]:
    taken = client.post(f"/api/sessions/{sid}/snapshots", json={"force": True}).json()
    version = taken["header"]["version"]
    return taken, client.get(f"/api/sessions/{sid}/snapshots/{version}/markdown").text


def test_a_job_that_runs_to_completion(cluster: Cluster, ctxd: httpx.Client) -> None:
    job = cluster.sbatch("-J", "runs", "-o", "runs.out", "--wrap", "echo hello; echo done")
    cluster.wait_state(job, {"COMPLETED"})

    taken, markdown = dump(ctxd, "runs", {"kind": "slurm", "job": job})

    (info,) = taken["observations"]["slurm"]["items"]
    assert info["state"] == "COMPLETED" and info["exit_code"] == 0 and info["signal"] is None
    assert info["nodes"] == socket.gethostname() and info["elapsed_s"] is not None
    assert info["logs"][0]["lines"] == ["hello", "done"]
    assert f"| job {job} (runs) | COMPLETED |" in markdown
    assert f"### job {job} (runs): `{cluster.jobs / 'runs.out'}`" in markdown
    assert not [s for s in taken["signals"] if s["code"].startswith("slurm")]


def test_a_job_that_fails(cluster: Cluster, ctxd: httpx.Client) -> None:
    job = cluster.sbatch(
        "-J",
        "fails",
        "-o",
        "fails.out",
        "--wrap",
        "echo 'RuntimeError: CUDA out of memory'; exit 3",
    )
    cluster.wait_state(job, {"FAILED"})

    taken, markdown = dump(ctxd, "fails", {"kind": "slurm", "name": "fails"})

    (info,) = taken["observations"]["slurm"]["items"]
    assert (info["state"], info["reason"], info["exit_code"]) == ("FAILED", "NonZeroExitCode", 3)
    (signal,) = [s for s in taken["signals"] if s["code"] == "slurm_failed"]
    assert signal["severity"] == "critical"
    assert f"slurm job {job} (fails) FAILED (NonZeroExitCode) exit 3 on" in signal["text"]
    assert "CUDA out of memory" in signal["text"]
    assert f"| job {job} (fails) | FAILED | NonZeroExitCode | 3 |" in markdown


def test_a_job_pending_on_an_impossible_constraint(cluster: Cluster, ctxd: httpx.Client) -> None:
    job = cluster.sbatch("-J", "waits", "--constraint=h200", "--wrap", "echo never")
    cluster.wait_state(job, {"PENDING"})
    time.sleep(1)  # a gap the watch must see: pending for a second (SubmitTime is whole seconds)

    watch = {"kind": "slurm", "job": job, "pending_after_s": 1}
    taken, markdown = dump(ctxd, "waits", watch)

    (info,) = taken["observations"]["slurm"]["items"]
    assert info["state"] == "PENDING" and info["reason"].startswith("ReqNodeNotAvail")
    assert info["logs"] == [] and info["log_problems"] == []  # nothing written yet: no noise
    assert info["pending_for_s"] >= 1
    (signal,) = [s for s in taken["signals"] if s["code"] == "slurm_pending"]
    assert signal["text"].startswith(f"slurm job {job} (waits) pending for")
    assert "(ReqNodeNotAvail" in signal["text"]
    assert f"| job {job} (waits) | PENDING | ReqNodeNotAvail" in markdown
    subprocess.run(["scancel", job], env=cluster.env(), check=False)


def test_a_job_whose_log_grows_then_goes_silent(cluster: Cluster, ctxd: httpx.Client) -> None:
    # It prints until the test says stop, then one last line, then nothing: each step waits
    # on what the job wrote, not on how fast a busy machine runs it.
    stop, out = cluster.jobs / "grows.stop", cluster.jobs / "grows.out"
    script = (
        f"i=0; while [ ! -e {stop} ]; do i=$((i+1)); echo step $i; sleep 0.2; done; "
        "echo step last; sleep 60"
    )
    job = cluster.sbatch("-J", "grows", "-o", out.name, "-t", "5", "--wrap", script)
    try:
        cluster.wait_state(job, {"RUNNING"})
        wait_until(lambda: out.exists() and "step 1\n" in out.read_text(), "its first line")
        watch = {"kind": "slurm", "job": job, "lines": 3, "silent_after_s": 1.5}
        first, _ = dump(ctxd, "grows", watch)
        before = first["observations"]["slurm"]["items"][0]["logs"][0]
        wait_until(lambda: out.stat().st_size > before["size"], "the job to write more")

        second, markdown = snapshot(ctxd, "grows")

        after = second["observations"]["slurm"]["items"][0]["logs"][0]
        assert after["size"] > before["size"] and after["growth_bytes"] > 0
        assert "grew" in markdown
        assert second["observations"]["slurm"]["items"][0]["time_limit_s"] == 300
        stop.touch()
        wait_until(lambda: out.read_text().endswith("step last\n"), "its last line")
        # silent since: its last write dated ten seconds back instead of waiting them out
        written = out.stat().st_mtime - 10
        os.utime(out, (written, written))

        third, _ = snapshot(ctxd, "grows")

        (info,) = third["observations"]["slurm"]["items"]
        assert info["state"] == "RUNNING" and info["logs"][0]["lines"][-1] == "step last"
        (signal,) = [s for s in third["signals"] if s["code"] == "slurm_silent"]
        assert "but its output is silent for" in signal["text"]
        assert signal["text"].endswith("last line: step last")
    finally:
        subprocess.run(["scancel", job], env=cluster.env(), check=False)


def test_a_job_the_controller_does_not_know(cluster: Cluster, ctxd: httpx.Client) -> None:
    _, markdown = dump(ctxd, "unknown", {"kind": "slurm", "job": "987654"})

    assert "- unavailable: `slurm job 987654`:" in markdown
    assert "job 987654 is not known to the controller; accounting:" in markdown


def test_a_job_that_ends_takes_a_snapshot_at_once(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("events")
    quick = {
        "CTXD_EVENT_PROBE_S": "0.3",
        "CTXD_TRIGGER_INTERVAL_S": "0.3",
        "CTXD_SLURM_PROBE_S": "0.3",
    }
    server = start_server(folder / "data", folder / "ctxd.log", env=cluster.env() | quick)
    try:
        with server.client() as client:
            job = cluster.sbatch("-J", "ends", "-o", "ends.out", "--wrap", "echo bye; sleep 2")
            cluster.wait_state(job, {"RUNNING"})
            dump(client, "ends", {"kind": "slurm", "job": job})
            cluster.wait_state(job, {"COMPLETED"})

            def ended() -> bool:
                listed = client.get("/api/sessions/ends/snapshots").json()
                return "event:slurm-job-end" in [s["trigger"] for s in listed]

            wait_until(ended, "a snapshot for the job's end", limit=60, every=0.3)
    finally:
        stop_server(server)


def counting(folder: Path, *programs: str) -> tuple[str, Path]:
    """A PATH whose `programs` log each call to a file, then run the real ones."""
    folder.mkdir(parents=True, exist_ok=True)
    calls = folder / "calls"
    calls.touch()
    for name in programs:
        real = shutil.which(name)
        assert real is not None
        shim = folder / name
        shim.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\nexec {real} "$@"\n')
        shim.chmod(0o755)
    return f"{folder}:{os.environ['PATH']}", calls


def test_mine_under_a_workdir_reads_only_the_jobs_it_shows(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, there = cluster.jobs / "here", cluster.jobs / "there"
    here.mkdir()
    there.mkdir()
    ours = [cluster.sbatch("-D", str(here), "-t", "2", "--wrap", "sleep 30") for _ in range(3)]
    theirs = cluster.sbatch("-D", str(there), "-t", "2", "--wrap", "sleep 30")  # the newest
    path, calls = counting(tmp_path / "bin", "squeue", "scontrol")
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    try:
        jobs = slurm.find_jobs(SlurmWatch(mine=True, workdir=str(here), jobs=2))
        assert [j.job_id for j in jobs] == ours[:0:-1]
        asked = calls.read_text().splitlines()
        assert len([c for c in asked if c.startswith("scontrol")]) == 2, asked
    finally:
        subprocess.run(["scancel", *ours, theirs], env=cluster.env(), check=False)


def test_the_event_probe_asks_the_controller_once_a_minute_not_every_probe(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trigger loop ticked by the test on a clock the test steps: probes every 0.3 s of
    it (every fourth period once the session is settled), the controller asked once per 60 s
    of it, however long each tick takes."""
    job = cluster.sbatch("-J", "probed", "-t", "2", "--wrap", "sleep 30")
    try:
        cluster.wait_state(job, {"RUNNING"})
        path, calls = counting(tmp_path / "bin", "scontrol")  # ctxd's calls from here on
        monkeypatch.setenv("PATH", path)
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
        clock = StepClock()
        monkeypatch.setattr(triggers, "time", SimpleNamespace(monotonic=clock))
        with ticked_watcher(tmp_path / "data", monkeypatch, 0.3, 3600) as watcher:
            probes = []
            observe = watcher.snap.runner.observe

            def counted(*args: Any, **kwargs: Any) -> Any:
                probes.append(kwargs.get("purpose"))
                return observe(*args, **kwargs)

            monkeypatch.setattr(watcher.snap.runner, "observe", counted)
            watcher.snap.store.put_session("probed", SessionIn())
            watcher.snap.store.add_watch("probed", SlurmWatch(job=job), limit=100)
            watcher.snap.take("probed", force=True)
            assert len(calls.read_text().splitlines()) == 1, "the snapshot's look"
            for _ in range(100):  # 30 s of probes, one each 0.3 s
                watcher.tick()
                clock.advance(0.3)
            assert probes.count("probe") >= 100 // (triggers.LOOSE_PERIODS + 1), probes
            asked = calls.read_text().splitlines()
            assert len(asked) == 2, asked  # and the first probe's, not a hundred
            clock.advance(60)
            watcher.tick()
            assert len(calls.read_text().splitlines()) == 3, "asked again a minute on"
    finally:
        subprocess.run(["scancel", job], env=cluster.env(), check=False)


def test_output_patterns_become_the_files_the_job_wrote(
    cluster: Cluster, ctxd: httpx.Client
) -> None:
    # Slurm 22.05's scontrol expands %x but prints %4j, %J, %s and %t as given
    job = cluster.sbatch(
        "-J", "pads", "-o", "pad-%4j-%x.out", "-e", "err-%J-%s-%t.out",
        "--wrap", "echo out; echo err >&2",
    )  # fmt: skip
    cluster.wait_state(job, {"COMPLETED"})
    taken, _ = dump(ctxd, "pads", {"kind": "slurm", "job": job})
    (info,) = taken["observations"]["slurm"]["items"]
    out, err = (
        cluster.jobs / f"pad-{int(job):04d}-pads.out",
        cluster.jobs / f"err-{job}-batch-0.out",
    )
    assert out.exists() and err.exists()  # what Slurm itself wrote
    assert (info["stdout"], info["stderr"]) == (str(out), str(err))
    assert [(log["path"], log["lines"]) for log in info["logs"]] == [
        (str(out), ["out"]),
        (str(err), ["err"]),
    ]
    assert info["log_problems"] == []


TASK = """\
import os, time
rank = int(os.environ["SLURM_PROCID"])
if rank == 3:
    with open("stalled.fifo", "rb") as pipe:  # nothing ever writes it: rank 3 blocks here
        pipe.read()
time.sleep(600)
"""


def test_a_running_jobs_tasks_are_collected_on_its_node_through_srun(
    cluster: Cluster, ctxd: httpx.Client
) -> None:
    """Four tasks of one step, rank 3 blocked opening a FIFO, the others asleep: collected
    on the job's node by `srun --overlap` (no ctxd there but the package), named by rank and
    grouped by where they wait, with their Python stacks; its steps' CPU and memory from
    sstat."""
    (cluster.jobs / "task.py").write_text(TASK)
    fifo = cluster.jobs / "stalled.fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    job = cluster.sbatch("-J", "tasks", "-n", "4", "--overcommit", "-o", "tasks.out",
                         "--wrap", f"srun --overcommit -n 4 {sys.executable} task.py")  # fmt: skip
    try:
        cluster.wait_state(job, {"RUNNING"})

        def four_tasks() -> bool:
            found = subprocess.run(["pgrep", "-f", f"{sys.executable} task.py"],
                                   capture_output=True, text=True).stdout.split()  # fmt: skip
            return len(found) >= 4

        wait_until(four_tasks, "the job's four tasks", limit=60)
        time.sleep(1)  # rank 3 reaches its open()
        taken, markdown = dump(ctxd, "tasks", {"kind": "slurm", "job": job})
        (info,) = taken["observations"]["slurm"]["items"]
        ranks = {t["rank"]: t for t in info["tasks"] if t["step"] == "0"}
        assert sorted(ranks) == [0, 1, 2, 3], info["tasks"]
        assert "openat" in (ranks[3]["waits_in"] or "") and ranks[3]["blocked_on"] == str(fifo)
        assert all("nanosleep" in (ranks[r]["waits_in"] or "") for r in (0, 1, 2)), ranks
        # rank 3's Python stack, taken on its node: where task.py waits, not only the kernel's
        assert ranks[3]["stack"][1:2] == ["  <module> (task.py:4)"], ranks[3]
        assert ranks[0]["stack"][1:2] == ["  <module> (task.py:6)"], ranks[0]
        assert taken["observations"]["slurm"]["unavailable"] == []
        node = socket.gethostname()
        section = markdown.split("its processes on its nodes (asked through srun)")[1]
        assert f"- {node}: rank 3 (pid {ranks[3]['pid']}) waits in" in section, section
        assert f"{node}: ranks 0-2 (pids " in section.replace("\N{EN DASH}", "-"), section
        assert "  <module> (task.py:4)" in section, section
        # its steps' CPU and memory, as sstat reads them live
        steps = {st["step"]: st for st in info["steps"]}
        assert steps[f"{job}.0"]["tasks"] == 4 and steps[f"{job}.0"]["max_rss_bytes"] > 0, steps
        assert steps[f"{job}.0"]["max_rss_node"] == node, steps
        assert f"- step {job}.0, 4 tasks: CPU " in markdown, markdown
        assert f"at most (on {node})" in markdown, markdown
    finally:
        subprocess.run(["scancel", job], env=cluster.env(), check=False)
        with contextlib.suppress(OSError):  # a writer lets a blocked rank 3 go, if still there
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_a_node_that_does_not_answer_in_time_is_one_line_naming_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The job's node cannot answer within 0.3 s (its collector samples CPU for 0.5 s): one
    unavailable line naming the node, and srun told to end its step, which leaves no
    collector behind. This host's client has no sstat: the job says why it has no step
    figures."""
    client_bin = tmp_path / "bin"
    client_bin.mkdir()
    for name in ("scontrol", "squeue", "srun", "sacct"):
        (client_bin / name).symlink_to(shutil.which(name) or name)
    env = cluster.env() | {"PATH": str(client_bin), "CTXD_SLURM_NODES_TIMEOUT_S": "0.3"}
    job = cluster.sbatch("-J", "slow", "-o", "slow.out", "--wrap", "sleep 120")
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        cluster.wait_state(job, {"RUNNING"})
        with server.client() as client:
            taken, markdown = dump(client, "slow", {"kind": "slurm", "job": job})
        node = socket.gethostname()
        (line,) = taken["observations"]["slurm"]["unavailable"]
        assert line["target"] == f"slurm job {job} on node {node}", line
        assert line["reason"] == "did not answer through srun within 0.3 s", line
        assert f"- unavailable: `slurm job {job} on node {node}`: did not answer" in markdown
        (info,) = taken["observations"]["slurm"]["items"]
        assert info["tasks"] == [] and info["steps"] == [], info
        assert info["steps_note"] == "`sstat` not found: no Slurm client on this host", info
        assert f"job {job} (slow) steps: no CPU or memory figures from sstat (`sstat` not" in (
            markdown
        )

        def collector_gone() -> bool:
            found = subprocess.run(["pgrep", "-f", f"ctxd.collectors._slurm_nodes {job}$"],
                                   capture_output=True, text=True).stdout  # fmt: skip
            return not found.split()

        wait_until(collector_gone, "the late collector's step to end", limit=30)
    finally:
        stop_server(server)
        subprocess.run(["scancel", job], env=cluster.env(), check=False)
