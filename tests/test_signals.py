"""Signals and changes are pure: tested on hand-built observations."""

from datetime import UTC, datetime, timedelta

from service import changes, signals
from service.models import (
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
    assert "expected by watch 1" in found[0].text


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


def test_silent_log_names_its_last_line():
    log = LogInfo(
        watch_id=2, path="/tmp/s.log", size=10, modified_at=T0, silent_for_s=240,
        lines=["Loading safetensors checkpoint shards: 100% Completed"],
    )  # fmt: skip
    (found,) = signals.silent_logs(obs(logs=[log]))
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
