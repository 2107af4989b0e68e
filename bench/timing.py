"""Timing helpers shared by the benchmarks: repeated runs, medians and p95, in milliseconds."""

import statistics
import time
from collections.abc import Callable


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
