"""Background sampling of watched processes: CPU, I/O and memory history, and how long idle."""

import contextlib
import functools
import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import psutil

from ctxd.collectors.proc import procfs
from ctxd.thresholds import IDLE_CPU_PERCENT, MEMORY_GROWTH_WINDOW_S

# A process no collector has asked about for this long is no longer watched by anyone.
FORGET_AFTER_S = 600.0
# An exited process is remembered this long, so the next snapshot can say when it was last alive.
REMEMBER_EXITED_S = 3600.0
RSS_HISTORY = 12

Key = tuple[int, float]


@dataclass
class Reading:
    """What the sampler knows of one process, as of its latest sample."""

    cpu_percent: float | None
    idle_for_s: float | None
    io_read_bps: float | None
    io_write_bps: float | None
    rss_growth_bps: float | None
    last_alive: float
    alive: bool


@dataclass
class _Track:
    pid: int
    start_ticks: int  # /proc/PID/stat's: another value is another process with this pid
    asked_at: float
    sampled_at: float = 0.0
    cpu_time: float | None = None
    cpu_percent: float | None = None
    idle_since: float | None = None
    io: tuple[float, int, int] | None = None
    io_rates: tuple[float, float] | None = None
    rss: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=RSS_HISTORY))
    alive: bool = True
    last_alive: float = 0.0
    # a single-threaded sleeper's count of runs (/proc/PID/schedstat) at its last full
    # sample: while it stays the same the process has not run, so nothing of it moved
    runs: bytes | None = None


def steady_growth(
    points: list[tuple[float, int]], min_points: int = 6, min_span_s: float = MEMORY_GROWTH_WINDOW_S
) -> float | None:
    """Bytes per second when every sample grew (never shrank) and the total grew by 5 %+, over
    at least `min_span_s` (a process loading its model grows for seconds: that is no leak)."""
    if len(points) < min_points or points[-1][0] - points[0][0] < min_span_s:
        return None
    values = [v for _, v in points]
    if any(b < a for a, b in itertools.pairwise(values)) or values[0] <= 0:
        return None
    if values[-1] < values[0] * 1.05:
        return None
    span = points[-1][0] - points[0][0]
    return (values[-1] - values[0]) / span if span > 0 else None


class Sampler:
    """One thread that samples every tracked process each `interval_s`; cheap: only those."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._tracks: dict[Key, _Track] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "Sampler":
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="ctxd-sampler", daemon=True)
                self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=5)
        self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(Exception):  # a sampling bug must not end the thread
                self.sample()

    def track(self, key: Key) -> None:
        """Start (or keep) sampling (pid, start time); the first call samples it at once."""
        now = time.time()
        with self._lock:
            track = self._tracks.get(key)
            if track is None:
                try:
                    start_ticks = procfs.stat_fields(key[0]).start_ticks
                except (OSError, ValueError, IndexError):
                    return
                if not _starts_at(start_ticks, key[1]):
                    _boot_time.cache_clear()  # the clock was stepped: boot time reads anew
                    procfs.boot_skew.cache_clear()
                    if not _starts_at(start_ticks, key[1]):
                        return  # the pid was reused: not the process we were asked about
                track = self._tracks[key] = _Track(key[0], start_ticks, asked_at=now)
                self._sample_one(track, now)
            track.asked_at = now

    def sample(self) -> None:
        """One pass over every tracked process (the thread calls this each interval)."""
        now = time.time()
        with self._lock:
            for key, track in list(self._tracks.items()):
                if now - track.asked_at > FORGET_AFTER_S or (
                    not track.alive and now - track.last_alive > REMEMBER_EXITED_S
                ):
                    del self._tracks[key]
                elif track.alive:
                    self._sample_one(track, now)

    def _sample_one(self, track: _Track, now: float) -> None:
        """Reads /proc itself: psutil took twice the reads (and a file object each) for the
        same figures, and a watched crowd of 300 is sampled every interval."""
        pid = track.pid
        runs = procfs.runs(pid)
        if runs is not None and runs == track.runs:
            track.last_alive = now  # asleep since: no CPU, I/O or memory of its own moved
            still = track.io[1:] if track.io is not None else None  # it read and wrote nothing
            self._account(track, now, track.cpu_time or 0.0, still)
            return
        try:
            stat = procfs.stat_fields(pid)
            rss = procfs.memory(pid)[0]
        except (OSError, ValueError, IndexError):
            track.alive = False
            return
        if stat.start_ticks != track.start_ticks:
            track.alive = False  # gone, and its pid given to another process
            return
        try:
            io: tuple[int, int] | None = procfs.io_bytes(pid)
        except (OSError, KeyError, ValueError):
            io = None  # not ours to read (or gone: the next sample says so)
        track.last_alive = now
        if stat.letter == "Z":
            track.alive = False  # dead already: its parent just has not reaped it
        track.runs = runs if procfs.sleeps_alone(stat) else None
        self._account(track, now, stat.cpu_ticks / procfs.CLOCK_TICKS, io)
        track.rss.append((now, rss))

    @staticmethod
    def _account(track: _Track, now: float, cpu_time: float, io: tuple[int, int] | None) -> None:
        if track.cpu_time is not None and now > track.sampled_at:
            track.cpu_percent = max(0.0, (cpu_time - track.cpu_time) / (now - track.sampled_at))
            track.cpu_percent *= 100
            if track.cpu_percent >= IDLE_CPU_PERCENT:
                track.idle_since = None
            elif track.idle_since is None:
                # Idle since the start of the first quiet interval, as far as we can tell.
                track.idle_since = track.sampled_at
        if io is not None:
            if track.io is not None and now > track.io[0]:
                span = now - track.io[0]
                track.io_rates = (
                    max(0.0, (io[0] - track.io[1]) / span),
                    max(0.0, (io[1] - track.io[2]) / span),
                )
            track.io = (now, io[0], io[1])
        track.cpu_time, track.sampled_at = cpu_time, now

    def reading(self, key: Key) -> Reading | None:
        with self._lock:
            track = self._tracks.get(key)
            if track is None:
                return None
            now = time.time()
            idle = None
            if track.cpu_percent is not None:
                idle = 0.0 if track.idle_since is None else now - track.idle_since
            rates = track.io_rates or (None, None)
            return Reading(
                cpu_percent=track.cpu_percent,
                idle_for_s=idle,
                io_read_bps=rates[0],
                io_write_bps=rates[1],
                rss_growth_bps=steady_growth(list(track.rss)),
                last_alive=track.last_alive,
                alive=track.alive,
            )

    def tracked(self) -> int:
        with self._lock:
            return len(self._tracks)


@functools.cache
def _boot_time() -> float:
    """psutil's boot time (it reads /proc/stat at every call): the start of a key. The kernel
    derives it from the wall clock, so a clock step moves it: keys made after one (the process
    table reads it afresh) no longer match the cached value until it is read again."""
    return psutil.boot_time()


def _starts_at(start_ticks: int, started: float) -> bool:
    return abs(start_ticks / procfs.CLOCK_TICKS + _boot_time() - started) <= 0.01


_SHARED: dict[float, Sampler] = {}
_SHARED_LOCK = threading.Lock()


def shared(interval_s: float) -> Sampler:
    """The process-wide running sampler for this interval (started on first use)."""
    with _SHARED_LOCK:
        sampler = _SHARED.get(interval_s)
        if sampler is None:
            sampler = _SHARED[interval_s] = Sampler(interval_s)
        return sampler.start()


def stop_all() -> None:
    with _SHARED_LOCK:
        samplers = list(_SHARED.values())
        _SHARED.clear()
    for sampler in samplers:
        sampler.stop()
