"""What the agent did, told by MCP and over HTTP: stored redacted, watches added by themselves,
bad input answered clearly."""

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from ctxd.usecases.agent_actions import built_since

from tests.conftest import Server
from tests.test_mcp import _session_calls as mcp_session

if TYPE_CHECKING:
    from ctxd.usecases.operations import UseCases

SECRET = "hf_Zq8vR2mXw4LkP9sT7yB3nC6dF1gH5jK0aE"


def test_mcp_record_action_adds_watches_for_a_launch(
    server: Server, client: httpx.Client, tmp_path: Path
):
    client.put("/api/sessions/mcp-acts", json={"cwd": str(tmp_path)})
    command = f"HF_TOKEN={SECRET} nohup python3 serve.py --port 30555 > {tmp_path}/serve.log 2>&1 &"
    args = {"session": "mcp-acts", "command": command, "cwd": str(tmp_path), "exit_status": 0}
    out = asyncio.run(mcp_session(server.url, [("record_action", args)]))
    result = json.loads(out["results"][0].content[0].text)
    kinds = sorted(w["spec"]["kind"] for w in result["watches"])
    assert kinds == ["log", "process"] and all(w["auto"] for w in result["watches"])
    process = next(w for w in result["watches"] if w["spec"]["kind"] == "process")
    assert process["spec"]["match"] == "serve\\.py" and process["spec"]["expect_ports"] == [30555]
    dump = client.get("/api/sessions/mcp-acts/resume").text
    assert "serve.py --port 30555" in dump and SECRET not in dump
    assert "## Watched without being asked" in dump and "launched by the command at" in dump


def test_actions_over_http_bad_input_and_the_ring(server: Server, client: httpx.Client):
    client.put("/api/sessions/acts", json={})
    for bad in (
        {},
        {"actions": []},
        {"actions": [{"kind": "command"}]},
        {"actions": [{"kind": "teleport", "command": "x"}]},
        {"actions": [{"kind": "command", "command": "ls"}] * 101},
    ):
        answer = client.post("/api/sessions/acts/actions", json=bad)
        assert answer.status_code == 400, (bad, answer.text)
        assert answer.json()["detail"]
    # not shell at all, and a megabyte of output: recorded, capped, nothing else
    weird = [
        {"kind": "command", "command": "'unbalanced \" ;;; | & )(", "exit_status": 2},
        {"kind": "command", "command": "cat big", "output_tail": "x" * 900_000 + "END"},
        {"kind": "file_edit", "path": "/etc/shadow", "tool": "Edit"},
    ]
    answer = client.post("/api/sessions/acts/actions", json={"actions": weird})
    assert answer.status_code == 202 and answer.json() == {"recorded": 3, "watches": []}
    tail = client.get("/api/sessions/acts/resume").text
    assert "cat big" in tail
    huge = {"actions": [{"kind": "command", "command": "x", "output_tail": "y" * 2_000_000}]}
    answer = client.post("/api/sessions/acts/actions", json=huge)
    assert answer.status_code == 413 and answer.json()["detail"]
    for i in range(230):  # a ring: the oldest go
        client.post(
            "/api/sessions/acts/actions",
            json={"actions": [{"kind": "command", "command": f"echo {i}"}]},
        )
    dump = client.get("/api/sessions/acts/resume").text
    assert "`echo 229`" in dump and "`echo 0`" not in dump
    assert client.post("/api/sessions/nobody/actions", json={"actions": weird}).status_code == 404


def test_built_since_finds_new_artifacts_as_globs(tmp_path: Path):
    (tmp_path / "dist").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "dist" / "old.whl").write_text("old")
    os.utime(tmp_path / "dist" / "old.whl", (time.time() - 3600, time.time() - 3600))
    since = time.time() - 60
    assert built_since(str(tmp_path), since) == []
    (tmp_path / "dist" / "kernel-0.2-py3-none-any.whl").write_text("new")
    (tmp_path / ".git" / "pack.zip").write_text("hidden")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "libk.so").write_text("so")
    found = built_since(str(tmp_path), since)
    assert sorted(found) == [str(tmp_path / "build" / "*.so"), str(tmp_path / "dist" / "*.whl")]


def test_cli_action_records_a_command_and_adds_its_watches(server: Server, tmp_path: Path):
    httpx.put(f"{server.url}/api/sessions/cli-acts", json={}).raise_for_status()
    ctxd = [sys.executable, "-m", "ctxd", "--url", server.url, "action", "cli-acts"]
    ran = ["--command", "make -j8 2>&1 | tee build.log", "--exit", "2", "--cwd", str(tmp_path)]
    done = subprocess.run([*ctxd, *ran, "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["recorded"] == 1
    bad = subprocess.run([*ctxd], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--command" in bad.stderr
    dump = httpx.get(f"{server.url}/api/sessions/cli-acts/resume").text
    assert "`make -j8 2>&1 | tee build.log` → exit 2" in dump


def test_a_session_can_switch_discovery_off(server: Server, client: httpx.Client):
    client.put("/api/sessions/quiet", json={"discovery": False}).raise_for_status()
    assert client.get("/api/sessions/quiet").json()["discovery"] is False
    launch = {"kind": "command", "command": "nohup python3 serve.py --port 30999 > s.log &"}
    answer = client.post("/api/sessions/quiet/actions", json={"actions": [launch]})
    assert answer.json() == {"recorded": 1, "watches": []}
    assert client.get("/api/sessions/quiet/watches").json() == []
    assert "serve.py --port 30999" in client.get("/api/sessions/quiet/resume").text
    client.put("/api/sessions/quiet", json={"discovery": True})
    answer = client.post("/api/sessions/quiet/actions", json={"actions": [launch]})
    # without a cwd the relative log path cannot be placed: the process, expecting its port
    (process,) = answer.json()["watches"]
    assert process["spec"]["kind"] == "process" and process["spec"]["expect_ports"] == [30999]


def test_automatic_watches_whose_target_is_gone_retire_and_keep_their_history(tmp_path: Path):
    from tests.conftest import start_server, stop_server

    server = start_server(tmp_path / "d", tmp_path / "log", env={"CTXD_AUTO_RETIRE_S": "0"})
    try:
        client = server.client()
        client.put("/api/sessions/gone", json={"cwd": str(tmp_path)})
        keep = {"kind": "log", "path": str(tmp_path / "by-hand.log")}
        client.post("/api/sessions/gone/watches", json=keep).raise_for_status()
        launch = {"kind": "command", "command": "nohup python3 nothere.py > nothere.log 2>&1 &"}
        launch["cwd"] = str(tmp_path)
        added = client.post("/api/sessions/gone/actions", json={"actions": [launch]}).json()
        assert len(added["watches"]) == 2
        client.post("/api/sessions/gone/snapshots", json={"force": True})  # gone: noted
        client.post("/api/sessions/gone/snapshots", json={"force": True})  # still gone: retired
        left = client.get("/api/sessions/gone/watches").json()
        assert [w["spec"]["path"] for w in left] == [keep["path"]]  # the agent's own stays
        assert "nothere.py" in client.get("/api/sessions/gone/resume").text  # in history
    finally:
        stop_server(server)


def test_the_settling_snapshot_takes_the_process_table_its_scan_just_read(
    tmp_path: Path, monkeypatch
):
    """The workspace scan and the snapshot right after it list /proc once between them, and
    the snapshot still shows the process the scan found (watched by itself)."""
    from ctxd.collectors.proc import proctree
    from ctxd.models import SessionIn
    from ctxd.settings import Settings
    from ctxd.snapshotter.snapshotter import Snapshotter
    from ctxd.snapshotter.triggers import Activity
    from ctxd.store.database import Store
    from ctxd.usecases.operations import UseCases

    settings = Settings(data_dir=tmp_path / "data", cpu_sample_s=0)
    snap = Snapshotter(settings, Store(settings.db_path))
    cases = UseCases(snap, Activity())
    work = tmp_path / "work"
    work.mkdir()
    (work / "serve.py").write_text("import time; print('loading', flush=True); time.sleep(60)")
    with (work / "serve.log").open("w") as out:
        proc = subprocess.Popen([sys.executable, "serve.py"], cwd=work, stdout=out)
    reads = []
    real_scan = proctree.scan
    monkeypatch.setattr(proctree, "scan", lambda: reads.append(1) or real_scan())
    monkeypatch.setattr(proctree, "_latest", (float("-inf"), {}, {}))  # none read before
    try:
        snap.store.put_session("settle", SessionIn(cwd=str(work)))
        time.sleep(0.8)  # older than the scan's minimum age: a long-lived process
        cases.intake._settle("settle")
        assert len(reads) == 1
        watches = snap.store.list_watches("settle")
        assert sorted(w.spec.kind for w in watches) == ["log", "process"]
        stored = snap.store.get_snapshot("settle", snap.store.latest_version("settle"))
        assert stored.header.trigger == "action"
        assert [p.pid for p in stored.observations.processes.items] == [proc.pid]
    finally:
        proc.kill()
        proc.wait(timeout=10)
        cases.close()
        snap.close()


@pytest.fixture
def cases(tmp_path: Path) -> Iterator["UseCases"]:
    """The use cases in this process, over a store of this test's own."""
    from ctxd.settings import Settings
    from ctxd.snapshotter.snapshotter import Snapshotter
    from ctxd.snapshotter.triggers import Activity
    from ctxd.store.database import Store
    from ctxd.usecases.operations import UseCases

    settings = Settings(data_dir=tmp_path / "data", cpu_sample_s=0, watch_roots=[tmp_path])
    snap = Snapshotter(settings, Store(settings.db_path))
    use_cases = UseCases(snap, Activity())
    yield use_cases
    use_cases.close()
    snap.close()


def _launch_crossing(tmp_path: Path, tag: str) -> tuple[Path, list[str], str]:
    """A workspace with a server script, the argv of its launch, and the line that launches it."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "serve.py").write_text("import time; print('loading', flush=True); time.sleep(60)")
    argv = [sys.executable, "serve.py", "--run", "1", "--tag", tag]
    return work, argv, f"nohup {' '.join(argv)} > run1.log 2>&1 &"


def test_a_command_reported_while_a_snapshot_is_stored_joins_the_process_it_saw(
    cases: "UseCases", tmp_path: Path, tag: str, monkeypatch
):
    """The snapshot sees the launch's process first (no command accounts for it yet), the
    harness reports the command before that snapshot writes its attempts: one attempt, the
    process's, with its command (not a second one that 'died before ctxd saw it')."""
    from ctxd.discovery import rules
    from ctxd.discovery.actions import CommandAction
    from ctxd.models import ProcessWatch, SessionIn, Trigger

    work, argv, line = _launch_crossing(tmp_path, tag)
    cases.store.put_session("cross", SessionIn(cwd=str(work)))
    pattern = rules.program_pattern(argv)
    cases.add_watch("cross", ProcessWatch(match=pattern), "an earlier launch")
    proc = subprocess.Popen(argv, cwd=work, stdout=subprocess.DEVNULL)
    assemble = cases.snap.assemble

    def assemble_then_report(*args, **kwargs):
        assembled = assemble(*args, **kwargs)
        assert [p.pid for p in assembled.snapshot.observations.processes.items] == [proc.pid]
        cases.intake.record("cross", [CommandAction(command=line, cwd=str(work))])
        return assembled

    monkeypatch.setattr(cases.snap, "assemble", assemble_then_report)
    cases.snap.take("cross", Trigger.MANUAL)
    (attempt,) = cases.store.list_attempts("cross")
    assert attempt.pid == proc.pid and attempt.command == line and attempt.seen


def test_a_command_reported_while_a_snapshot_looks_is_not_ended_by_it(
    cases: "UseCases", tmp_path: Path, tag: str, monkeypatch
):
    """The snapshot read the process table before the launch, the command is reported before
    it reads the attempts (its time a while back, as a harness may say): that snapshot cannot
    know the process died, so the attempt waits for the next, which finds it running."""
    from datetime import UTC, datetime, timedelta

    from ctxd.discovery.actions import CommandAction
    from ctxd.models import SessionIn, Trigger

    work, argv, line = _launch_crossing(tmp_path, tag)
    cases.store.put_session("cross", SessionIn(cwd=str(work)))
    observe = cases.snap.runner.observe
    launched = []

    def observe_then_launch(*args, **kwargs):
        observations = observe(*args, **kwargs)
        if not launched:
            launched.append(subprocess.Popen(argv, cwd=work, stdout=subprocess.DEVNULL))
            at = datetime.now(UTC) - timedelta(seconds=5)
            cases.intake.record("cross", [CommandAction(command=line, cwd=str(work), at=at)])
        return observations

    monkeypatch.setattr(cases.snap.runner, "observe", observe_then_launch)
    cases.snap.take("cross", Trigger.MANUAL)
    (attempt,) = cases.store.list_attempts("cross")
    assert attempt.ended_at is None and not attempt.seen  # not judged by that look
    cases.snap.take("cross", Trigger.MANUAL)
    (attempt,) = cases.store.list_attempts("cross")
    assert attempt.pid == launched[0].pid and attempt.ended_at is None
    assert attempt.command == line


def test_a_long_session_watches_the_logs_of_its_newest_launches(
    cases: "UseCases", tmp_path: Path, tag: str
):
    """Sixteen automatic watches at most: a launch retires the logs of attempts that ended
    but the newest two failures', and a new launch's log takes the place of the oldest one of an
    attempt that ended, then of one launched and never seen running (a burst of launches
    faster than any snapshot); the log a running attempt writes stays watched."""
    from datetime import UTC, datetime, timedelta

    from ctxd.discovery.actions import CommandAction
    from ctxd.discovery.rules import AUTO_WATCH_CAP
    from ctxd.models import LogWatch, SessionIn, Trigger

    work, argv, line = _launch_crossing(tmp_path, tag)
    cases.store.put_session("room", SessionIn(cwd=str(work)))
    proc = subprocess.Popen(argv, cwd=work, stdout=subprocess.DEVNULL)
    try:
        cases.intake.record("room", [CommandAction(command=line, cwd=str(work))])

        def launch(run: int) -> None:  # reported a while after it was run (as a harness may)
            dead = f"nohup {sys.executable} serve.py --run {run} --gone > run{run}.log 2>&1 &"
            at = datetime.now(UTC) - timedelta(seconds=5)
            cases.intake.record("room", [CommandAction(command=dead, cwd=str(work), at=at)])

        def watched() -> list[int]:
            logs = [w.spec for w in cases.store.list_watches("room")]
            return [int(Path(s.path).stem[3:]) for s in logs if isinstance(s, LogWatch)]

        full = AUTO_WATCH_CAP - 1  # the program's process watch is one of them
        for run in range(2, full + 1):  # never started: each dies "before ctxd saw it"
            launch(run)
        assert watched() == list(range(1, full + 1))
        cases.snap.take("room", Trigger.MANUAL)  # run 1 seen running; 2-15 ended
        runs = cases.store.list_attempts("room", limit=100)
        assert [r.pid for r in runs if not r.ended_at] == [proc.pid]

        launch(full + 1)
        # the next launch retires the ended attempts' logs but the newest two failures' (14, 15)
        assert watched() == [1, full - 1, full, full + 1]
        for run in range(full + 2, 2 * full + 1):
            launch(run)
        # 14 and 15 made room, then 16, launched and not seen, for 30
        assert watched() == [1, *range(full + 2, 2 * full + 1)]
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_relaunch_that_exports_a_variable_shows_it_on_the_program_it_runs(
    server: Server, client: httpx.Client, tmp_path: Path
):
    """The first launch set nothing; the relaunch's line exports APP_DEBUG=1 before `nohup`:
    the program's watch, kept from the first launch, now reads that variable too."""
    client.put("/api/sessions/relaunch-env", json={"cwd": str(tmp_path)})
    first = {"kind": "command", "command": "nohup python3 serve.py --port 30777 > a.log 2>&1 &",
             "cwd": str(tmp_path)}  # fmt: skip
    relaunch = "export APP_DEBUG=1; " + first["command"].replace("a.log", "b.log")
    again = {**first, "command": relaunch}
    for action in (first, again):
        client.post("/api/sessions/relaunch-env/actions", json={"actions": [action]})
    watches = client.get("/api/sessions/relaunch-env/watches").json()
    (process,) = [w for w in watches if w["spec"]["kind"] == "process"]
    assert process["spec"]["env"] == ["APP_DEBUG"], process
