"""Snapshot cost with 1, 2 and 4 peers on loopback, beside the same watches on one host.

Run: .venv/bin/python -m bench.bench_peers [--runs 15]
Every host (the main ctxd and each peer, all real `ctxd serve` processes with a token) has
the same three watches: a 4 MB log, a process and a port. A session with k peers has the
local three plus three on each peer, so its snapshot collects 3 (k + 1) watches on k + 1
hosts; the peers are asked concurrently, under the 2 s deadline. A dead peer (a closed port)
shows what a down host costs once it rests.
"""

import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path

import httpx

from bench.scenario import Server, free_port, start_server
from bench.timing import p95, timed

TOKEN = "bench-peer-token-0123456789abcdef"


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
        token_file = folder / "main" / ".peers" / "token"  # where ctxd takes token files
        token_file.parent.mkdir(parents=True)
        token_file.write_text(TOKEN + "\n")
        token_file.chmod(0o600)
        sleeper = subprocess.Popen(["sleep", "7777.25"])
        servers: list[Server] = []
        try:
            servers.append(start_server(folder / "main"))
            main_url = servers[0].url
            for n in range(4):
                servers.append(start_server(folder / f"peer{n}", {"CTXD_TOKEN": TOKEN}))
            peers = [server.url for server in servers[1:]]
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
            for server in servers:
                server.stop()
            sleeper.terminate()
            sleeper.wait()


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
