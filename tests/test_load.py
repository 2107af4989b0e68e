"""Bounded loopback load: /health and resume keep answering while snapshots run.

Not a speed test (bench/ measures): it checks that every probe gets an answer, and a 200,
while four clients take snapshots back to back for a fixed number of rounds.
"""

import threading
from collections import Counter

import httpx

from tests.conftest import Server

WRITERS = 4
SNAPSHOTS_EACH = 10


def _writer(url: str, sid: str, statuses: Counter) -> None:
    with httpx.Client(base_url=url, timeout=120) as c:
        for _ in range(SNAPSHOTS_EACH):
            r = c.post(f"/api/sessions/{sid}/snapshots", json={"force": True})
            statuses[r.status_code] += 1


def test_health_and_resume_answer_under_snapshot_load(
    server: Server, client: httpx.Client, spawn, tmp_path
) -> None:
    log = tmp_path / "busy.log"
    log.write_text("".join(f"line {i} step=1 loss=0.5\n" for i in range(5000)))
    worker = spawn("sleep", "300")
    for i in range(WRITERS):
        sid = f"load-{i}"
        assert client.put(f"/api/sessions/{sid}", json={}).status_code == 201
        client.post(f"/api/sessions/{sid}/watches", json={"kind": "log", "path": str(log)})
        client.post(f"/api/sessions/{sid}/watches", json={"kind": "process", "pid": worker.pid})
    client.post("/api/sessions/load-0/snapshots", json={"force": True})
    statuses: Counter = Counter()
    writers = [
        threading.Thread(target=_writer, args=(server.url, f"load-{i}", statuses))
        for i in range(WRITERS)
    ]
    for t in writers:
        t.start()
    probes: Counter = Counter()
    with httpx.Client(base_url=server.url, timeout=60) as probe:
        while any(t.is_alive() for t in writers):
            probes[probe.get("/health").status_code] += 1
            stored = probe.get("/api/sessions/load-0/resume", params={"fresh": "false"})
            probes[stored.status_code] += 1
            fresh = probe.get("/api/sessions/load-1/resume", params={"max_chars": 4000})
            probes[fresh.status_code] += 1
    for t in writers:
        t.join()
    assert statuses == Counter({201: WRITERS * SNAPSHOTS_EACH}), statuses
    assert set(probes) == {200}, probes
    assert probes[200] >= 3
