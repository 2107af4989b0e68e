"""The standard bench scenario: host processes, a watched launcher, logs, artifacts, ports."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import httpx

LAUNCHER = """
import socket, subprocess, sys, time
workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)",
                             "--rank", str(i)]) for i in range(8)]
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", int(sys.argv[1])))
sock.listen()
print("ready", flush=True)
time.sleep(3600)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Scenario:
    root: Path
    logs: list[Path]
    artifacts: Path
    listening_port: int
    closed_port: int
    children: list[subprocess.Popen] = field(default_factory=list)
    others: list[subprocess.Popen] = field(default_factory=list)

    @property
    def launcher_match(self) -> str:
        """The process watch pattern of this scenario's launcher: its full path, so another
        bench's launcher running on a shared machine never joins the table."""
        return re.escape(str(self.root / "bench_launcher.py"))

    def spawn_others(self, count: int) -> None:
        """Bring the number of unrelated host processes to `count` (sleepers, cheap)."""
        while len(self.others) > count:
            proc = self.others.pop()
            proc.kill()
            proc.wait()
        while len(self.others) < count:
            self.others.append(subprocess.Popen(["sleep", "3600"]))

    def stop(self) -> None:
        for proc in self.children + self.others:
            if proc.poll() is None:
                # the launcher's workers are in its process group
                with suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with suppress(OSError):
                    proc.kill()
            proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def write_log(path: Path, size: int, tail_lines: int = 200) -> None:
    """A log of `size` bytes: sparse zeros up front (cheap to make), real text at the end."""
    text = "".join(
        f"2026-11-29 12:00:{i % 60:02d} [TP{i % 8}] Loading safetensors shard {i}/1000\n"
        for i in range(tail_lines)
    ).encode()
    with open(path, "wb") as handle:
        if size > len(text):
            handle.truncate(size - len(text))
            handle.seek(size - len(text))
        handle.write(text)


def build(others: int = 1000, big_log: int = 2**30) -> Scenario:
    root = Path(tempfile.mkdtemp(prefix="ctxd-bench-"))
    logs = []
    for i in range(5):
        path = root / f"server{i}.log"
        write_log(path, big_log if i == 0 else 200_000)
        logs.append(path)
    artifacts = root / "artifacts"
    for i in range(5000):
        sub = artifacts / f"d{i // 100:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i:04d}.bin").write_bytes(os.urandom(64))
    with open(artifacts / "model.safetensors", "wb") as handle:
        handle.truncate(100 * 2**30)
    scenario = Scenario(root, logs, artifacts, free_port(), free_port())
    script = root / "bench_launcher.py"
    script.write_text(LAUNCHER)
    launcher = subprocess.Popen(
        [sys.executable, str(script), str(scenario.listening_port), "--tp", "8"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    scenario.children.append(launcher)
    assert launcher.stdout is not None and launcher.stdout.readline().strip() == "ready"
    scenario.spawn_others(others)
    # The 5,000 files just written are still dirty in the page cache: their writeback, in
    # the next half minute, would land in the fsync of whichever snapshot is measured then.
    os.sync()
    return scenario


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    data_dir: Path

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(data_dir: Path, env: dict[str, str] | None = None) -> Server:
    """`ctxd serve` on a free port, once /health answers (with the token `env` may set)."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "ctxd",
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
    ]
    process = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    token = (env or {}).get("CTXD_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", headers=headers, timeout=1).status_code == 200:
                return Server(url, process, data_dir)
        except httpx.HTTPError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("ctxd did not start")


def register(client: httpx.Client, sid: str, scenario: Scenario) -> None:
    client.put(f"/api/sessions/{sid}", json={"title": "bench", "objective": "measure"})
    watches: list[dict] = [
        {
            "kind": "process",
            "match": scenario.launcher_match,
            "expect_ports": [scenario.closed_port],
        },
        {"kind": "port", "port": scenario.listening_port},
        {"kind": "artifact", "path": str(scenario.artifacts)},
    ]
    watches += [{"kind": "log", "path": str(path)} for path in scenario.logs]
    for spec in watches:
        response = client.post(f"/api/sessions/{sid}/watches", json=spec)
        response.raise_for_status()


def shell_collection(scenario: Scenario) -> list[str]:
    """What an agent would type to gather the same facts by hand, as one shell process."""
    tails = "; ".join(f"tail -n 40 {path}" for path in scenario.logs)
    script = (
        f"ps -eo pid,ppid,stat,pcpu,rss,args; {tails}; "
        f"find {scenario.artifacts} -printf '%p %s %T@\\n'; ss -ltn"
    )
    return ["bash", "-c", script]
