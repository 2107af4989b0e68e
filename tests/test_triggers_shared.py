"""The trigger watcher probes each watch set once per period for every session watching it."""

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

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
def clock(monkeypatch: pytest.MonkeyPatch) -> StepClock:
    """The trigger loop's clock, stepped by `tick`: however long a tick takes on a busy
    machine, every session of one tick sees the same moment of the period."""
    stepped = StepClock()
    monkeypatch.setattr(triggers, "time", SimpleNamespace(monotonic=stepped))
    return stepped


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
    wait_until(lambda: "x" in watcher._exited_in, "the kernel telling the exit")
    watcher.tick()  # same moment of the period: only the kernel's word makes it probe
    (event,) = events_of(watcher, "x")
    assert "process-exit" in event.trigger
