"""Peers as separate hosts: node2's ctxd in its own network namespace, joined by a veth pair.

Root only (network namespaces); skipped with the reason otherwise. node1 is the ctxd of the
test's own namespace; node2 listens on its veth address only, with a token, like a real peer.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, free_port, start_server, stop_server, wait_until
from tests.test_peers import TOKEN, take, token_file


def _netns_problem() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns` does not work here: {probe.stderr.strip()}"
    return None


pytestmark = pytest.mark.skipif(_netns_problem() is not None, reason=str(_netns_problem()))


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass
class Node2:
    url: str
    process: subprocess.Popen
    veth: str  # this side's end of the pair
    ns: str
    far_end: str  # node2's end, in its namespace


@pytest.fixture
def node2(tmp_path: Path) -> Iterator[Node2]:
    tag = f"{os.getpid() % 10000}{int(time.monotonic() * 1000) % 1000}"
    ns, veth, peer_end = f"ctxd{tag}", f"vc{tag}a", f"vc{tag}b"
    octet = 1 + int(tag) % 250
    here, there = f"10.213.{octet}.1", f"10.213.{octet}.2"
    ip("netns", "add", ns)
    process = None
    try:
        ip("link", "add", veth, "type", "veth", "peer", "name", peer_end)
        ip("link", "set", peer_end, "netns", ns)
        ip("addr", "add", f"{here}/30", "dev", veth)
        ip("link", "set", veth, "up")
        ip("netns", "exec", ns, "ip", "addr", "add", f"{there}/30", "dev", peer_end)
        ip("netns", "exec", ns, "ip", "link", "set", peer_end, "up")
        ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        port = free_port()
        data = tmp_path / "node2"
        # a command that stays busy, so a snapshot can be caught while node2 answers it
        env = {
            **os.environ,
            "CTXD_TOKEN": TOKEN,
            "CTXD_COMMANDS": '{"slow": ["sleep", "30"]}',
        }
        serve = [sys.executable, "-m", "ctxd", "serve", "--host", there, "--port", str(port)]
        with open(tmp_path / "node2.log", "ab") as out:
            process = subprocess.Popen(
                ["ip", "netns", "exec", ns, *serve, "--data-dir", str(data)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        url = f"http://{there}:{port}"
        _wait_for(url, process)
        yield Node2(url, process, veth, ns, peer_end)
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        subprocess.run(["ip", "link", "del", veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _wait_for(url: str, process: subprocess.Popen) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, "node2's ctxd exited"
        try:
            if httpx.get(f"{url}/health", headers=headers, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("node2's ctxd did not answer within 30 s")


def two_hosts(client: httpx.Client, node2: Node2, tmp_path: Path, slow: bool = False) -> None:
    (tmp_path / "here.log").write_text("local line one\n")
    (tmp_path / "there.log").write_text("remote line one\n")
    peer = {"url": node2.url, "token_file": str(token_file(tmp_path / "data"))}
    assert client.put("/api/peers/node2", json=peer).status_code == 201
    client.put("/api/sessions/s", json={})
    watches = [
        {"kind": "log", "path": str(tmp_path / "here.log")},
        {"kind": "log", "path": str(tmp_path / "there.log"), "host": "node2"},
    ]
    if slow:
        watches.append({"kind": "command", "name": "slow", "host": "node2", "timeout_s": 30})
    for watch in watches:
        assert client.post("/api/sessions/s/watches", json=watch).status_code == 201, watch


def test_a_peer_in_another_namespace_answers(
    client: httpx.Client, node2: Node2, tmp_path: Path
) -> None:
    two_hosts(client, node2, tmp_path)

    _, markdown, took = take(client, "s")

    assert f"### node2:{tmp_path / 'there.log'}" in markdown and "remote line one" in markdown
    assert "unavailable" not in markdown
    (status,) = client.get("/api/peers").json()
    # one machine's clock: at most half the round trip off (and the 1 ms of rounding)
    assert status["reachable"]
    assert abs(status["clock_offset_s"]) <= status["latency_ms"] / 2000 + 0.002
    print(f"two hosts across a veth pair: snapshot in {took * 1000:.0f} ms")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_a_peer_killed_mid_snapshot(node2: Node2, tmp_path: Path) -> None:
    # node1 waits for node2 up to a minute: the kill, not the deadline, ends the request
    node1 = start_server(tmp_path / "data", tmp_path / "node1.log",
                         env={"CTXD_PEER_DEADLINE_S": "60"})  # fmt: skip
    busy: list[int] = []

    def kill_when_busy() -> None:
        # node2 runs the watch's `sleep 30`: the request is in, its answer not yet out
        def running() -> list[int]:
            return [c for c in _children(node2.process.pid)
                    if Path(f"/proc/{c}/cmdline").read_bytes() == b"sleep\x0030\x00"]  # fmt: skip

        busy.extend(wait_until(running, "node2 running the slow command"))
        node2.process.kill()

    killer = threading.Thread(target=kill_when_busy)
    try:
        with node1.client() as client:
            two_hosts(client, node2, tmp_path, slow=True)
            killer.start()
            _, markdown, took = take(client, "s")
            killer.join()
    finally:
        stop_server(node1)
        for pid in busy:  # node2's command, left behind by its kill
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    assert busy, "node2 was killed while it answered"
    line = next(x for x in markdown.splitlines() if "unavailable: `host node2`: log" in x)
    assert "closed the connection before answering" in line, line
    assert "local line one" in markdown
    print(f"killed mid-snapshot: {line!r} after {took * 1000:.0f} ms")


@pytest.mark.parametrize("side", ["far", "near"])
def test_a_link_taken_down(client: httpx.Client, node2: Node2, tmp_path: Path, side: str) -> None:
    """Far: node2's end goes down, its packets vanish (a partition: the connection times out).
    Near: this host's end goes down, the route goes with it (refused or unreachable at once)."""
    two_hosts(client, node2, tmp_path)
    take(client, "s")
    down = (
        ["netns", "exec", node2.ns, "ip", "link", "set", node2.far_end]
        if side == "far"
        else ["link", "set", node2.veth]
    )
    ip(*down, "down")

    _, markdown, took = take(client, "s")

    line = next(x for x in markdown.splitlines() if "unavailable: `host node2`: log" in x)
    if side == "near":  # no route: refused at once
        assert "unreachable: " in line, line
    else:  # packets vanish: the deadline ends it (the connect's or the snapshot's own wait)
        assert "within 2 s" in line, line
    assert "local line one" in markdown
    print(f"link down ({side} end): {line!r} after {took * 1000:.0f} ms")
    (status,) = client.get("/api/peers").json()
    assert status["reachable"] is False

    ip(*down, "up")
    # back after its rest (1 s, doubling per failure): asking meanwhile sends nothing to it
    markdown = wait_until(
        lambda: (md := take(client, "s")[1]) and "remote line one" in md and md,
        "node2 back after its rest", limit=60, every=0.5,
    )  # fmt: skip
    assert "unavailable" not in markdown


def test_a_wrong_token_across_the_link(
    client: httpx.Client, node2: Node2, tmp_path: Path, server: Server
) -> None:
    two_hosts(client, node2, tmp_path)
    path = token_file(tmp_path / "data", "wrong-token-0123456789-abcdefghij", "wrong.token")
    client.put("/api/peers/node2", json={"url": node2.url, "token_file": str(path)})

    _, markdown, _ = take(client, "s")

    assert "`host node2`: log" in markdown and "refused our token (HTTP 401)" in markdown
    assert "local line one" in markdown
