"""A real server watching a real process tree, log and artifact, across two versions."""

import os
import sys
import uuid
from pathlib import Path

import httpx

from tests.conftest import Server, wait_until

ARTIFACTS = Path(__file__).parent / "artifacts"
API_KEY = "sk-ant-api03-" + "Q" * 40 + "-canary"
HF_TOKEN = "hf_" + "CanaryTokenValueZZZZZZZZZZZZZZZZZ"

LAUNCHER = r"""
import os, signal, subprocess, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # reap the worker when the test kills it
args = sys.argv[1:]
log = open(args[args.index("--log") + 1], "w")
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "--rank", "1"])
open(args[args.index("--pidfile") + 1], "w").write(str(worker.pid))
for pct in (0, 25, 50, 75, 100):
    log.write(f"\rLoading safetensors checkpoint shards: {pct}% Completed | {pct // 25}/4")
    log.flush()
log.write("\nLoad weight end. using " + os.environ["HF_TOKEN"] + "\n")
log.write("Capture cuda graph begin. This can take up to several minutes.\n")
log.flush()
time.sleep(600)
"""


def _wait_for(path: Path) -> str:
    return wait_until(lambda: path.exists() and path.read_text().strip(), f"{path} written")


def _wait_log(path: Path, needle: str) -> None:
    wait_until(
        lambda: path.exists() and needle in path.read_text(errors="replace"),
        f"{needle!r} written to {path}",
    )


def test_two_versions_of_a_real_process_tree(server: Server, client: httpx.Client, spawn, tmp_path):
    marker = f"launch-{uuid.uuid4().hex[:8]}"
    script = tmp_path / f"{marker}.py"
    script.write_text(LAUNCHER)
    log_path, pidfile = tmp_path / "server.log", tmp_path / "worker.pid"
    launcher = spawn(
        sys.executable, str(script), "--model-path", "/models/kimi", "--tp", "8",
        "--disable-cuda-graph", "--log-level", "debug", "--api-key", API_KEY,
        "--log", str(log_path), "--pidfile", str(pidfile),
        env={**os.environ, "HF_TOKEN": HF_TOKEN, "NCCL_DEBUG": "INFO"},
    )  # fmt: skip
    worker_pid = int(_wait_for(pidfile))
    _wait_log(log_path, "Capture cuda graph begin")
    artifact = tmp_path / "sgl_kernel-0.3.1-cp311-linux_x86_64.whl"
    artifact.write_bytes(b"PK\x03\x04" + os.urandom(300_000))

    responses = []
    r = client.put(
        "/api/sessions/sglang-sm120",
        json={"title": "SGLang on SM120", "objective": "find the hang"},
    )
    assert r.status_code == 201, r.text
    for spec in (
        {"kind": "process", "match": marker, "env": ["NCCL_*", "HF_*"]},
        {"kind": "log", "path": str(log_path), "lines": 10},
        {"kind": "artifact", "path": str(artifact)},
        {"kind": "port", "port": 1},
    ):
        r = client.post("/api/sessions/sglang-sm120/watches", json=spec)
        assert r.status_code == 201, r.text
        responses.append(r)
    attempt = {"kind": "attempt", "text": "SGLang with EAGLE-3", "status": "failed"}
    r = client.post("/api/sessions/sglang-sm120/journal", json={**attempt, "outcome": "hung"})
    assert r.status_code == 201, r.text

    first = client.post("/api/sessions/sglang-sm120/snapshots", json={"note": "before kill"})
    assert first.status_code == 201, first.text
    v1 = first.json()
    assert v1["header"]["version"] == 1
    pids = {p["pid"]: p for p in v1["observations"]["processes"]["items"]}
    assert {launcher.pid, worker_pid} <= pids.keys()
    root = pids[launcher.pid]
    assert root["root"] and not pids[worker_pid]["root"]
    flags = {(f["name"], f["value"]) for f in root["flags"]}
    assert ("--tp", "8") in flags and ("--disable-cuda-graph", None) in flags
    assert ("--log-level", "debug") in flags
    assert root["env"]["NCCL_DEBUG"] == "INFO"
    assert root["env"]["HF_TOKEN"] == "[REDACTED]"
    log_item = v1["observations"]["logs"]["items"][0]
    assert "Loading safetensors checkpoint shards: 100% Completed | 4/4" in log_item["lines"]
    assert not any("25%" in line for line in log_item["lines"])
    art = v1["observations"]["artifacts"]["items"][0]
    assert art["size"] == artifact.stat().st_size and art["fingerprint"]

    # the answer to the POST is the stored version, as GET gives it, field for field
    assert client.get("/api/sessions/sglang-sm120/snapshots/1").json() == v1
    assert first.headers["content-type"] == "application/json"

    md1 = client.get("/api/sessions/sglang-sm120/snapshots/1/markdown")
    assert md1.status_code == 200
    assert md1.headers["content-type"] == "text/markdown; charset=utf-8"
    for needle in (str(launcher.pid), str(worker_pid), "--tp 8", "--disable-cuda-graph",
                   "100% Completed | 4/4", art["fingerprint"], "SGLang with EAGLE-3",
                   "127.0.0.1:1 not listening"):  # fmt: skip
        assert needle in md1.text, needle

    os.kill(worker_pid, 9)
    wait_until(lambda: not Path(f"/proc/{worker_pid}").exists(), "the worker gone")
    artifact.write_bytes(b"PK\x03\x04" + os.urandom(400_000))

    second = client.post("/api/sessions/sglang-sm120/snapshots")
    assert second.status_code == 201, second.text
    v2 = second.json()
    assert v2["header"]["version"] == 2 and v2["header"]["previous_version"] == 1
    change_text = "\n".join(c["text"] for c in v2["changes"])
    assert f"exited: {worker_pid}" in change_text
    assert "artifact" in change_text
    md2 = client.get("/api/sessions/sglang-sm120/snapshots/2/markdown").text
    ARTIFACTS.mkdir(exist_ok=True)  # for a person to read (git-ignored)
    (ARTIFACTS / "end_to_end_v2.md").write_text(md2)
    assert "## Changes since v1" in md2 and f"exited: {worker_pid}" in md2

    versions = client.get("/api/sessions/sglang-sm120/snapshots").json()
    assert [v["version"] for v in versions] == [2, 1]
    files = sorted(p.name for p in (server.data_dir / "sglang-sm120").iterdir())
    assert files == ["latest.md", "v0001.md", "v0002.md"]
    assert (server.data_dir / "sglang-sm120" / "latest.md").read_text() == md2

    diff = client.get("/api/sessions/sglang-sm120/diff", params={"from": 1, "to": 2})
    assert diff.status_code == 200 and f"exited: {worker_pid}" in diff.text

    resume = client.get("/api/sessions/sglang-sm120/resume", params={"fresh": "false"})
    assert resume.text == md2
    cont = client.post("/api/sessions/sglang-sm120/messages", json={"text": "  "})
    assert cont.status_code == 200 and "trigger `continue`" in cont.text
    responses += [first, second, md1, diff, resume, cont]

    for secret in (API_KEY, HF_TOKEN):
        for r in responses:
            assert secret not in r.text
        for path in server.data_dir.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path
        assert secret not in server.log()


def test_database_agrees_with_files_after_restart(tmp_path):
    from tests.conftest import start_server, stop_server

    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log")
    try:
        with srv.client() as c:
            c.put("/api/sessions/restart", json={})
            for _ in range(3):
                taken = c.post("/api/sessions/restart/snapshots", json={"force": True})
                assert taken.status_code == 201
    finally:
        stop_server(srv)
    folder = tmp_path / "data" / "restart"
    (folder / "v0002.md").unlink()
    (folder / "latest.md").unlink()
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log")
    try:
        assert (folder / "v0002.md").exists() and (folder / "latest.md").exists()
        with srv.client() as c:
            stored = c.get("/api/sessions/restart/snapshots/3/markdown").text
        assert (folder / "latest.md").read_text() == stored
    finally:
        stop_server(srv)
