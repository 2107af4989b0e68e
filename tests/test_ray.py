"""The `ray` watch against a real Ray head this test starts on this machine (`ray[default]`
2.60 in `.ray/`, which `make test` installs; CTXD_RAY_PYTHON names another interpreter with
Ray). Every Ray process is bound to loopback and talks on it only
(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps Ray from rewriting 127.0.0.1 to the machine's
interface address), and every one is ended by this test's own temp dir and by descent,
whatever the outcome (never `ray stop`, which ends every Ray on the box).

A job with two serving actors, one that dies in its constructor (its error shown), one that
asks for a GPU the cluster has not (pending, with its ask against what is free) and one whose
method blocks opening a FIFO nothing writes (a task running long: its pid, its kernel wait,
its Python stack).
"""

import ipaddress
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from bench import ray_head
from tests.conftest import Server, free_port, start_server, stop_server, tagged, wait_until

JOB = """\
import sys, time, ray
ray.init(address=f"127.0.0.1:{sys.argv[1]}", log_to_driver=False)

@ray.remote(num_cpus=0)
class Server:
    def ping(self):
        return "pong"

@ray.remote(num_cpus=0)
class Crasher:
    def __init__(self):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

@ray.remote(num_gpus=1)
class NeedsGpu:
    pass

@ray.remote(num_cpus=0)
class Loader:
    def warmup(self, path):
        with open(path, "rb") as shard:  # nothing writes it: this waits forever
            return shard.read()

servers = [Server.options(name=f"server-{i}").remote() for i in range(2)]
ray.get([s.ping.remote() for s in servers])
crasher = Crasher.options(name="crasher").remote()
gpu = NeedsGpu.options(name="needs-gpu").remote()
loader = Loader.options(name="loader").remote()
stuck = loader.warmup.remote(sys.argv[2])
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, Path, list[int]]]:
    """A Ray head on loopback and the job above: (dashboard URL, the FIFO, the Ray pids)."""
    reason = ray_head.missing()
    if reason:
        pytest.skip(reason)
    mark = tempfile.mkdtemp(prefix="ctxd-ray-", dir="/tmp")  # short: Ray's socket paths
    gcs, dashboard = free_port(), free_port()
    fifo = tmp_path / "shard-3.bin"
    os.mkfifo(fifo)
    (tmp_path / "job.py").write_text(JOB)
    driver: subprocess.Popen | None = None
    try:
        ray_head.start(mark, gcs, dashboard)
        driver = subprocess.Popen(
            [ray_head.RAY_PYTHON, str(tmp_path / "job.py"), str(gcs), str(fifo)], cwd=tmp_path,
            env=ray_head.environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        if (said := ray_head.wait_ready(driver)) is not None:
            pytest.fail("the job did not start:\n" + said)
        pids = tagged(mark)
        yield f"http://127.0.0.1:{dashboard}", fifo, pids
    finally:
        ray_head.end(mark, [driver.pid] if driver is not None else [])
        assert not tagged(mark), "a Ray process of this test outlived it"


@pytest.fixture
def ctxd(tmp_path: Path) -> Iterator[Server]:
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", env={"CTXD_STUCK_AFTER_S": "2"})
    try:
        yield server
    finally:
        stop_server(server)


def test_a_ray_job_is_read_through_its_dashboard(cluster, ctxd: Server) -> None:
    url, fifo, ray_pids = cluster
    with httpx.Client(base_url=ctxd.url, timeout=60) as client:
        client.put("/api/sessions/rayjob", json={})
        watched = client.post("/api/sessions/rayjob/watches", json={"kind": "ray", "url": url})
        assert watched.status_code == 201, watched.text

        def settled() -> dict | None:
            taken = client.post("/api/sessions/rayjob/snapshots", json={"force": True}).json()
            (info,) = taken["observations"]["ray"]["items"]
            states = {a["name"]: a["state"] for a in info["actors"]}
            running = [t for t in info["tasks"] if t["state"] == "RUNNING"]
            done = (states.get("crasher") == "DEAD" and running and running[0]["stack"]
                    and states.get("needs-gpu") == "PENDING_CREATION")  # fmt: skip
            return taken if done else None

        taken = wait_until(settled, "the job's actors settled", limit=90, every=1.0)
        version = taken["header"]["version"]
        dump = client.get(f"/api/sessions/rayjob/snapshots/{version}/markdown").text
    (info,) = taken["observations"]["ray"]["items"]
    states = {a["name"]: a["state"] for a in info["actors"]}
    assert states == {"server-0": "ALIVE", "server-1": "ALIVE", "loader": "ALIVE",
                      "crasher": "DEAD", "needs-gpu": "PENDING_CREATION"}, states  # fmt: skip
    section = dump.split("## Ray clusters")[1]
    assert "actor `crasher` (Crasher): **DEAD**" in section, section
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in section
    assert "actor `needs-gpu` (NeedsGpu): **PENDING_CREATION**; asks CPU 1, GPU 1" in section, (
        section
    )
    assert "task `Loader.warmup` RUNNING (pid " in section, section
    assert f"waiting in wait_for_partner (openat) on `{fifo}`" in section, section
    assert "Loader.warmup (job.py:" in section, section
    # the agent's own `ray start` makes the same watch by itself
    port = url.rsplit(":", 1)[1]
    with httpx.Client(base_url=ctxd.url, timeout=60) as client:
        client.put("/api/sessions/started", json={})
        started = f"ray start --head --node-ip-address=127.0.0.1 --dashboard-port={port}"
        action = {"kind": "command", "command": started, "cwd": str(fifo.parent)}
        recorded = client.post("/api/sessions/started/actions", json={"actions": [action]})
        assert recorded.status_code == 202, recorded.text
        auto = client.get("/api/sessions/started/watches").json()
    assert [w["spec"]["url"] for w in auto if w["spec"]["kind"] == "ray"] == [url], auto
    codes = {s["code"] for s in taken["signals"]}
    assert {"ray_actor_dead", "ray_actor_pending", "ray_task_long"} <= codes, codes
    pending = next(s for s in taken["signals"] if s["code"] == "ray_actor_pending")
    assert pending["text"].endswith("asks CPU 1, GPU 1; the cluster has free GPU 0"), pending
    # Ray stayed on loopback: every socket its processes listen on
    for pid in ray_pids:
        try:
            listening = [c for c in psutil.Process(pid).net_connections() if c.status == "LISTEN"]
        except psutil.Error:
            continue
        for c in listening:
            address = ipaddress.ip_address(c.laddr.ip)
            mapped = getattr(address, "ipv4_mapped", None)
            assert (mapped or address).is_loopback, (pid, c.laddr)


def test_an_interpreter_without_ray_is_a_reason_to_skip(tmp_path: Path) -> None:
    """A failed `pip install` leaves the virtualenv's python without Ray's `ray` CLI: the
    test skips, saying so, rather than failing to start a head."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    said = ray_head.missing(str(bin_dir / "python"))
    assert said is not None and said.startswith(f"Ray is not installed ({bin_dir / 'ray'}:"), said
    assert ray_head.missing(str(tmp_path / "none" / "python")).startswith("no Python for Ray")
    (bin_dir / "ray").write_text("#!/bin/sh\n")
    (bin_dir / "ray").chmod(0o755)
    assert ray_head.missing(str(bin_dir / "python")) is None


def test_a_dashboard_that_does_not_answer_is_one_line(tmp_path: Path, ctxd: Server) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with httpx.Client(base_url=ctxd.url, timeout=60) as client:
        client.put("/api/sessions/noray", json={})
        client.post("/api/sessions/noray/watches", json={"kind": "ray", "url": url})
        taken = client.post("/api/sessions/noray/snapshots", json={"force": True}).json()
    (line,) = taken["observations"]["ray"]["unavailable"]
    assert line["target"] == f"ray cluster at {url}" and "ConnectError" in line["reason"], line


def test_a_dashboard_elsewhere_is_refused_unless_allowed(ctxd: Server) -> None:
    """Asked of no one: a URL off this machine is refused before any request."""
    with httpx.Client(base_url=ctxd.url, timeout=60) as client:
        client.put("/api/sessions/farray", json={})
        far = {"kind": "ray", "url": "http://10.11.12.13:8265"}
        assert client.post("/api/sessions/farray/watches", json=far).status_code == 201
        taken = client.post("/api/sessions/farray/snapshots", json={"force": True}).json()
    (line,) = taken["observations"]["ray"]["unavailable"]
    assert "not a loopback URL" in line["reason"], line
