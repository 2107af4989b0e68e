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
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
from ctxd.collectors import _ray_address

from bench import ray_head
from tests.conftest import Server, free_port, start_server, stop_server, tagged, wait_until

JOB = """\
import os, sys, time, ray
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

@ray.remote(num_cpus=0, max_restarts=1)
class Phoenix:
    def __init__(self, marker):
        if os.path.exists(marker):  # its second life never ends starting: RESTARTING
            time.sleep(3600)
        open(marker, "w").close()

    def ping(self):
        return "pong"

servers = [Server.options(name=f"server-{i}").remote() for i in range(2)]
ray.get([s.ping.remote() for s in servers])
crasher = Crasher.options(name="crasher").remote()
gpu = NeedsGpu.options(name="needs-gpu").remote()
loaders = [Loader.options(name=name).remote() for name in ("loader", "loader-2")]
stuck = [loader.warmup.remote(sys.argv[2]) for loader in loaders]
phoenix = Phoenix.options(name="phoenix").remote(sys.argv[3])
ray.get(phoenix.ping.remote())
ray.kill(phoenix, no_restart=False)  # killed, and restarted: its restart never ends
print("ready", flush=True)
time.sleep(600)
"""


@dataclass
class Cluster:
    url: str  # its dashboard
    gcs: str  # its GCS's address
    tmpdir: str  # what RAY_TMPDIR must be for Ray's own temp dir (`ray/` under it) to be its
    fifo: Path  # what the loaders wait to open
    pids: list[int]  # its processes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A Ray head on loopback and the job above, its temp dir `ray/` under a short folder of
    its own (Ray's socket paths) as Ray's default one is under /tmp; one for this module's
    tests, which only read it."""
    reason = ray_head.missing()
    if reason:
        pytest.skip(reason)
    tmp_path = tmp_path_factory.mktemp("rayjob")
    mark = tempfile.mkdtemp(prefix="ctxd-ray-", dir="/tmp")
    os.mkdir(Path(mark) / "ray")
    gcs, dashboard = free_port(), free_port()
    fifo = tmp_path / "shard-3.bin"
    os.mkfifo(fifo)
    (tmp_path / "job.py").write_text(JOB)
    driver: subprocess.Popen | None = None
    try:
        ray_head.start(str(Path(mark) / "ray"), gcs, dashboard)
        driver = subprocess.Popen(
            [ray_head.RAY_PYTHON, str(tmp_path / "job.py"), str(gcs), str(fifo),
             str(tmp_path / "phoenix.lived")], cwd=tmp_path,
            env=ray_head.environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        if (said := ray_head.wait_ready(driver)) is not None:
            pytest.fail("the job did not start:\n" + said)
        url = f"http://127.0.0.1:{dashboard}"
        yield Cluster(url, f"127.0.0.1:{gcs}", mark, fifo, tagged(mark))
    finally:
        ray_head.end(mark, [driver.pid] if driver is not None else [])
        left = tagged(mark)
        shutil.rmtree(mark, ignore_errors=True)
        assert not left, "a Ray process of this test outlived it"


@pytest.fixture
def ctxd(tmp_path: Path) -> Iterator[Server]:
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", env={"CTXD_STUCK_AFTER_S": "2"})
    try:
        yield server
    finally:
        stop_server(server)


def test_a_ray_job_is_read_through_its_dashboard(cluster: Cluster, ctxd: Server) -> None:
    url, fifo = cluster.url, cluster.fifo
    with httpx.Client(base_url=ctxd.url, timeout=60) as client:
        client.put("/api/sessions/rayjob", json={})
        watched = client.post("/api/sessions/rayjob/watches", json={"kind": "ray", "url": url})
        assert watched.status_code == 201, watched.text

        def settled() -> dict | None:
            taken = client.post("/api/sessions/rayjob/snapshots", json={"force": True}).json()
            (info,) = taken["observations"]["ray"]["items"]
            states = {a["name"]: a["state"] for a in info["actors"]}
            running = [t for t in info["tasks"] if t["state"] == "RUNNING"]
            done = (states.get("crasher") == "DEAD" and len(running) == 2
                    and all(t["stack"] and t["waits_in"] for t in running)
                    and states.get("needs-gpu") == "PENDING_CREATION"
                    and states.get("phoenix") == "RESTARTING")  # fmt: skip
            return taken if done else None

        taken = wait_until(settled, "the job's actors settled", limit=90, every=1.0)
        version = taken["header"]["version"]
        dump = client.get(f"/api/sessions/rayjob/snapshots/{version}/markdown").text
    (info,) = taken["observations"]["ray"]["items"]
    states = {a["name"]: a["state"] for a in info["actors"]}
    assert states == {"server-0": "ALIVE", "server-1": "ALIVE", "loader": "ALIVE",
                      "loader-2": "ALIVE", "crasher": "DEAD", "needs-gpu": "PENDING_CREATION",
                      "phoenix": "RESTARTING"}, states  # fmt: skip
    section = dump.split("## Ray clusters")[1]
    assert "actor `crasher` (Crasher): **DEAD**" in section, section
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in section
    assert "actor `needs-gpu` (NeedsGpu): **PENDING_CREATION**; asks CPU 1, GPU 1" in section, (
        section
    )
    pids = {a["name"]: a["pid"] for a in info["actors"]}
    # each actor's node; the two loaders' stacks, alike, are one group said by where job.py
    # waits, its line's text read from the file
    assert f"- 4 actors ALIVE on 127.0.0.1: `loader` (pid {pids['loader']})" in section, section
    phoenix = f"actor `phoenix` (Phoenix): **RESTARTING**, pid {pids['phoenix']} on 127.0.0.1"
    assert f"{phoenix}; restarted 1 time\n" in section, section
    loaders = sorted((pids["loader"], pids["loader-2"]))
    assert (f"- 127.0.0.1: tasks `Loader.warmup` (pids {loaders[0]}, {loaders[1]}) RUNNING for"
            in section.replace(f"{loaders[1]}, {loaders[0]}", f"{loaders[0]}, {loaders[1]}")), (
        section
    )  # fmt: skip
    assert 'wait in `with open(path, "rb") as shard:` at job.py:' in section, section
    assert f"; in the kernel, wait_for_partner (openat) on `{fifo}`" in section, section
    assert section.count("Loader.warmup (job.py:") == 1, section  # one stack for the group
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
    assert {"ray_actor_dead", "ray_actor_pending", "ray_task_long",
            "ray_actor_restarting"} <= codes, codes  # fmt: skip
    pending = next(s for s in taken["signals"] if s["code"] == "ray_actor_pending")
    assert pending["text"].endswith("asks CPU 1, GPU 1; the cluster has free GPU 0"), pending
    restarting = next(s for s in taken["signals"] if s["code"] == "ray_actor_restarting")
    assert restarting["text"] == "ray actor `phoenix` is restarting (restart 1)", restarting
    # Ray stayed on loopback: every socket its processes listen on
    for pid in cluster.pids:
        try:
            listening = [c for c in psutil.Process(pid).net_connections() if c.status == "LISTEN"]
        except psutil.Error:
            continue
        for c in listening:
            address = ipaddress.ip_address(c.laddr.ip)
            mapped = getattr(address, "ipv4_mapped", None)
            assert (mapped or address).is_loopback, (pid, c.laddr)


def test_address_auto_finds_the_cluster_as_ray_does(cluster: Cluster, tmp_path: Path) -> None:
    """`address: auto` through the service: the current cluster file Ray wrote under its temp
    dir names the GCS, and the dashboard this machine runs for that GCS is read; RAY_ADDRESS,
    a GCS address or a dashboard URL, comes first."""
    env = {"RAY_TMPDIR": cluster.tmpdir, "RAY_ADDRESS": "", "RAY_API_SERVER_ADDRESS": ""}
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            client.put("/api/sessions/auto", json={})
            auto = {"kind": "ray", "address": "auto"}
            assert client.post("/api/sessions/auto/watches", json=auto).status_code == 201
            taken = client.post("/api/sessions/auto/snapshots", json={"force": True}).json()
            version = taken["header"]["version"]
            dump = client.get(f"/api/sessions/auto/snapshots/{version}/markdown").text
    finally:
        stop_server(server)
    (info,) = taken["observations"]["ray"]["items"]
    assert (info["url"], info["address"]) == (cluster.url, "auto"), info
    assert {a["name"] for a in info["actors"]} >= {"server-0", "loader", "crasher"}, info
    current = Path(cluster.tmpdir) / "ray" / "ray_current_cluster"
    assert info["found"].startswith(
        f"RAY_API_SERVER_ADDRESS unset; RAY_ADDRESS unset; {current} names the GCS "
        f"{cluster.gcs}, its dashboard (pid "
    ), info["found"]
    assert f"### `{cluster.url}` (address auto)" in dump, dump
    # RAY_ADDRESS first, as Ray reads it: a GCS address, or the dashboard's URL itself
    by_gcs = _ray_address.find({"RAY_ADDRESS": cluster.gcs, "RAY_TMPDIR": str(tmp_path)})
    assert by_gcs.url == cluster.url and "RAY_ADDRESS=" in by_gcs.how, by_gcs
    by_url = _ray_address.find({"RAY_ADDRESS": cluster.url + "/"})
    assert by_url.url == cluster.url, by_url
    # a GCS this machine runs no dashboard for: the default port on its host
    elsewhere = _ray_address.find({"RAY_ADDRESS": "127.0.0.1:1"})
    assert elsewhere.url == "http://127.0.0.1:8265", elsewhere
    assert elsewhere.how.endswith("no dashboard of it runs here, so its host's default "
                                  "http://127.0.0.1:8265"), elsewhere  # fmt: skip


def test_a_node_whose_raylet_dies_is_dead(tmp_path: Path, ctxd: Server) -> None:
    """A head of its own whose raylet this test kills: the GCS marks the node DEAD (checked
    every half second here), its dashboard still answers, and the dump and signals say so."""
    if (reason := ray_head.missing()) is not None:
        pytest.skip(reason)
    mark = tempfile.mkdtemp(prefix="ctxd-ray-", dir="/tmp")
    gcs, dashboard = free_port(), free_port()
    url = f"http://127.0.0.1:{dashboard}"
    quick = {"RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500",
             "RAY_health_check_failure_threshold": "2"}  # fmt: skip
    try:
        ray_head.start(mark, gcs, dashboard, quick)
        nodes = httpx.get(f"{url}/api/v0/nodes", params={"detail": "1"}, timeout=30).json()
        (head,) = nodes["data"]["result"]["result"]
        raylet = [p for p in psutil.process_iter(["cmdline"])
                  if f"--node_id={head['node_id']}" in (p.info["cmdline"] or [])]  # fmt: skip
        assert len(raylet) == 1 and mark in " ".join(raylet[0].info["cmdline"]), raylet
        raylet[0].kill()
        with httpx.Client(base_url=ctxd.url, timeout=60) as client:
            client.put("/api/sessions/lost", json={})
            client.post("/api/sessions/lost/watches", json={"kind": "ray", "url": url})

            def dead() -> dict | None:
                taken = client.post("/api/sessions/lost/snapshots", json={"force": True}).json()
                items = taken["observations"]["ray"]["items"]
                return taken if items and items[0]["nodes"][0]["state"] == "DEAD" else None

            taken = wait_until(dead, "the node to be DEAD", limit=60, every=0.5)
            version = taken["header"]["version"]
            dump = client.get(f"/api/sessions/lost/snapshots/{version}/markdown").text
        (signal,) = [s for s in taken["signals"] if s["code"] == "ray_node_dead"]
        short = head["node_id"][:8]
        assert signal["text"] == f"ray node 127.0.0.1 ({short}, the head) is DEAD ({url})", signal
        assert signal["severity"] == "critical", signal
        assert "- nodes: 127.0.0.1 (head) DEAD, CPU 2, GPU 0" in dump, dump
    finally:
        ray_head.end(mark, [])
        left = tagged(mark)
        shutil.rmtree(mark, ignore_errors=True)
        assert not left, "a Ray process of this test outlived it"


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


def test_address_auto_that_finds_nothing_says_what_it_looked_for(tmp_path: Path) -> None:
    """No RAY_ADDRESS, no current cluster file, and nothing at Ray's default dashboard: one
    unavailable line saying each."""
    taken_default = [c for c in psutil.net_connections("tcp")
                     if c.status == "LISTEN" and c.laddr.port == 8265]  # fmt: skip
    if taken_default:
        pytest.skip("something listens on Ray's default dashboard port 8265 here")
    env = {"RAY_TMPDIR": str(tmp_path), "RAY_ADDRESS": "", "RAY_API_SERVER_ADDRESS": ""}
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            client.put("/api/sessions/none", json={})
            client.post("/api/sessions/none/watches", json={"kind": "ray", "address": "auto"})
            taken = client.post("/api/sessions/none/snapshots", json={"force": True}).json()
    finally:
        stop_server(server)
    (line,) = taken["observations"]["ray"]["unavailable"]
    assert line["target"] == "ray cluster at address auto", line
    assert line["reason"].startswith(
        "error: Unreachable: RAY_API_SERVER_ADDRESS unset; RAY_ADDRESS unset; "
        f"no {tmp_path / 'ray' / 'ray_current_cluster'}; so the default http://127.0.0.1:8265: "
        "ConnectError"
    ), line


def test_a_dashboard_elsewhere_is_refused_unless_allowed(ctxd: Server) -> None:
    """Asked of no one: a URL off this machine is refused before any request."""
    with httpx.Client(base_url=ctxd.url, timeout=60) as client:
        client.put("/api/sessions/farray", json={})
        far = {"kind": "ray", "url": "http://10.11.12.13:8265"}
        assert client.post("/api/sessions/farray/watches", json=far).status_code == 201
        taken = client.post("/api/sessions/farray/snapshots", json={"force": True}).json()
    (line,) = taken["observations"]["ray"]["unavailable"]
    assert "not a loopback URL" in line["reason"], line
