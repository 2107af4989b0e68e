"""The dump as a handover: one instant for every number, the attempts table that never loses an
attempt, severity by the attempt's phase, and the budget cut that goes by value."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from ctxd import fmt
from ctxd.attempts.model import AttemptUpdate
from ctxd.models import (
    HistoryItem,
    LogInfo,
    Observations,
    PortInfo,
    PortsSection,
    ProcessesSection,
    ProcessInfo,
    Said,
    SessionIn,
    Signal,
    Snapshot,
    SnapshotHeader,
)
from ctxd.render import attempts as attempt_table
from ctxd.render import handover
from ctxd.settings import Settings
from ctxd.signals import attempts as attempt_signals
from ctxd.signals import derive
from ctxd.snapshotter import happened
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.database import Store
from ctxd.usecases import recovery

T0 = datetime.now(UTC) - timedelta(hours=3)


@pytest.fixture
def snap(tmp_path: Path):
    settings = Settings(data_dir=tmp_path / "data")
    snapshotter = Snapshotter(settings, Store(settings.db_path))
    yield snapshotter
    snapshotter.close()


def launches(store: Store, sid: str, count: int, running: bool = True) -> None:
    """`count` launches of one server, each with other flags, each dying of one NCCL error
    (its numbers varying); the last one running when `running`."""
    for n in range(1, count + 1):
        flags = f"--tp 8 --nccl-algo v{n % 5} --max-model-len {4096 * (1 + n % 3)} --run {n}"
        error = f"RuntimeError: NCCL error in ncclAllReduce: unhandled cuda error {n}"
        ended = {
            "ended_at": T0 + timedelta(minutes=n, seconds=30),
            "error_log": f"/srv/r{n}.log",
            "error": error,
        }
        last = n == count and running
        row = {
            "start_key": f"cmd:{n}",
            "watch_id": None,
            "pid": 4000 + n,
            "started_at": T0 + timedelta(minutes=n),
            "argv": ["python3", "serve.py", *flags.split()],
            "cwd": "/srv",
            "env": {},
            "expected_ports": [30000],
            "logs": [f"/srv/r{n}.log"],
            "seen": 1,
            "command": f"nohup python3 serve.py {flags} > r{n}.log 2>&1 &",
        }
        store.save_attempts(sid, [AttemptUpdate(**{**row, **({} if last else ended)})])


def attempts_section(dump: str) -> str:
    return dump.split("## Attempts", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("count", [24, 300])
def test_every_attempt_has_a_row_or_a_fold_and_the_table_stays_small(snap: Snapshotter, count):
    snap.store.put_session("many", SessionIn(objective="find the NCCL hang"))
    launches(snap.store, "many", count)
    dump = snap.render(snap.take("many"), for_model=True)
    table = attempts_section(dump).split("as you wrote it:")[0]
    assert len(table) <= 2_500, len(table)
    rows = [line for line in table.splitlines() if line.startswith("| **attempt")]
    covered: set[int] = set()
    for row in rows:
        label = row.split("**")[1].removeprefix("attempts ").removeprefix("attempt ")
        first, _, last = label.partition("\N{EN DASH}")
        covered |= set(range(int(first), int(last or first) + 1))
    assert covered == set(range(1, count + 1))  # none left out, none twice
    assert f"**attempt {count}**" in table and f"**attempt {count - 1}**" in table
    assert "varied: " in table  # a fold names the flags that varied among its attempts
    # the whole line, as written, for what runs and for the newest failure, never cut
    assert f"--run {count} > r{count}.log 2>&1 &" in dump
    assert f"--run {count - 1} > r{count - 1}.log 2>&1 &" in dump


def test_a_version_served_later_says_when_it_was_taken_and_how_long_ago(snap: Snapshotter):
    snap.store.put_session("late", SessionIn(objective="x"))
    launches(snap.store, "late", 2)
    taken = snap.take("late")
    served = taken.header.taken_at + timedelta(seconds=30)
    dump = recovery.for_model(snap, taken, 8_000, served_at=served)
    at = f"{taken.header.taken_at:%Y-%m-%d %H:%M:%S} UTC"
    assert f"Every age, duration and idle time below is as of {at}" in dump
    assert "when this version was taken; idle means under 1% CPU." in dump  # what "idle" is
    assert "30 s after it was taken" in dump
    # the handover's ages are of that instant: the launch and the dump one clock
    launched = T0 + timedelta(minutes=2)
    ago = fmt.between(launched, taken.header.taken_at)
    assert f"launched {launched:%H:%M:%S}, {ago} before this dump" in dump
    assert f"running for {ago}" in dump


def live(at: datetime, **extra) -> HistoryItem:
    fields = {
        "at": at,
        "source": "launch",
        "label": "attempt 2",
        "first": 2,
        "last": 2,
        "text": "`python3 serve.py` (pid 50) at x",
        "status": "running",
        "pid": 50,
        "ports": [30000],
        "port_open": False,
        "command": "python3 serve.py",
    }
    return HistoryItem(**{**fields, **extra})


def root(age: float) -> ProcessInfo:
    return ProcessInfo(
        watch_id=1,
        pid=50,
        ppid=1,
        name="python3",
        state="sleeping",
        cpu_percent=0.0,
        started_at=datetime.now(UTC),
        age_s=age,
        root=True,
        tree=50,
        idle_for_s=age,
        argv=["python3", "serve.py"],
    )


def closed_port() -> Signal:
    return Signal(
        severity="critical",
        code=happened.PORT_CLOSED,
        subject="127.0.0.1:30000",
        text="127.0.0.1:30000 not listening; expected by the watched process "
        "python3 serve.py (pid 50)",
    )


def test_a_launch_seconds_old_is_starting_not_critical_and_later_it_is():
    seen = Observations(processes=ProcessesSection(items=[root(3)]))
    launched = datetime.now(UTC) - timedelta(seconds=3)
    young = attempt_signals.restate([closed_port()], [live(launched)], seen, set())
    (port,) = [s for s in young if s.code == happened.PORT_CLOSED]
    assert port.severity == "info" and "attempt 2 is starting (launched 3 s ago)" in port.text
    launched = datetime.now(UTC) - timedelta(minutes=5)
    old = attempt_signals.restate([closed_port()], [live(launched)], seen, set())
    (port,) = [s for s in old if s.code == happened.PORT_CLOSED]
    assert port.severity == "critical" and port.text.startswith("attempt 2: ")


def test_a_serving_idle_server_raises_nothing():
    serving = Observations(
        processes=ProcessesSection(items=[root(600)]),
        ports=PortsSection(
            items=[
                PortInfo(host="127.0.0.1", port=30000, listening=True, expected_by=1, owner_pid=50)
            ]
        ),
    )
    assert derive.derive(serving, None) == []
    closed = serving.model_copy(deep=True)
    closed.ports.items[0].listening = False
    closed.processes.items[0].idle_for_s = 30  # idle, not yet stuck
    assert {s.code for s in derive.derive(closed, None)} >= {"all_idle", happened.PORT_CLOSED}


def test_the_handover_quotes_the_user_and_the_agent_with_their_times():
    at = datetime.now(UTC)
    snapshot = Snapshot(header=SnapshotHeader(session="s", version=3, taken_at=at, trigger="t"))
    n = snapshot.narrative
    n.objective, n.objective_source = "find the hang", "the user's first prompt"
    n.user_messages = [
        Said(at=at - timedelta(minutes=9), text="find the hang"),
        Said(at=at - timedelta(minutes=5), text="keep NCCL_DEBUG=INFO"),
        Said(at=at - timedelta(seconds=4), text=""),
    ]
    n.agent_said = Said(at=at - timedelta(seconds=30), text="Relaunched in eager mode; waiting.")
    lines = handover.lines(snapshot)
    asked = n.user_messages[0].at
    assert lines[0] == f"**Objective** (the user's first prompt, {asked:%H:%M:%S}): “find the hang”"
    assert lines[1].startswith("**The user's latest message** (") and "empty" in lines[1]
    assert "the one this dump was taken for" not in lines[1]  # 4 s before it: said apart
    n.user_messages[-1] = Said(at=at - timedelta(seconds=1), text="continue")
    assert handover.lines(snapshot)[1] == (
        f"**The user's latest message** ({at - timedelta(seconds=1):%H:%M:%S}, the one this dump"
        " was taken for): “continue”: go on where you left off"
    )
    assert "“keep NCCL_DEBUG=INFO”" in lines[2] and "find the hang" not in lines[2]
    assert lines[3].startswith("**Your last words** (")
    assert lines[3].endswith(" before this dump): “Relaunched in eager mode; waiting.”")


def test_alike_failures_fold_but_the_newest_failure_and_what_runs_keep_their_rows():
    at = T0
    items = [
        HistoryItem(
            at=at + timedelta(minutes=n),
            source="launch",
            label=f"attempt {n}",
            first=n,
            last=n,
            text="`python3 serve.py` (pid 1) at x",
            status="ended",
            error=f"RuntimeError: NCCL error {n}",
            flags=["--run"],
            flag_values={"--run": str(n)},
            ran="exited with status 1 after 30 s",
            command=f"NCCL_DEBUG=INFO nohup python3 serve.py --run {n} --algo Ring > r{n}.log &",
        )
        for n in range(1, 6)
    ] + [live(at + timedelta(minutes=6), label="attempt 6", first=6, last=6,
              flag_values={"--algo": "Tree"})]  # fmt: skip
    rows = attempt_table.rows(items, at + timedelta(minutes=7))
    assert [r.label for r in rows] == [
        "**attempts 1\N{EN DASH}4**",
        "**attempt 5**",
        "**attempt 6**",
    ]
    assert "each died the same way (4 times)" in rows[0].ran
    # the values tried, and the one a flag the session changed elsewhere held through them
    assert rows[0].changed == "varied: --run 1, 2, 3, 4; all with --algo Ring", rows[0].changed
    items[1].command = "python3 serve.py --run 2 --algo Tree"  # not one value: not named
    assert attempt_table.rows(items, at)[0].changed == "varied: --run 1, 2, 3, 4"
    assert rows[2].ended == "still running"
    rows[2:] = attempt_table.rows([items[-1].model_copy(update={"port_open": True})], at)
    assert rows[2].ended == "still running, serving"  # as the handover says it


def test_the_budget_cut_keeps_the_handover_every_row_and_the_running_tops_environment(
    snap: Snapshotter,
):
    snap.store.put_session("cut", SessionIn(objective="find the NCCL hang"))
    launches(snap.store, "cut", 30)
    full = snap.take("cut")
    top = root(5)
    top.pid, top.tree, top.env = 4030, 4030, {"NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1"}
    full.observations.processes.items = [top]
    dump = recovery.for_model(snap, full, 3_000)
    assert len(dump) <= 3_000
    assert "## Handover" in dump and "**Running now**: attempt 30" in dump
    assert "**attempt 30**" in dump and "**attempt 29**" in dump and "attempts 1" in dump
    assert "NCCL_P2P_DISABLE=1" in dump
    assert "ctxd resume cut" in dump  # where the whole dump is


def test_alike_gpus_are_one_row_naming_every_pid():
    from ctxd.models import GpuInfo, GpuProcess
    from ctxd.render import gpus

    def gpu(i: int, used: int) -> GpuInfo:
        procs = [GpuProcess(pid=100 + i, name="python3", used_memory_bytes=used, watched=True)]
        return GpuInfo(index=i, name="NVIDIA H200", utilization_percent=0.0,
                       memory_used_bytes=used, memory_total_bytes=140 * 2**30,
                       processes=procs if used > 2**30 else [])  # fmt: skip

    rows = gpus.rows([*(gpu(i, 119 * 2**30) for i in range(6)), gpu(6, 2**20), gpu(7, 2**20)])
    assert [r.indices for r in rows] == ["0\N{EN DASH}5", "6\N{EN DASH}7"]
    assert [p.pid for p in rows[0].processes] == [100, 101, 102, 103, 104, 105]
    assert rows[0].each and not rows[1].processes


def test_a_stack_leads_with_its_main_thread_and_folds_idle_helpers():
    from ctxd.render import stacks

    idle = ["    Condition.wait (threading.py:327)", "    Event.wait (threading.py:629)"]
    lines = [
        'thread "Thread-2 (wait)" (idle)', *idle,
        'thread "Thread-1 (wait)" (idle)', *idle,
        'thread "MainThread" (idle)', "    load_shard (launch_server.py:13)",
        "    <module> (launch_server.py:36)",
    ]  # fmt: skip
    assert stacks.threads(lines) == [
        'thread "MainThread" (idle)', "    load_shard (launch_server.py:13)",
        "    <module> (launch_server.py:36)",
        "2 more threads (Thread-2 (wait), Thread-1 (wait)) alike, innermost in "
        "Condition.wait (threading.py:327)",
    ]  # fmt: skip


def test_a_process_no_command_started_is_named_by_its_argv_quoted(snap: Snapshotter):
    snap.store.put_session("found", SessionIn(objective="x"))
    argv = ["python3", "srv.py", "--name=x;touch PWN", "--tag=$(touch PWN2)"]
    row = {"start_key": "root:1", "watch_id": None, "pid": 4242, "started_at": T0,
           "argv": argv, "cwd": "/srv", "env": {}, "expected_ports": [], "logs": [],
           "seen": 1, "command": None}  # fmt: skip
    snap.store.save_attempts("found", [AttemptUpdate(**row)])
    (item,) = [i for i in snap.take("found").narrative.history if i.source == "launch"]
    assert item.command == "python3 srv.py '--name=x;touch PWN' '--tag=$(touch PWN2)'"
    assert not item.written  # so no dump calls it the agent's own line


def test_the_handover_dates_the_agents_words_and_sets_the_last_failure_before_what_runs():
    """The agent's last words say how old they are (a "loading" said 13 s before a dump that
    calls the attempt stuck is dated, not contradicted); the running attempt's GPUs are told
    by the memory each holds, the odd one apart; the failure before it is said to be before
    it, with its log named as the agent's line names it."""
    from ctxd.models import GpuInfo, GpuProcess, GpusSection

    at = datetime.now(UTC)
    snapshot = Snapshot(header=SnapshotHeader(session="s", version=3, taken_at=at, trigger="t"))
    n = snapshot.narrative
    n.agent_said = Said(at=at - timedelta(seconds=13), text="The server is loading.")
    failed = live(at - timedelta(seconds=20), label="attempt 1", status="ended", pid=40,
                  error="torch.OutOfMemoryError: CUDA out of memory.", cwd="/srv",
                  error_log="/srv/logs/attempt1.log", ran="died after 2 s")  # fmt: skip
    n.history = [failed, live(at - timedelta(seconds=15))]
    snapshot.observations.processes.items = [root(15)]

    def gpu(i: int, gib: float) -> GpuInfo:
        used = int(gib * 2**30)
        holder = GpuProcess(pid=50, name="python3", used_memory_bytes=used)
        return GpuInfo(index=i, name="NVIDIA H200", utilization_percent=0.0,
                       memory_used_bytes=used, memory_total_bytes=140 * 2**30,
                       processes=[holder])  # fmt: skip

    snapshot.observations.gpus = GpusSection(
        items=[gpu(i, 1.1 if i == 3 else 118.8) for i in range(8)]
    )
    running, last, said = handover.lines(snapshot)[1:4]
    assert said.startswith("**Your last words** (") and "13 s before this dump" in said, said
    assert (
        "it holds 8 NVIDIA H200 GPUs (0\N{EN DASH}2, 4\N{EN DASH}7: 118.8 GiB each; 3: 1.1 GiB)"
        in running
    ), running
    assert last.startswith("**Last attempt that died, before what runs now**: attempt 1"), last
    assert last.endswith("(in logs/attempt1.log)."), last


def test_a_port_open_a_second_after_launch_is_not_yet_proof_where_the_last_run_died_later():
    at = datetime.now(UTC)
    snapshot = Snapshot(header=SnapshotHeader(session="s", version=3, taken_at=at, trigger="t"))
    failed = live(at - timedelta(seconds=5), label="attempt 199", status="ended", pid=40,
                  error="DistBackendError: NCCL error", lived_s=2.0)  # fmt: skip
    up = live(at - timedelta(seconds=1), label="attempt 200", port_open=True)
    snapshot.narrative.history = [failed, up]
    snapshot.observations.processes.items = [root(1)]
    running = next(line for line in handover.lines(snapshot) if "Running now" in line)
    assert "**serving**" in running, running
    assert "not yet as old as attempt 199 was when it died (2 s)" in running, running
    snapshot.narrative.history = [failed, up.model_copy(update={"at": at - timedelta(seconds=9)})]
    running = next(line for line in handover.lines(snapshot) if "Running now" in line)
    assert "**serving**" in running and "not yet as old" not in running, running


def test_serving_says_what_it_rests_on():
    """An open port is "serving"; the line says whether a health URL answered, or that no
    request checked it (readers took "serving" for a server proven to answer)."""
    at = datetime.now(UTC)
    snapshot = Snapshot(header=SnapshotHeader(session="s", version=3, taken_at=at, trigger="t"))
    snapshot.narrative.history = [live(at - timedelta(seconds=30), port_open=True)]
    snapshot.observations.processes.items = [root(1)]
    running = next(line for line in handover.lines(snapshot) if "Running now" in line)
    assert "**serving**; port 30000 open (listening; no health URL watched: ctxd sent it no" in (
        running
    ), running
    snapshot.observations.ports = PortsSection(items=[PortInfo(
        host="127.0.0.1", port=30000, listening=True, url="http://127.0.0.1:30000/health",
        health_status=200, health_body="ok")])  # fmt: skip
    running = next(line for line in handover.lines(snapshot) if "Running now" in line)
    assert (
        "port 30000 open (ctxd asked its health URL as it took this dump:"
        " http://127.0.0.1:30000/health answered HTTP 200 “ok”)" in running
    ), running


def test_now_says_whether_it_is_quiet_or_the_handover_said_it_all(snap: Snapshotter):
    at = datetime.now(UTC)
    quiet = Snapshot(header=SnapshotHeader(session="s", version=1, taken_at=at, trigger="t"))
    assert "- nothing stands out in what ctxd watches now" in snap.render(quiet, for_model=True)
    failed = live(at - timedelta(seconds=5), label="attempt 1", status="ended", pid=40,
                  error="RuntimeError: boom")  # fmt: skip
    told = quiet.model_copy(deep=True)
    told.narrative.history = [failed]
    told.signals = [Signal(severity="critical", code="attempt_failed", subject="attempt 1",
                           text="attempt 1 died: RuntimeError: boom")]  # fmt: skip
    dump = snap.render(told, for_model=True)
    assert "**Last failure**: attempt 1" in dump
    assert "- nothing beyond what the handover says" in dump, dump


def test_a_running_line_with_secrets_says_where_their_values_are(snap: Snapshotter):
    at = datetime.now(UTC)
    snapshot = Snapshot(header=SnapshotHeader(session="s", version=1, taken_at=at, trigger="t"))
    line = "HF_TOKEN=[REDACTED] nohup python3 serve.py > server.log 2>&1 &"
    snapshot.narrative.history = [live(at, command=line, written=True, cwd="/srv")]
    dump = snap.render(snapshot, for_model=True)
    assert f"cd /srv && {line}" in dump
    assert "values are in the running process's own `/proc/50/environ`" in dump, dump


def test_the_values_a_flag_took_are_all_named_unless_many():
    assert fmt.values_said(["a", "b", "c", "d", "e", "f", "g"]) == "a, b, c, d, e, f, g"
    assert fmt.values_said(list("abcdefgh")) == "a, b, c, d, e, f and 2 more"
    assert fmt.values_said([str(n) for n in range(8)]) == "0\N{HORIZONTAL ELLIPSIS}7 (8 values)"


def test_now_points_to_the_handover_for_where_ranks_wait_instead_of_saying_it_twice():
    ranks_line = ("ranks 0\N{EN DASH}2 (pids 11, 12, 13) wait in `dist.all_reduce(t)` at x.py:3;"
                  " rank 3 (pid 14) in `open(p)` at x.py:2")  # fmt: skip
    stuck = Signal(severity="critical", code="stuck", subject="10",
                   text=f"stuck: all 5 processes in tree 10 idle for 9 s; {ranks_line};"
                   " port 30000 expected, not listening")  # fmt: skip
    told = [f"**Running now**: attempt 2, `torchrun` (pid 10): **stuck**; {ranks_line}."]
    assert handover.in_now(stuck, told) == (
        "stuck: all 5 processes in tree 10 idle for 9 s; where each waits: as the handover says;"
        " port 30000 expected, not listening"
    )
    assert handover.in_now(stuck, ["**Running now**: attempt 2: **stuck**."]) == stuck.text


def test_now_leaves_out_a_silent_logs_last_line_the_handover_quotes():
    line = "WARNING stage_weights: tp3: gave up after 1.5 s; nothing writes rank 3's pipe"
    stuck = Signal(severity="critical", code="stuck", subject="10",
                   text=f"stuck: all 5 processes in tree 10 idle for 9 s; port 30000 expected,"
                   f" not listening; log /srv/server.log silent 8 s, last line: “{line}”;"
                   " its top (pid 10) waiting in do_wait (wait4)")  # fmt: skip
    told = [f"**Running now**: attempt 2 (pid 10): **stuck**; attempt 2's log says last: “{line}”."]
    assert handover.in_now(stuck, told) == (
        "stuck: all 5 processes in tree 10 idle for 9 s; port 30000 expected, not listening;"
        " log /srv/server.log silent 8 s; its top (pid 10) waiting in do_wait (wait4)"
    )
    other = ["**Running now**: attempt 2 (pid 10): **stuck**; attempt 2's log says last: “other”."]
    assert handover.in_now(stuck, other) == stuck.text


def test_idle_gpus_the_running_attempts_line_gives_are_not_said_again_in_now():
    from ctxd.models import GpuInfo, GpuProcess, GpusSection

    at = datetime.now(UTC)
    snapshot = Snapshot(header=SnapshotHeader(session="s", version=3, taken_at=at, trigger="t"))
    snapshot.narrative.history = [live(at - timedelta(seconds=15))]
    snapshot.observations.processes.items = [root(15)]

    def gpu(i: int, pid: int) -> GpuInfo:
        holder = GpuProcess(pid=pid, name="python3", used_memory_bytes=2**36)
        return GpuInfo(index=i, name="NVIDIA H200", utilization_percent=0.0,
                       memory_used_bytes=2**36, memory_total_bytes=2**37,
                       processes=[holder])  # fmt: skip

    idle = Signal(severity="warning", code="gpu_held_idle", subject="gpus", text="held")
    snapshot.signals = [idle]
    snapshot.observations.gpus = GpusSection(items=[gpu(0, 50), gpu(1, 50)])
    assert idle.key in handover.told(snapshot)
    snapshot.observations.gpus = GpusSection(items=[gpu(0, 50), gpu(1, 777)])  # not its own
    assert idle.key not in handover.told(snapshot)


def test_the_agents_words_are_followed_by_what_ctxd_saw_since():
    at = datetime.now(UTC)
    snapshot = Snapshot(header=SnapshotHeader(session="s", version=3, taken_at=at,
                                              trigger="resume"))  # fmt: skip
    n = snapshot.narrative
    n.objective = "find the hang"
    n.user_messages = [Said(at=at - timedelta(seconds=30), text="find the hang")]
    n.agent_said = Said(at=at - timedelta(seconds=12), text="The server is loading.")
    died = live(at - timedelta(seconds=20), label="attempt 1", status="ended", pid=40,
                error="RuntimeError: boom", lived_s=12.0)  # fmt: skip
    n.history = [died, live(at - timedelta(seconds=16))]
    snapshot.observations.processes.items = [root(16)]
    snapshot.signals = [Signal(severity="critical", code="stuck", subject="50", text="stuck")]
    lines = handover.lines(snapshot)
    said = next(line for line in lines if line.startswith("**Your last words"))
    # after the state it describes, headed by what ctxd found since: where the agent was
    state = [i for i, x in enumerate(lines) if x.startswith(("**Running now", "**Last"))]
    assert state and lines.index(said) > max(state), lines
    # said of a launch 4 s old, before ctxd found it stuck: what it was then, not now
    assert said.startswith(
        "**Your last words** (" + f"{n.agent_said.at:%H:%M:%S}; when attempt 2 was 4 s old;"
        " before attempt 1 died and attempt 2 was found stuck; 12 s before this dump):"
    ) and said.endswith(": “The server is loading.”"), said
    # a dump taken as the conversation resumed comes before the message that resumed it
    assert lines[1] == (
        "**The user's latest message**: not in this dump: ctxd took it as the conversation"
        " resumed, before the message that resumed it arrived (read that one beside this"
        " dump); before it, the user's only"
        f" message was the objective ({n.user_messages[0].at:%H:%M:%S})"
    ), lines[1]
    # up instead: its port may have opened before the words, which ctxd cannot tell
    snapshot.signals = []
    n.history[-1].port_open = True
    running = next(line for line in handover.lines(snapshot) if line.startswith("**Running"))
    said = next(line for line in handover.lines(snapshot) if line.startswith("**Your last"))
    assert "**serving**" in running and "found serving" not in said, said


def test_a_folded_row_of_workers_lists_every_port_they_listen_on():
    from ctxd.models import WorkerGroup
    from ctxd.render import processes as process_rows

    workers = []
    for i, port in enumerate((41055, 40573, 35369)):
        w = root(9).model_copy(update={"pid": 51 + i, "ppid": 50, "root": False,
                                       "listening": [port]})  # fmt: skip
        workers.append(w)
    section = ProcessesSection(
        items=[root(9), *workers],
        workers=[WorkerGroup(tree=50, count=3, command="python3 serve_tp.py", pids=[51, 52, 53])],
    )
    ((_, shown),) = process_rows.view(section, [section.items[0]]).groups
    assert shown.listening == [35369, 40573, 41055]


def test_since_the_last_version_names_what_happened_not_that_a_log_grew():
    from ctxd.models import Change

    at = datetime.now(UTC)
    header = SnapshotHeader(session="s", version=4, taken_at=at, trigger="t", previous_version=3)
    snapshot = Snapshot(header=header)
    snapshot.changes = [Change(kind="log_grew", text="log /srv/server.log: grew by 129 B")]
    assert not any(line.startswith("**Since v3**") for line in handover.lines(snapshot))
    snapshot.changes.append(Change(kind="artifact_new", text="artifact /srv/dist/k.whl: new"))
    (since,) = [line for line in handover.lines(snapshot) if line.startswith("**Since v3**")]
    assert "k.whl" in since and "grew" not in since, since


def test_a_stuck_trees_silent_log_is_quoted_whole_where_it_fits():
    line = "[13:00:02 TP0] WARNING stage_weights: tp3.safetensors: the weight store sent 0 B" + (
        " in 1.5 s; rank 3 waits on its stream (s3://weights/llama-3.1-8b/tp3.safetensors)"
    )
    assert len(line) > 150
    top = root(600)
    seen = Observations(processes=ProcessesSection(items=[top], stuck_after_s=60))
    seen.logs.items = [LogInfo(watch_id=2, path="/srv/server.log", size=1, silent_for_s=600,
                               modified_at=T0, lines=[line], writer_pid=50)]  # fmt: skip
    (stuck,) = derive.stuck_trees(seen)
    assert f"last line: “{line}”" in stuck.text, stuck.text


def test_the_running_line_quotes_the_newest_warning_before_the_logs_last_line():
    at = datetime.now(UTC)
    snapshot = Snapshot(header=SnapshotHeader(session="s", version=3, taken_at=at, trigger="t"))
    snapshot.narrative.history = [live(at - timedelta(seconds=15))]
    snapshot.observations.processes.items = [root(15)]
    warning = "[13:00:02 TP0] WARNING stage_weights: tp3: gave up after 1.5 s"
    tail = ["[13:00:01 TP0] loading", warning, "[13:00:03 TP0] Load weight end.",
            "[13:00:03 TP0] Waiting for all TP ranks to report ready"]  # fmt: skip
    snapshot.observations.logs.items = [
        LogInfo(
            watch_id=2,
            path="/srv/server.log",
            size=1,
            silent_for_s=12,
            modified_at=at,
            lines=tail,
            writer_pid=50,
        )
    ]
    running = next(x for x in handover.lines(snapshot) if x.startswith("**Running now"))
    assert running.endswith(
        "log says last: “[13:00:03 TP0] Waiting for all TP ranks to report ready” (server.log)"
        f"; its newest warning, earlier in the log: “{warning}”."
    ), running
    snapshot.observations.logs.items[0].lines = tail[:2]  # the warning is the last line
    running = next(x for x in handover.lines(snapshot) if x.startswith("**Running now"))
    assert "newest warning" not in running and warning in running
