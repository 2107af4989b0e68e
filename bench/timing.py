"""Timing helpers shared by the benchmarks: repeated runs, medians and p95, in milliseconds, and
a process's CPU over a window."""

import statistics
import time
from collections.abc import Callable

import psutil


def cpu_percent(pid: int, seconds: float) -> float:
    """The CPU a process uses over the next `seconds` (user and system), in % of one core."""
    proc = psutil.Process(pid)
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    return (after.user + after.system - before.user - before.system) / seconds * 100


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    """Milliseconds of each of `runs` calls of `fn`."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return times


def median_ms(fn: Callable[[], object], runs: int) -> float:
    return statistics.median(timed(fn, runs))


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
