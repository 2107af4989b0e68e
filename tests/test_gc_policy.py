"""Full garbage collections run on ctxd's timer, not inside whichever request allocates."""

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import gc, sys, threading, time, weakref
    from ctxd.http import gc_policy
    gc_policy.install(every_s=float(sys.argv[1]))
    assert gc.get_threshold()[2] == gc_policy.NEVER
    assert any(t.name == "ctxd-gc" for t in threading.enumerate())

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only a collection frees it
    gone = []
    weakref.finalize(a, gone.append, "a")
    gc.collect(1)
    gc.collect(1)  # it survived two collections: it lives in the oldest generation now
    del a, b
    keep = [[n] for n in range(300_000)]  # kept: many young collections, promoted objects
    young_only = bool(gone)
    deadline = time.monotonic() + 8
    while not gone and time.monotonic() < deadline:
        time.sleep(0.05)
    print(young_only, bool(gone))
    """
)


def test_a_cycle_in_the_oldest_generation_is_freed_by_the_timer_not_a_request() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, "2.0"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


IDLE = textwrap.dedent(
    """
    import gc, time
    from ctxd.http import gc_policy
    gc_policy.install(every_s=0.2)
    full = []
    gc.callbacks.append(lambda phase, info: phase == "start" and full.append(info["generation"]))
    time.sleep(1.5)  # idle: next to nothing allocated
    print(full.count(2))
    """
)


def test_an_idle_server_is_not_fully_collected_on_every_tick() -> None:
    done = subprocess.run([sys.executable, "-c", IDLE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]
