"""Signals and changes are pure: tested on hand-built observations."""

from datetime import UTC, datetime, timedelta

from ctxd.models import (
    LogInfo,
    LogsSection,
    Observations,
    PortInfo,
    PortsSection,
    ProcessesSection,
    ProcessInfo,
    Snapshot,
    SnapshotHeader,
    Unavailable,
)
from ctxd.signals import derive as signals
from ctxd.signals import logs as signal_logs
from ctxd.snapshotter import changes

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def proc(pid: int, cpu: float = 0.0, root: bool = False, state: str = "sleeping") -> ProcessInfo:
    return ProcessInfo(
        watch_id=1, pid=pid, ppid=1, name="python", state=state, cpu_percent=cpu,
        started_at=T0, age_s=60, root=root,
    )  # fmt: skip


def obs(*procs: ProcessInfo, ports=(), logs=()) -> Observations:
    return Observations(
        processes=ProcessesSection(items=list(procs)),
        ports=PortsSection(items=list(ports)),
        logs=LogsSection(items=list(logs)),
    )


def test_all_idle_tree_with_closed_expected_port_is_reported_worst_first():
    current = obs(
        proc(10, root=True), *(proc(11 + i) for i in range(8)),
        ports=[PortInfo(host="127.0.0.1", port=8000, listening=False, expected_by=1)],
    )  # fmt: skip
    found = signals.derive(current, None)
    assert [s.code for s in found] == ["port_closed", "all_idle"]
    assert "all 9 watched processes" in found[1].text
    assert "expected by the watched process python (pid 10)" in found[0].text


def test_a_busy_process_means_not_all_idle():
    assert not signals.idle_processes(obs(proc(10, cpu=0.0), proc(11, cpu=95.0)))


def test_exit_of_a_root_is_critical_and_of_a_worker_a_warning():
    before = obs(proc(10, root=True), proc(11))
    found = signals.exited_processes(obs(), before)
    assert {(s.subject.split("@")[0], s.severity) for s in found} == {
        ("10", "critical"), ("11", "warning"),
    }  # fmt: skip


def test_pid_reuse_is_a_new_process():
    before = obs(proc(10))
    reused = proc(10).model_copy(update={"started_at": T0 + timedelta(minutes=5)})
    assert [c.kind for c in changes.processes(before, obs(reused))] == [
        "process_exited", "process_started",
    ]  # fmt: skip


def test_a_process_caught_running_then_sleeping_is_no_change_a_zombie_is():
    before = obs(proc(10, state="running"), proc(11, state="sleeping"))
    after = obs(proc(10, state="sleeping"), proc(11, state="zombie"))
    assert [c.text for c in changes.processes(before, after)] == [
        "state of 11 python: sleeping -> zombie"
    ]


def test_silent_log_names_its_last_line():
    log = LogInfo(
        watch_id=2, path="/tmp/s.log", size=10, modified_at=T0, silent_for_s=240,
        lines=["Loading safetensors checkpoint shards: 100% Completed"],
    )  # fmt: skip
    (found,) = signal_logs.silent_logs(obs(logs=[log]))
    assert "silent for 4 min" in found.text and "100% Completed" in found.text


def test_unavailable_watches_become_warnings():
    current = Observations(
        logs=LogsSection(unavailable=[Unavailable(watch_id=3, target="/x", reason="no such file")])
    )
    (found,) = signals.derive(current, None)
    assert found.severity == "warning" and "no such file" in found.text


def test_signal_changes_follow_the_condition_not_its_wording():
    def snap(silent: float) -> Snapshot:
        log = LogInfo(watch_id=2, path="/l", size=1, modified_at=T0, silent_for_s=silent)
        current = obs(logs=[log])
        header = SnapshotHeader(session="s", version=1, taken_at=T0, trigger="manual")
        return Snapshot(header=header, signals=signals.derive(current, None), observations=current)

    assert changes.signals(snap(200).signals, snap(400).signals) == []
    assert [c.kind for c in changes.signals([], snap(400).signals)] == ["signal_raised"]
    assert [c.kind for c in changes.signals(snap(400).signals, snap(5).signals)] == [
        "signal_cleared"
    ]


def test_all_idle_turning_stuck_is_news_of_stuck_not_an_end_of_idle():
    from ctxd.models import Signal

    idle = Signal(severity="warning", code="all_idle", subject="processes", text="all idle")
    stuck = Signal(severity="critical", code="stuck", subject="10", text="stuck: tree 10")
    assert [c.text for c in changes.signals([idle], [stuck])] == ["new signal: stuck: tree 10"]
    assert [c.text for c in changes.signals([idle], [])] == ["cleared: all idle"]


def tree_proc(pid: int, idle: float | None, tree: int = 10) -> ProcessInfo:
    row = proc(pid, root=pid == tree)
    return row.model_copy(update={"tree": tree, "idle_for_s": idle})


def test_stuck_names_its_evidence() -> None:
    current = obs(
        *(tree_proc(10 + i, 240.0) for i in range(9)),
        ports=[PortInfo(host="127.0.0.1", port=8000, listening=False, expected_by=1)],
        logs=[LogInfo(watch_id=2, path="/x.log", size=1, modified_at=T0, silent_for_s=240,
                      lines=["Capturing batches (bs=1): 0%"])],
    )  # fmt: skip
    current.processes.stuck_after_s = 120
    found = signals.derive(current, None)
    assert found[0].code == "stuck"
    assert found[0].text == (
        "stuck: all 9 processes in tree 10 (its top and 8 below it) idle for 4 min,"
        " past the 2 min it takes to call a tree stuck; port 8000 expected, not listening; "
        "log /x.log silent 4 min, last line: “Capturing batches (bs=1): 0%”"
    )
    assert "all_idle" not in [s.code for s in found]
    # members idle for different spans: the range, as the process table shows each
    current.processes.items[0].idle_for_s = 250.0
    current.processes.items[1].idle_for_s = 9.0 * 60
    assert "idle for 4\N{EN DASH}9 min, past" in signals.derive(current, None)[0].text
    current.processes.items[1].idle_for_s = 7300.0
    assert "idle for 4 min to 2 h 1 min, past" in signals.derive(current, None)[0].text


def test_idle_but_serving_is_not_stuck() -> None:
    serving = PortInfo(host="127.0.0.1", port=8000, listening=True, expected_by=1)
    current = obs(*(tree_proc(10 + i, 600.0) for i in range(3)), ports=[serving])
    assert signals.stuck_trees(current) == []
    closed = PortInfo(host="127.0.0.1", port=8000, listening=False, expected_by=1)
    one_busy = obs(tree_proc(10, 600.0), tree_proc(11, 0.0), ports=[closed])
    assert signals.stuck_trees(one_busy) == []


def test_exit_names_last_seen_and_last_error_line() -> None:
    from ctxd.models import ExitedProcess

    before = obs(proc(10, root=True))
    key = before.processes.items[0].key
    gone = ExitedProcess(watch_id=1, pid=10, name="python", root=True, key=key, last_seen_at=T0)
    log = LogInfo(watch_id=2, path="/x.log", size=1, modified_at=T0, silent_for_s=5,
                  lines=["RuntimeError: CUDA error: no kernel image", "shutting down"])  # fmt: skip
    current = obs(logs=[log])
    current.processes.exited = [gone]
    (found,) = signals.exited_processes(current, before)
    assert found.text == (
        "process 10 (python) crashed: RuntimeError: CUDA error: no kernel image (in /x.log); "
        "exited, last seen alive 12:00:00 UTC"
    )


def test_a_crash_names_its_own_log_not_the_next_launchs() -> None:
    """Launches a fraction of a second apart, each with its own log: the one that crashed
    ends with its own log's error, though the next launch's log (made after it was last seen
    alive, by the next line's redirection) is newer and ends with an error too."""
    from ctxd.models import ExitedProcess

    launch = proc(7257, root=True)
    key = launch.key

    def run_log(n: int, at: datetime) -> LogInfo:
        return LogInfo(
            watch_id=2,
            path=f"/x/run{n}.log",
            size=1,
            modified_at=at,
            silent_for_s=(T0 + timedelta(seconds=9) - at).total_seconds(),
            lines=[f"NCCL WARN socketStartConnect: Connect to 10.0.3.7<51{n}> failed"],
        )

    own, later = run_log(197, T0 + timedelta(seconds=1)), run_log(199, T0 + timedelta(seconds=2))
    gone = ExitedProcess(watch_id=1, pid=7257, name="python", root=True, key=key, last_seen_at=T0)
    before = obs(launch, logs=[run_log(197, T0)])
    current = obs(logs=[own, later])
    current.processes.exited = [gone]
    (found,) = signals.exited_processes(current, before)
    assert "10.0.3.7<51197> failed (in /x/run197.log)" in found.text, found.text
    # seen writing it: that log, whatever else was written since
    before.logs.items[0].writer_pid = 7257
    before.logs.items.append(run_log(199, T0))
    (found,) = signals.exited_processes(current, before)
    assert "(in /x/run197.log)" in found.text, found.text


def test_a_shell_gone_with_the_program_it_started_leaves_the_news_to_the_program() -> None:
    """`bash -c 'nohup python serve.py … &'` and its child both gone: the program crashed,
    with its log's error; the shell, which only started it, says nothing of its own."""
    shell = proc(7224, root=True).model_copy(
        update={"name": "bash", "tree": 7224, "argv": ["bash", "-c", "nohup … &"]}
    )
    child = proc(7226).model_copy(
        update={"ppid": 7224, "tree": 7224, "argv": ["python", "serve.py", "--run", "199"]}
    )
    log = LogInfo(watch_id=2, path="/x/run199.log", size=1, modified_at=T0, silent_for_s=1,
                  lines=["torch.distributed.DistBackendError: NCCL error"])  # fmt: skip
    (found,) = signals.exited_processes(obs(logs=[log]), obs(shell, child))
    assert found.severity == "critical" and found.text.startswith(
        "process 7226 (python serve.py) crashed: torch.distributed.DistBackendError"
    ), found.text


def test_port_now_listening_and_health_failing() -> None:
    before = obs(ports=[PortInfo(host="127.0.0.1", port=8000, listening=False)])
    url = "http://127.0.0.1:8000/health"
    opened = PortInfo(host="127.0.0.1", port=8000, listening=True, owner_pid=77, url=url,
                      health_status=503)  # fmt: skip
    after = obs(ports=[opened])
    codes = {s.code: s.text for s in signals.derive(after, before)}
    assert codes["port_opened"] == "127.0.0.1:8000 now listening (pid 77)"
    assert "HTTP 503" in codes["health_failed"]


def test_gpu_zombie_memory_and_disk_signals() -> None:
    from ctxd.models import DiskInfo, GpuInfo, GpuProcess, GpusSection, HostInfo

    gib = 1024**3
    gpu = GpuInfo(index=0, utilization_percent=0, memory_used_bytes=70 * gib,
                  processes=[GpuProcess(pid=11, watched=True)])  # fmt: skip
    growing = proc(12).model_copy(update={"rss_growth_bps": 5 * 1024**2})
    current = obs(proc(11, state="zombie"), growing)
    current.gpus = GpusSection(source="nvml", items=[gpu])
    current.host = HostInfo(disks=[DiskInfo(path="/data", total_bytes=100 * gib, free_bytes=gib)])
    codes = {s.code: s.text for s in signals.derive(current, None)}
    assert codes["gpu_held_idle"] == "GPU 0: 70.0 GiB (pid 11) held at 0% utilisation; watched"
    assert codes["zombie"].startswith("process 11 (python) is a zombie")
    assert "+300 MiB/min" in codes["memory_growing"]
    assert codes["disk_full"] == "disk holding /data nearly full: 1.0 GiB free (1%)"


def _log(path: str, lines: list[str]) -> LogInfo:
    return LogInfo(watch_id=2, path=path, size=1, modified_at=T0, silent_for_s=1.0, lines=lines)


def test_a_setting_named_error_is_no_error_line_for_signals_either():
    """One matcher: log_level='ERROR' in a server-args dump is not "the last error"."""
    args = _log("/srv.log", ["server_args=ServerArgs(log_level='ERROR', port=30000)"])
    assert signal_logs.last_error_line(obs(logs=[args])) is None
    real = _log("/srv.log", ["starting", "RuntimeError: CUDA error: out of memory", "exiting"])
    assert signal_logs.last_error_line(obs(logs=[real])) == (
        "/srv.log",
        "RuntimeError: CUDA error: out of memory",
    )


def test_events_signals_and_changes_name_one_exit_and_one_opening_alike():
    from ctxd.snapshotter import happened
    from ctxd.snapshotter.triggers import detect_events

    closed = PortInfo(host="127.0.0.1", port=8000, listening=False)
    before = obs(proc(7, root=True), ports=[closed])
    after = obs(ports=[closed.model_copy(update={"listening": True})])
    events = [word for word, _ in detect_events(before, after)]
    codes = {s.code for s in signals.derive(after, before)}
    assert events == ["process-exit", "port-open"]
    assert {happened.PROCESS_EXITED, happened.PORT_OPENED} <= codes
    snap = Snapshot(header=SnapshotHeader(session="s", version=1, taken_at=T0, trigger="t"))
    kinds = {
        c.kind
        for c in changes.compare(
            snap.model_copy(update={"observations": before}),
            snap.model_copy(update={"observations": after}),
        )
    }
    assert happened.PROCESS_EXITED in kinds
    # a port never seen closed (a watch added while it listens) opened nothing
    fresh = obs(ports=[PortInfo(host="127.0.0.1", port=9000, listening=True)])
    assert detect_events(obs(), fresh) == [] and not signals.ports_opened(fresh, obs())


def test_a_port_change_is_named_like_its_signal():
    from ctxd.snapshotter import happened

    closed = PortInfo(host="127.0.0.1", port=8000, listening=False)
    listening = closed.model_copy(update={"listening": True})
    assert [c.kind for c in changes.ports(obs(ports=[closed]), obs(ports=[listening]))] == [
        happened.PORT_OPENED
    ]
    assert [c.kind for c in changes.ports(obs(ports=[listening]), obs(ports=[closed]))] == [
        happened.PORT_CLOSED
    ]


def test_an_idle_span_is_read_against_the_age_of_the_process() -> None:
    young = proc(10).model_copy(update={"age_s": 11.0, "idle_for_s": 7.0})
    (found,) = signals.idle_processes(obs(young))
    assert found.text == (
        "the watched process is alive at <1% CPU for 7 s of its 11 s: "
        "too early to call a hang (stuck takes 2 min idle)"
    )


def test_a_zombie_is_not_counted_among_processes_alive_at_low_cpu() -> None:
    codes = {s.code: s.text for s in signals.derive(obs(proc(12), proc(11, state="zombie")), None)}
    assert codes["all_idle"].startswith("the watched process is alive at <1% CPU")


def test_alike_gpus_fold_with_the_odd_one_apart_and_sizes_kept() -> None:
    """Seven GPUs holding the KV cache and the one whose rank is still loading: one line, the
    seven by their size each, the odd one by its own (it used to read "memory held")."""
    from ctxd.models import GpuInfo, GpuProcess, GpusSection

    gib = 1024**3
    gpus = [GpuInfo(index=i, utilization_percent=0,
                    memory_used_bytes=(gib + gib // 10) if i == 3 else int(118.8 * gib),
                    processes=[GpuProcess(pid=100 + i, watched=True)])
            for i in range(8)]  # fmt: skip
    current = obs()
    current.gpus = GpusSection(source="nvml", items=gpus)
    (held,) = signals.gpu_held_idle(current)
    dash = "\N{EN DASH}"
    assert held.text == (
        f"GPUs 0{dash}2, 4{dash}7: 118.8 GiB each (pids 100, 101, 102, 104, 105, 106, 107);"
        " GPU 3: 1.1 GiB (pid 103) held at 0% utilisation; all their processes watched"
    ), held


def test_zombies_of_one_parent_are_one_line() -> None:
    dead = [proc(20 + i, state="zombie").model_copy(update={"ppid": 7}) for i in range(8)]
    (found,) = [s for s in signals.derive(obs(*dead), None) if s.code == "zombie"]
    assert found.text == (
        "8 processes (pids 20, 21, 22, 23, 24, 25, 26, 27) are zombies: parent 7 has not"
        " reaped them"
    )
