"""The crowd rows of `make bench`: a watch matching 300 processes, 5,000 host processes with
discovery on, 10 sessions of 8 watches left idle, and the server's peak RSS once MCP is used."""

import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from bench.scenario import Scenario, Server, register
from bench.timing import cpu_percent, p95, timed

SETTLE_S = 12.0  # two event probes (CTXD_EVENT_PROBE_S, 5 s) and a tick


def row(name: str, value: str, note: str = "") -> None:
    print(f"  {name:<44} {value:>14}  {note}")


def bench_watch300(client: httpx.Client, scenario: Scenario, runs: int, figures: dict) -> None:
    """One process watch whose pattern matches 300 sleepers (beside the 1,000 others)."""
    print("a process watch matching 300 processes")
    crowd = [subprocess.Popen(["sleep", "3599"]) for _ in range(300)]
    try:
        client.put("/api/sessions/crowd", json={"objective": "300 matches"})
        spec = {"kind": "process", "match": "sleep 3599"}
        added = client.post("/api/sessions/crowd/watches", json=spec).raise_for_status().json()
        take = lambda: client.post(  # noqa: E731
            "/api/sessions/crowd/snapshots", json={"force": True}
        ).raise_for_status()
        take()
        took = timed(take, runs)
        figures["watch300_ms"] = statistics.median(took)
        row("snapshot median / p95", f"{statistics.median(took):.1f} ms", f"p95 {p95(took):.1f}")
        client.delete(f"/api/sessions/crowd/watches/{added['id']}")  # not idle-probed later
    finally:
        for proc in crowd:
            proc.kill()
        for proc in crowd:
            proc.wait()


def bench_discovery(
    client: httpx.Client, scenario: Scenario, runs: int, figures: dict, host_ms: float
) -> None:
    """With 5,000 host processes: a session with a git workspace whose watches ctxd added by
    itself. Its snapshot over HTTP, then the settling snapshot that follows an agent's launch
    (workspace scan, then snapshot), timed in-process, as the server's timer runs it."""
    print("5,000 host processes, discovery on (a git workspace, automatic watches)")
    workspace = scenario.root / "ws"
    workspace.mkdir(exist_ok=True)
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    server_log = scenario.logs[1]
    command = f"nohup python bench_launcher.py --port {scenario.listening_port} > {server_log} &"
    action = {"kind": "command", "command": command, "cwd": str(workspace), "background": True}
    session = {"objective": "discovery", "cwd": str(workspace), "discovery": True}
    client.put("/api/sessions/disc", json=session).raise_for_status()
    client.post("/api/sessions/disc/actions", json={"actions": [action]}).raise_for_status()
    watches = client.get("/api/sessions/disc/watches").json()
    take = lambda: client.post(  # noqa: E731
        "/api/sessions/disc/snapshots", json={"force": True}
    ).raise_for_status()
    take()
    snap = statistics.median(timed(take, runs))
    for watch in watches:
        client.delete(f"/api/sessions/disc/watches/{watch['id']}")  # not idle-probed later
    settle = statistics.median(_settling(session, action, runs))
    figures["discovery5000_ms"] = settle
    row("automatic watches", str(len(watches)))
    row("snapshot median (git section included)", f"{snap:.1f} ms", f"plain: {host_ms:.1f} ms")
    row("settling snapshot: scan + snapshot", f"{settle:.1f} ms", "in-process")


def _settling(session: dict, action: dict, runs: int) -> list[float]:
    """The settling step of the session (`ActionIntake._settle`), `runs` times, in this
    process against its own store: the server runs it on a timer, with no request to time."""
    from ctxd.discovery.actions import CommandAction
    from ctxd.models import SessionIn
    from ctxd.settings import Settings
    from ctxd.snapshotter.snapshotter import Snapshotter
    from ctxd.snapshotter.triggers import Activity
    from ctxd.store.database import Store
    from ctxd.usecases.operations import UseCases

    with tempfile.TemporaryDirectory(prefix="ctxd-settle-") as folder:
        settings = Settings(data_dir=Path(folder))
        snap = Snapshotter(settings, Store(settings.db_path))
        cases = UseCases(snap, Activity())
        try:
            snap.store.put_session("disc", SessionIn.model_validate(session))
            cases.record_actions("disc", [CommandAction.model_validate(action)])
            cases.intake.close()  # its own timer: the settling runs are timed below
            settle = lambda: cases.intake._settle("disc")  # noqa: E731
            settle()
            settle()  # the second walks the trees again once (see bench/README.md)
            return timed(settle, runs)
        finally:
            cases.close()
            snap.close()


def bench_idle_crowd(
    server: Server, client: httpx.Client, scenario: Scenario, seconds: float, figures: dict
) -> None:
    """10 sessions of 8 watches each (the standard ones: `bench` and 9 more), sampled and
    probed by the trigger watcher, nobody asking."""
    print(f"idle footprint, 10 sessions x 8 watches, over {seconds:.0f} s")
    for i in range(9):
        sid = f"idle{i}"
        register(client, sid, scenario)
        client.post(f"/api/sessions/{sid}/snapshots").raise_for_status()
    # Idle is the steady state: a new session's first two probes walk its artifact tree
    # (the second settles the tree's watcher), so two probe periods pass before measuring.
    time.sleep(SETTLE_S)
    cpu = cpu_percent(server.process.pid, seconds)
    figures["idle10x8_cpu_pct"] = cpu
    row("CPU of one core", f"{cpu:.2f} %")


def use_mcp(server: Server) -> int:
    """An MCP client session: initialize, list tools, a snapshot and a resume."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def calls() -> int:
        async with (
            streamable_http_client(f"{server.url}/mcp") as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = await session.list_tools()
            await session.call_tool("take_snapshot", {"session": "bench"})
            await session.call_tool("resume", {"session": "bench", "fresh": False})
            return len(tools.tools)

    return asyncio.run(calls())


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return psutil.Process(pid).memory_info().rss / 2**20
