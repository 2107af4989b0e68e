"""What the kernel tells the trigger loop at once, what it misses and the period's probe still
finds, and what a dormant session costs: real processes, files, mounts and a real server."""

import calendar
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ctxd.models import ArtifactWatch, LogWatch, ProcessWatch, SessionIn, WatchSpec
from ctxd.snapshotter import exits, triggers
from ctxd.snapshotter.triggers import Watcher

from tests.conftest import (
    StepClock,
    claude_hooks,
    mount_tmpfs,
    start_server,
    stop_server,
    ticked_watcher,
    wait_until,
)

TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom\n'
PERIOD_S = 1.0
STEP_S = 0.05  # the loop's clock between two ticks: a period spans twenty
SLEEP = ["sleep", "600"]


@pytest.fixture
def watcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: StepClock) -> Iterator[Watcher]:
    with ticked_watcher(tmp_path / "data", monkeypatch, PERIOD_S, 0) as ticked:
        yield ticked


def tick(watcher: Watcher, clock: StepClock) -> None:
    watcher.tick()
    clock.advance(STEP_S)


def watching(watcher: Watcher, clock: StepClock, spec: WatchSpec) -> None:
    """Session `x` (never quiet within a test) watching `spec`, its period's probe taken."""
    store = watcher.snap.store
    store.put_session("x", SessionIn(quiet_after_s=3600))
    store.add_watch("x", spec, limit=100)
    tick(watcher, clock)


def followed(watcher: Watcher, clock: StepClock, spec: LogWatch | ArtifactWatch) -> None:
    """As `watching`, and the file the probe found held by the notifier's kernel watch."""
    watching(watcher, clock, spec)  # the period's probe: the file is followed from now on
    wait_until(lambda: spec.path in watcher.files.watching(), f"the notifier on {spec.path}")
    time.sleep(0.3)  # the notifier holds its kernel watch


def events_of(watcher: Watcher, sid: str) -> list:
    return [v for v in watcher.snap.store.list_snapshots(sid) if v.trigger.startswith("event:")]


@pytest.fixture
def tmpfs_over(tmp_path: Path) -> Iterator:
    """`mount(folder)` mounts a fresh tmpfs over `folder` (as root; skipped otherwise, with the
    kernel's reason); every mount it made is unmounted when the test ends, whatever happened."""
    made: list[Path] = []

    def mount(folder: Path) -> None:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        mount_tmpfs(folder, "1m", "ctxd-test")
        made.append(folder)

    try:
        yield mount
    finally:
        for folder in reversed(made):  # only the mounts this test made, by their own path
            subprocess.run(["umount", str(folder)], check=False)


def test_a_log_replaced_on_another_mount_is_found_by_the_period_probe(
    watcher: Watcher, clock: StepClock, tmp_path: Path, tmpfs_over
):
    """The notifier holds the log file the probe found; a tmpfs mounted over its folder puts
    another file at that path, which the kernel never reports on the watch it holds. The new
    file's error is found by the period's probe, not before."""
    logs = tmp_path / "logs"
    logs.mkdir()
    log_file = logs / "server.log"
    log_file.write_text("loading\n")
    followed(watcher, clock, LogWatch(path=str(log_file)))
    tmpfs_over(logs)
    log_file.write_text("loading\n" + TRACEBACK)  # on the tmpfs: the same path, another file
    time.sleep(1.0)  # the notifier looks at what the kernel told every quarter second
    watcher.tick()  # the same moment of the period: only the kernel's word would make it look
    assert "x" not in watcher._changed_in and not events_of(watcher, "x")
    (event,) = wait_until(
        lambda: tick(watcher, clock) or events_of(watcher, "x"), "the period's probe"
    )
    assert "log-error" in event.trigger, event


def namespaced_sleeper(spawn) -> tuple[subprocess.Popen, int]:
    """A sleeper in a new pid namespace (`unshare --pid --fork`, skipped where refused, with
    the reason): (the unshare process, the sleeper's pid here; it is 1 in its namespace)."""
    if os.geteuid() != 0:
        pytest.skip("a new pid namespace needs root (CAP_SYS_ADMIN)")
    tried = subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True, text=True)
    if tried.returncode != 0:
        pytest.skip(f"unshare --pid refused here: {tried.stderr.strip()}")
    outer = spawn("unshare", "--pid", "--fork", *SLEEP)
    children = Path(f"/proc/{outer.pid}/task/{outer.pid}/children")
    pid = int(wait_until(lambda: children.read_text().split(), "the namespace's sleeper")[0])
    status = Path(f"/proc/{pid}/status").read_text()
    (nspid,) = [line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")]
    assert nspid == [str(pid), "1"], nspid  # its own pid namespace, where it is init
    return outer, pid


def test_a_process_in_another_pid_namespace_is_followed_by_its_pidfd(
    watcher: Watcher, clock: StepClock, spawn
):
    """A process in a child pid namespace is seen by its pid here, and its pidfd tells its
    exit at once: the event snapshot comes at the same moment of the period."""
    outer, pid = namespaced_sleeper(spawn)
    watching(watcher, clock, ProcessWatch(pid=pid))
    assert pid in watcher.exits.following()
    os.kill(pid, 9)  # its namespace's init: the kernel delivers SIGKILL from an ancestor
    outer.wait(timeout=10)
    wait_until(lambda: "x" in watcher._probe_anew, "the kernel telling the exit")
    watcher.tick()
    (event,) = events_of(watcher, "x")
    assert "process-exit" in event.trigger, event


def test_a_process_in_another_pid_namespace_no_pidfd_follows_ends_found_by_the_period_probe(
    watcher: Watcher, clock: StepClock, spawn, monkeypatch: pytest.MonkeyPatch
):
    """With no pidfd to spare (the cap reached), the exit of a process in another pid
    namespace is not told: the period's probe finds it, one period late, not before."""
    monkeypatch.setattr(exits, "FOLLOWED_MAX", 0)
    outer, pid = namespaced_sleeper(spawn)
    watching(watcher, clock, ProcessWatch(pid=pid))
    assert pid not in watcher.exits.following()
    os.kill(pid, 9)
    outer.wait(timeout=10)
    time.sleep(1.0)
    watcher.tick()  # the same moment of the period: nothing told
    assert "x" not in watcher._probe_anew and not events_of(watcher, "x")
    (event,) = wait_until(
        lambda: tick(watcher, clock) or events_of(watcher, "x"), "the period's probe"
    )
    assert "process-exit" in event.trigger, event


def test_an_artifact_change_the_kernel_tells_is_read_at_once_not_at_the_next_period(
    watcher: Watcher, clock: StepClock, tmp_path: Path
):
    """A watched artifact is followed by the kernel (watchfiles): a build that rewrites it
    makes the next tick read the session's files and take its event snapshot, though the
    period's probe was taken already (the stepped clock does not move here)."""
    dist = tmp_path / "dist"
    dist.mkdir()
    model = dist / "model.bin"
    model.write_bytes(b"v1")
    followed(watcher, clock, ArtifactWatch(path=str(model)))
    model.write_bytes(b"v2, rebuilt and longer")
    wait_until(lambda: "x" in watcher._changed_in, "the kernel telling the change")
    watcher.tick_told()  # between full ticks, the clock where it was
    (event,) = events_of(watcher, "x")
    assert "artifact-change" in event.trigger, event


def reads_of(pid: int) -> int:
    """The read calls `pid` made so far (the kernel's count: /proc/<pid>/io's syscr)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("syscr:"):
            return int(line.split()[1])
    raise AssertionError(f"no syscr in /proc/{pid}/io")


def reads_over(pid: int, seconds: float) -> int:
    before = reads_of(pid)
    time.sleep(seconds)
    return reads_of(pid) - before


def test_a_dormant_session_reads_nothing_and_wakes_on_its_next_hook_with_a_fresh_dump(
    tmp_path: Path, spawn
):
    """A real server whose only session watches a live process reads the machine for it
    (the kernel counts the server's reads); once the process ended and the session sat idle
    past `dormant_after_s` it goes dormant and the server reads nothing at all; the user's
    next prompt (Claude Code's hook) wakes it with a dump taken then, which says since when
    it was not watched."""
    work = tmp_path / "work"
    work.mkdir()
    settings = {
        "CTXD_DORMANT_AFTER_S": "1",
        "CTXD_TRIGGER_INTERVAL_S": "0.2",
        "CTXD_EVENT_PROBE_S": "0.2",
        "CTXD_WATCH_ROOTS": f'["{tmp_path}"]',
    }
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", settings)
    try:
        pid = server.process.pid
        with server.client() as client:
            hook = claude_hooks(client, "conversation-1", work)
            sid = hook("UserPromptSubmit", prompt="train the model")["session"]
            child = spawn(*SLEEP)
            client.post(f"/api/sessions/{sid}/watches", json={"kind": "process", "pid": child.pid})
            client.post(f"/api/sessions/{sid}/snapshots", json={"force": True})
            assert reads_over(pid, 1.0) > 0  # awake: its process is looked at every period
            killed = time.time()
            child.kill()
            child.wait()
            wait_until(lambda: reads_over(pid, 1.0) == 0, "the server to stop reading", 30, 0)
            assert reads_over(pid, 2.0) == 0  # dormant: not one read of /proc, nor of the store
            woke = time.time()
            dump = hook("UserPromptSubmit", prompt="continue")["context"]
            assert "**Not watched from " in dump, dump
            stated = dump.split("**Not watched from ", 1)[1].split(" UTC", 1)[0]
            went = calendar.timegm(time.strptime(stated, "%Y-%m-%d %H:%M:%S"))
            assert killed - 1 <= went <= woke - 3, (stated, killed, woke)  # before the silence
            assert str(child.pid) in dump, dump  # fresh: the process it watched, ended
    finally:
        stop_server(server)


def test_an_exit_told_while_its_process_is_a_zombie_is_news_a_moment_after_it_is_reaped(
    watcher: Watcher, clock: StepClock, spawn
):
    """The kernel tells the exit before the parent reaps: the probe it brings may still see a
    zombie, which is no exit yet. Its row followed again opens a pidfd that tells at once, so
    the session is probed again and the exit is news within two seconds of the reaping, not
    at its settled session's loose period."""
    child = spawn(*SLEEP)
    store = watcher.snap.store
    watching(watcher, clock, ProcessWatch(pid=child.pid))
    tick(watcher, clock)
    assert watcher._pace("x", store.list_watches("x")) == triggers.LOOSE_PERIODS  # settled
    child.kill()  # not reaped yet: a zombie
    wait_until(lambda: "x" in watcher._probe_anew, "the kernel telling the exit")
    watcher.tick()  # the probe the kernel's word brings sees the zombie
    assert not events_of(watcher, "x")
    child.wait()  # its parent reaps it
    # two seconds, of the loop's clock (half its loose period) and of the machine's (a probe
    # may take a process table read up to a second before, when the zombie was still in it)
    for _ in range(int(2.0 / STEP_S)):
        watcher.tick_told()
        clock.advance(STEP_S)
        if events_of(watcher, "x"):
            break
        time.sleep(STEP_S)
    (event,) = events_of(watcher, "x")
    assert "process-exit" in event.trigger, event


def test_the_process_events_listener_hears_exits_alone_and_with_their_status(spawn):
    """The kernel filters what it queues for ctxd's process events listener: of fifty
    processes started and ended (each a fork, an exec and an exit), only their exits come,
    each with its status; a busy machine's forks and execs never wake the exits thread."""
    from ctxd.collectors.proc import procevents

    listening = procevents.listen()
    if listening is None:
        pytest.skip("the kernel's process events need CAP_NET_ADMIN (run as root)")
    try:
        children = [spawn("sh", "-c", f"exit {n % 7}") for n in range(50)]
        for child in children:
            child.wait()
        time.sleep(0.3)
        messages = []
        while True:
            try:
                messages.append(listening.recv(1 << 16))
            except BlockingIOError:
                break
    finally:
        listening.close()
    exits = [found for data in messages for found in procevents.exits_in(data)]
    assert len(exits) == len(messages)  # not one fork, exec or thread's exit among them
    statuses = dict(exits)
    assert {c.pid: statuses.get(c.pid) for c in children} == {
        c.pid: (n % 7) << 8 for n, c in enumerate(children)
    }


def test_a_tick_looks_past_dormant_sessions_until_one_has_activity(
    watcher: Watcher, clock: StepClock, monkeypatch: pytest.MonkeyPatch
):
    """Fifty sessions gone dormant are not even stepped over by a full tick; a request about
    one of them brings that one, and only it, back into the tick."""
    monkeypatch.setattr(watcher.settings, "dormant_after_s", 0.1)
    store = watcher.snap.store
    for n in range(50):
        store.put_session(f"s{n}", SessionIn(quiet_after_s=3600))
        store.add_watch(f"s{n}", ProcessWatch(match="no-such-program-ever-runs"), limit=100)
        watcher.snap.take(f"s{n}")
    time.sleep(0.2)
    tick(watcher, clock)  # each goes dormant
    tick(watcher, clock)
    assert watcher._to_look_at() == []
    watcher.activity.mark("s7")
    assert [s.id for s in watcher._to_look_at()] == ["s7"]
    tick(watcher, clock)
    assert not watcher.dormant(store.get_session("s7"))
