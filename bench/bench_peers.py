"""Snapshot cost with 1, 2 and 4 peers on loopback, beside the same watches on one host.

Run: .venv/bin/python -m bench.bench_peers [--runs 15]
Every host (the main ctxd and each peer, all real `ctxd serve` processes with a token) has
the same three watches: a 4 MB log, a process and a port. A session with k peers has the
local three plus three on each peer, so its snapshot collects 3 (k + 1) watches on k + 1
hosts; the peers are asked concurrently, under the 2 s deadline. A dead peer (a closed port)
shows what a down host costs once it rests.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.timing import p95, timed

TOKEN = "bench-peer-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(data_dir: Path, token: str | None) -> tuple[str, subprocess.Popen]:
    port = free_port()
    env = {**os.environ, **({"CTXD_TOKEN": token} if token else {})}
    cmd = [
        sys.executable,
        "-m",
        "service",
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
    ]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", headers=headers, timeout=1).status_code == 200:
                return url, process
        except httpx.HTTPError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("ctxd did not start")


def row(name: str, value: str, note: str = "") -> None:
    print(f"  {name:<44} {value:>14}  {note}")


def watches(folder: Path, port: int, host: str | None) -> list[dict]:
    on = {"host": host} if host else {}
    port_on = {"host": host} if host else {}
    return [
        {"kind": "log", "path": str(folder / "train.log"), "lines": 40} | on,
        {"kind": "process", "match": "^sleep 7777[.]25$"} | on,
        {"kind": "port", "port": port} | port_on,
    ]


def run(runs: int) -> None:
    print("snapshot with peers on loopback (3 watches per host, peers asked at once)")
    with tempfile.TemporaryDirectory(prefix="ctxd-bench-peers-") as tmp:
        folder = Path(tmp)
        with open(folder / "train.log", "w") as log:
            for i in range(80_000):
                log.write(f"step {i} loss {1 / (i + 1):.6f} lr 0.0003 tokens/s 12345.6\n")
        token_file = folder / "token"
        token_file.write_text(TOKEN + "\n")
        token_file.chmod(0o600)
        sleeper = subprocess.Popen(["sleep", "7777.25"])
        processes = [sleeper]
        try:
            main_url, main = serve(folder / "main", None)
            processes.append(main)
            peers = []
            for n in range(4):
                url, process = serve(folder / f"peer{n}", TOKEN)
                processes.append(process)
                peers.append(url)
            port = int(main_url.rsplit(":", 1)[1])
            with httpx.Client(base_url=main_url, timeout=30) as client:
                for n, url in enumerate(peers):
                    peer = {"url": url, "token_file": str(token_file)}
                    client.put(f"/api/peers/node{n + 1}", json=peer).raise_for_status()
                base = None
                for k in (0, 1, 2, 4):
                    sid = f"peers{k}"
                    client.put(f"/api/sessions/{sid}", json={}).raise_for_status()
                    for host in [None] + [f"node{n + 1}" for n in range(k)]:
                        for watch in watches(folder, port, host):
                            client.post(
                                f"/api/sessions/{sid}/watches", json=watch
                            ).raise_for_status()
                    median, worst = measure(client, sid, runs)
                    base = base or median
                    label = "one host (no peer)" if k == 0 else f"{k} peer{'s' if k > 1 else ''}"
                    row(
                        f"{label}: median / p95",
                        f"{median:.1f} ms",
                        f"p95 {worst:.1f} ms, x{median / base:.2f}",
                    )
                dead = f"http://127.0.0.1:{free_port()}"
                client.put("/api/peers/dead", json={"url": dead, "token_file": str(token_file)})
                client.put("/api/sessions/dead", json={}).raise_for_status()
                for host in (None, "dead"):
                    for watch in watches(folder, port, host):
                        client.post("/api/sessions/dead/watches", json=watch).raise_for_status()
                median, worst = measure(client, "dead", runs)
                row(
                    "1 dead peer (refused, then resting)", f"{median:.1f} ms", f"p95 {worst:.1f} ms"
                )
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait()


def measure(client: httpx.Client, sid: str, runs: int) -> tuple[float, float]:
    def take() -> None:
        client.post(f"/api/sessions/{sid}/snapshots", json={"force": True}).raise_for_status()

    take()  # primes CPU baselines, log cursors and each peer's memory
    times = timed(take, runs)
    return statistics.median(times), p95(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    run(parser.parse_args().runs)


if __name__ == "__main__":
    main()
