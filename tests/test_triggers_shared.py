"""The trigger watcher probes each watch set once per period for every session watching it."""

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ctxd.models import LogWatch, PortWatch, ProcessWatch, SessionIn
from ctxd.snapshotter import triggers
from ctxd.snapshotter.triggers import Watcher

from tests.conftest import StepClock, free_port, ticked_watcher, wait_until

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom\n'


PERIOD_S = 1.0
STEP_S = 0.05  # the loop's clock between two ticks: a period spans twenty


@pytest.fixture
def watcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: StepClock) -> Iterator[Watcher]:
    """A Watcher ticked by the test, its probe period PERIOD_S on the stepped clock."""
    with ticked_watcher(tmp_path / "data", monkeypatch, PERIOD_S, 0) as ticked:
        yield ticked


def tick(watcher: Watcher) -> None:
    watcher.tick()
    triggers.time.monotonic.advance(STEP_S)  # type: ignore[attr-defined]


def events_of(watcher: Watcher, sid: str) -> list:
    return [v for v in watcher.snap.store.list_snapshots(sid) if v.trigger.startswith("event:")]


def tick_until_event(watcher: Watcher, sid: str) -> list:
    return wait_until(lambda: tick(watcher) or events_of(watcher, sid), f"an event of {sid}")


def probed(watcher: Watcher) -> set[str]:
    """The sessions whose collector memory ran a probe (the runner times every run)."""
    return {k.split(":", 1)[1] for k in watcher.snap.runner.last_timings if k.startswith("probe:")}


def test_sessions_with_the_same_watches_share_one_probe_and_each_gets_the_event(
    watcher: Watcher, spawn
):
    child = spawn(*SLEEPER)
    store = watcher.snap.store
    specs = [ProcessWatch(pid=child.pid), PortWatch(port=free_port())]
    for sid, order in (("c", specs), ("a", specs), ("b", specs[::-1])):  # ids and order differ
        store.put_session(sid, SessionIn(quiet_after_s=3600))
        for spec in order:
            store.add_watch(sid, spec, limit=100)
    tick(watcher)  # the baseline every session compares the exit with
    assert probed(watcher) == {"a"}

    child.kill()
    child.wait()
    for sid in ("a", "b", "c"):
        (event,) = tick_until_event(watcher, sid)
        assert "process-exit" in event.trigger
        assert str(child.pid) in store.get_snapshot(sid, event.version).header.note
    assert probed(watcher) == {"a"}  # the first session (by id) probed for all three


def test_a_session_whose_watches_change_leaves_the_shared_probe_for_its_own(
    watcher: Watcher, spawn, tmp_path: Path
):
    child = spawn(*SLEEPER)
    log = tmp_path / "train.log"
    log.write_text("step 1\n")
    store = watcher.snap.store
    for sid in ("a", "b"):
        store.put_session(sid, SessionIn(quiet_after_s=3600))
        store.add_watch(sid, ProcessWatch(pid=child.pid), limit=100)
    tick(watcher)
    store.add_watch("b", LogWatch(path=str(log)), limit=100)
    wait_until(lambda: tick(watcher) or "b" in probed(watcher), "b probing its new watch set")

    with log.open("a") as handle:
        handle.write(TRACEBACK)
    (event,) = tick_until_event(watcher, "b")
    assert "log-error" in event.trigger
    tick(watcher)
    assert events_of(watcher, "a") == []  # a does not watch that log


def test_a_watch_set_nobody_watches_any_more_is_forgotten(
    watcher: Watcher, spawn, clock: StepClock
):
    child = spawn(*SLEEPER)
    store = watcher.snap.store
    store.put_session("a", SessionIn(quiet_after_s=3600))
    first = store.add_watch("a", ProcessWatch(pid=child.pid), limit=100)
    tick(watcher)
    store.add_watch("a", PortWatch(port=free_port()), limit=100)
    store.delete_watch("a", first.id)
    wait_until(lambda: tick(watcher) or len(watcher._shared) == 2, "the new set probed")
    # the old set is kept a period after its last probe, then dropped: memory stays bounded
    wait_until(lambda: tick(watcher) or len(watcher._shared) == 1, "the old set forgotten")
    clock.advance(2.5 * PERIOD_S)  # two more periods: the set still watched stays
    tick(watcher)
    assert len(watcher._shared) == 1


def test_a_dormant_session_is_not_probed_and_wakes_on_activity(
    watcher: Watcher, spawn, monkeypatch: pytest.MonkeyPatch
):
    """No activity for `dormant_after_s` and nothing alive in its watches: the session is not
    probed at all (its probes are counted), until a request marks activity; its next dump
    says since when it was not watched. One with a process alive stays probed."""
    monkeypatch.setattr(watcher.settings, "dormant_after_s", 0.5)
    store = watcher.snap.store
    child = spawn(*SLEEPER)
    store.put_session("gone", SessionIn(quiet_after_s=3600))
    store.add_watch("gone", ProcessWatch(match="no-such-program-ever-runs"), limit=100)
    store.put_session("alive", SessionIn(quiet_after_s=3600))
    store.add_watch("alive", ProcessWatch(pid=child.pid), limit=100)
    watcher.snap.take("gone")
    watcher.snap.take("alive")
    time.sleep(0.6)  # both idle past the setting
    watcher.snap.runner.last_timings.clear()
    for _ in range(40):  # two probe periods
        tick(watcher)
    assert probed(watcher) == {"alive"}, probed(watcher)
    assert watcher.dormant(store.get_session("gone"))
    # a request about it: awake, probed again at once
    watcher.activity.mark("gone")
    tick(watcher)
    assert "gone" in probed(watcher)
    dump = watcher.snap.take("gone", force=True)
    assert dump.narrative.dormant_since is not None


def test_an_exit_the_kernel_tells_is_probed_at_once_not_at_the_next_period(watcher: Watcher, spawn):
    """A watched tree's top is followed by a pidfd: when it ends, the kernel says so and the
    next tick probes the session and takes its event snapshot, though the period's probe was
    taken already (the stepped clock does not move here)."""
    child = spawn(*SLEEPER)
    store = watcher.snap.store
    store.put_session("x", SessionIn(quiet_after_s=3600))
    store.add_watch("x", ProcessWatch(pid=child.pid), limit=100)
    tick(watcher)  # the period's probe: the process is followed from now on
    assert child.pid in watcher.exits.following()
    child.kill()
    child.wait()
    wait_until(lambda: "x" in watcher._probe_anew, "the kernel telling the exit")
    watcher.tick()  # same moment of the period: only the kernel's word makes it probe
    (event,) = events_of(watcher, "x")
    assert "process-exit" in event.trigger


def test_a_log_error_the_kernel_tells_is_read_at_once_not_at_the_next_period(
    watcher: Watcher, tmp_path: Path
):
    """A watched log is followed by the kernel (watchfiles): when it prints an error, the next
    tick reads the session's logs (only them) and takes its event snapshot, though the
    period's probe was taken already (the stepped clock does not move here)."""
    log_file = tmp_path / "server.log"
    log_file.write_text("loading\n")
    store = watcher.snap.store
    store.put_session("x", SessionIn(quiet_after_s=3600))
    store.add_watch("x", LogWatch(path=str(log_file)), limit=100)
    tick(watcher)  # the period's probe: the log is followed from now on
    wait_until(lambda: str(log_file) in watcher.files.watching(), "the notifier on the log")
    time.sleep(0.3)  # the notifier holds its kernel watch
    with log_file.open("a") as out:
        out.write(TRACEBACK)
    wait_until(lambda: "x" in watcher._changed_in, "the kernel telling the change")
    watcher.tick_told()  # between full ticks: only the sessions the kernel told of
    (event,) = events_of(watcher, "x")
    assert "log-error" in event.trigger, event


def test_a_log_folder_is_followed_until_its_log_appears_and_dormant_sessions_follow_nothing(
    watcher: Watcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A log that does not exist yet is followed by its folder (its creation is news); a
    session gone dormant holds no kernel watch."""
    logs = tmp_path / "logs"
    logs.mkdir()
    store = watcher.snap.store
    store.put_session("x", SessionIn(quiet_after_s=3600))
    store.add_watch("x", LogWatch(path=str(logs / "run3.log")), limit=100)
    tick(watcher)
    wait_until(lambda: watcher.files.watching() == {str(logs)}, "the notifier on the folder")
    time.sleep(0.3)
    (logs / "run3.log").write_text(TRACEBACK)
    wait_until(lambda: "x" in watcher._changed_in, "the kernel telling the new log")
    monkeypatch.setattr(watcher.settings, "dormant_after_s", 0.1)
    time.sleep(0.2)
    for _ in range(3):
        tick(watcher)
    assert watcher.dormant(store.get_session("x"))
    wait_until(lambda: not watcher.files.watching(), "the kernel watch dropped")


def test_a_change_the_kernel_does_not_tell_is_still_found_by_the_period_probe(
    watcher: Watcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Beyond the notifier's cap (or on a mount whose changes the kernel does not report) a
    log is still read by the slow probe: the error makes its event snapshot one period late."""
    from ctxd.snapshotter import file_events

    monkeypatch.setattr(file_events, "FOLLOWED_MAX", 0)
    log_file = tmp_path / "server.log"
    log_file.write_text("loading\n")
    store = watcher.snap.store
    store.put_session("x", SessionIn(quiet_after_s=3600))
    store.add_watch("x", LogWatch(path=str(log_file)), limit=100)
    tick(watcher)
    with log_file.open("a") as out:
        out.write(TRACEBACK)
    time.sleep(1.0)
    watcher.tick()
    assert not events_of(watcher, "x") and "x" not in watcher._changed_in
    (event,) = tick_until_event(watcher, "x")  # the clock moves: the period's probe finds it
    assert "log-error" in event.trigger, event


def test_sessions_with_different_watches_share_one_look_at_the_machine_per_tick(
    watcher: Watcher, spawn, monkeypatch: pytest.MonkeyPatch
):
    """Ten sessions, each watching its own process and port (ten watch sets, ten probes):
    one tick reads the machine's process table once and its LISTEN sockets once."""
    from ctxd.collectors.proc import procfs, proctree

    reads = {"table": 0, "sockets": 0}
    scan, listening = proctree.scan, procfs.listening_inodes

    def counted_scan():
        reads["table"] += 1
        return scan()

    def counted_listening(*args):
        reads["sockets"] += 1
        return listening(*args)

    monkeypatch.setattr(proctree, "scan", counted_scan)
    monkeypatch.setattr(procfs, "listening_inodes", counted_listening)
    store = watcher.snap.store
    for n in range(10):
        child = spawn(*SLEEPER)
        store.put_session(f"s{n}", SessionIn(quiet_after_s=3600))
        store.add_watch(f"s{n}", ProcessWatch(pid=child.pid), limit=100)
        store.add_watch(f"s{n}", PortWatch(port=free_port()), limit=100)
    watcher.snap.runner.last_timings.clear()
    proctree.outdated(time.monotonic())  # what the set-up's reads left is not this tick's
    tick(watcher)
    assert probed(watcher) == {f"s{n}" for n in range(10)}
    assert reads == {"table": 1, "sockets": 1}, reads


def test_a_session_never_snapshot_whose_process_runs_does_not_go_dormant(
    watcher: Watcher, spawn, monkeypatch: pytest.MonkeyPatch
):
    """No version yet, only probes: what they saw alive keeps the session awake; one whose
    watched process has ended sleeps."""
    monkeypatch.setattr(watcher.settings, "dormant_after_s", 0.3)
    store = watcher.snap.store
    child = spawn(*SLEEPER)
    store.put_session("alive", SessionIn(quiet_after_s=3600))
    store.add_watch("alive", ProcessWatch(pid=child.pid), limit=100)
    store.put_session("gone", SessionIn(quiet_after_s=3600))
    store.add_watch("gone", ProcessWatch(match="no-such-program-ever-runs"), limit=100)
    tick(watcher)
    time.sleep(0.4)
    for _ in range(3):
        tick(watcher)
    assert not store.list_snapshots("alive")
    assert not watcher.dormant(store.get_session("alive"))
    assert watcher.dormant(store.get_session("gone"))


def test_a_port_that_opens_is_probed_at_the_next_tick_not_at_the_next_period(watcher: Watcher):
    """No kernel event says a port opened: each tick reads the machine's LISTEN table once
    for every session waiting on a local port, and one that opened is probed at once (the
    stepped clock does not move here)."""
    import socket

    port = free_port()
    store = watcher.snap.store
    store.put_session("x", SessionIn(quiet_after_s=3600))
    store.add_watch("x", PortWatch(port=port), limit=100)
    tick(watcher)  # the period's probe: the port is closed
    tick(watcher)
    assert watcher._port_waiters == {"x"}
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        time.sleep(triggers.PORT_LOOK_S)  # the shared LISTEN table read before it is stale
        watcher.tick_told()  # between full ticks: only the sessions waiting on a port
        (event,) = events_of(watcher, "x")
    assert "port-open" in event.trigger, event


def test_a_settled_session_is_probed_loosely_and_one_the_kernel_cannot_follow_every_period(
    watcher: Watcher, spawn, monkeypatch: pytest.MonkeyPatch
):
    """Both watch a live process and have no attempt. Where a pidfd follows it, its exit comes
    from the kernel: the session is probed every LOOSE_PERIODS; where none can (another pid
    namespace, an old kernel), every period, as before."""
    counts: dict[str, int] = {}
    observe = watcher.snap.runner.observe

    def counted(sid, *args, **kwargs):
        counts[sid] = counts.get(sid, 0) + 1
        return observe(sid, *args, **kwargs)

    monkeypatch.setattr(watcher.snap.runner, "observe", counted)
    store = watcher.snap.store
    followed, unfollowed = spawn(*SLEEPER), spawn(*SLEEPER)
    store.put_session("settled", SessionIn(quiet_after_s=3600))
    store.add_watch("settled", ProcessWatch(pid=followed.pid), limit=100)
    store.put_session("blind", SessionIn(quiet_after_s=3600))
    store.add_watch("blind", ProcessWatch(pid=unfollowed.pid), limit=100)
    follow = watcher.exits.follow
    monkeypatch.setattr(
        watcher.exits, "follow", lambda sid, pid: sid != "blind" and follow(sid, pid)
    )
    periods = 2 + triggers.LOOSE_PERIODS
    for _ in range(int(periods * PERIOD_S / STEP_S)):
        tick(watcher)
    assert counts["blind"] == periods, counts
    assert counts["settled"] == 3, counts  # its first two probes, then one loose period
    # the exit no kernel told is still found, by the period's probe
    unfollowed.kill()
    unfollowed.wait()
    (event,) = tick_until_event(watcher, "blind")
    assert "process-exit" in event.trigger, event


CAP_NET_ADMIN = 12  # its bit in /proc/self/status's CapEff


def process_events_refused() -> str:
    """Why the kernel refused this process its process events connector, as a skip says it."""
    status = Path("/proc/self/status").read_text()
    (caps,) = [line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")]
    if not int(caps, 16) >> CAP_NET_ADMIN & 1:
        return (
            "the kernel's process events (the netlink connector that gives exit statuses) need"
            f" CAP_NET_ADMIN, which this test's process lacks (CapEff {caps}): run it as root"
        )
    return (
        "the kernel refused its process events connector though CAP_NET_ADMIN is held: a pid"
        " or network namespace other than the first, or a kernel built without PROC_EVENTS"
    )


def test_an_exit_the_kernel_tells_carries_its_status_where_ctxd_may_listen(watcher: Watcher, spawn):
    """With the kernel's process events (CAP_NET_ADMIN: root here), the exit of a followed
    process comes with its status, and the exited row says it; without, it is unknown."""
    from ctxd.collectors.proc import procevents

    listening = procevents.listen()
    if listening is None:
        pytest.skip(process_events_refused())
    listening.close()
    child = spawn(sys.executable, "-c", "import sys, time; time.sleep(1.0); sys.exit(3)")
    store = watcher.snap.store
    store.put_session("x", SessionIn(quiet_after_s=3600))
    store.add_watch("x", ProcessWatch(pid=child.pid), limit=100)
    watcher.snap.take("x")  # a version that saw it run
    tick(watcher)  # followed by a pidfd, the events listened to
    assert child.pid in watcher.exits.following()
    wait_until(lambda: procevents.exit_status(child.pid) is not None, "the kernel's word", 10)
    assert procevents.exit_status(child.pid) == 3
    child.wait()  # reaped, as its parent does: gone from the process table
    (event,) = tick_until_event(watcher, "x")
    taken = store.get_snapshot("x", event.version)
    (gone,) = taken.observations.processes.exited
    assert gone.pid == child.pid and gone.exit_status == 3, gone
    # and the attempt its first version saw running ended with it
    (attempt,) = [a for a in store.list_attempts("x") if a.pid == child.pid]
    assert attempt.exit_status == 3 and attempt.ended_at is not None, attempt
    assert attempt.outcome(attempt.ended_at).startswith("exited with status 3 after"), attempt


def test_an_attempt_ends_when_its_pidfd_told_not_when_a_snapshot_noticed(watcher: Watcher, spawn):
    """A launch that dies ends at the moment the kernel told, though its parent has not
    reaped it (a zombie stays in the process table) and the snapshot that notices comes
    seconds later; followed again as a zombie, the moment stays the first."""
    child = spawn(*SLEEPER)
    store = watcher.snap.store
    store.put_session("x", SessionIn(quiet_after_s=3600))
    store.add_watch("x", ProcessWatch(pid=child.pid), limit=100)
    watcher.snap.take("x")  # a version that saw it run: the attempt
    tick(watcher)  # followed by a pidfd
    killed = time.time()
    child.kill()  # not waited for: a zombie until the end of the test
    wait_until(lambda: child.pid not in watcher.exits.following(), "the kernel telling the exit")
    time.sleep(2.0)  # the noticing comes later
    watcher.snap.take("x")
    assert watcher.exits.follow("x", child.pid)  # a zombie's pidfd: readable at once
    wait_until(lambda: child.pid not in watcher.exits.following(), "the zombie's pidfd")
    watcher.snap.take("x")
    (attempt,) = [a for a in store.list_attempts("x") if a.pid == child.pid]
    assert attempt.ended_at is not None, attempt
    assert abs(attempt.ended_at.timestamp() - killed) < 1.0, (attempt.ended_at, killed)
    child.wait()  # reaped: the exited row tells the same moment
    taken = watcher.snap.take("x")
    gone = taken.observations.processes.exited
    assert [abs(g.last_seen_at.timestamp() - killed) < 1.0 for g in gone] == [True], gone
