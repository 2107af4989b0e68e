"""Runs the collectors: one pool, a deadline each, one run at a time per memory, per purpose."""

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any

from ctxd import redact
from ctxd.collectors import CollectContext, Collector
from ctxd.models import Observations, Unavailable, Watch
from ctxd.settings import Settings

if TYPE_CHECKING:
    from ctxd.peers.fanout import Peers

log = logging.getLogger(__name__)


class CollectorRunner:
    """Owns what outlives one collection: the pool, collector memory and runs still going."""

    def __init__(
        self,
        settings: Settings,
        collectors: Callable[[], Sequence[Collector]],
        peers: "Peers | None" = None,
    ) -> None:
        self.settings = settings
        self.peers = peers  # watches with `host` are collected there (service/ctxd/peers/fanout.py)
        self._collectors = collectors
        self._memory: dict[str, dict[str, Any]] = {}
        self._guard = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="collector")
        self._inflight: dict[tuple[str, str], Future] = {}
        # Milliseconds of each collector and of the redaction in the latest run, per memory
        # key ("snapshot:sid"): what `make bench --profile` prints as a snapshot's breakdown.
        self.last_timings: dict[str, dict[str, float]] = {}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.peers is not None:
            self.peers.close()

    def observe(
        self,
        sid: str,
        watches: list[Watch],
        previous: Observations | None = None,
        purpose: str = "snapshot",
        only: frozenset[str] | None = None,
        remote: bool = True,
        table_since: float | None = None,
    ) -> Observations:
        """Run every collector over the session's watches; a failure is a section, not a raise.

        Collector memory (read offsets, CPU baselines) is kept per purpose, so the watcher's
        cheap probes never consume what the next real snapshot should report. `table_since`:
        a process table read by someone else since then may be used (see `CollectContext`).
        """
        key = f"{purpose}:{sid}"
        with self._guard:
            memory = self._memory.setdefault(key, {})
        ctx = CollectContext(
            settings=self.settings,
            previous=previous,
            memory=memory,
            probe=purpose == "probe",
            table_since=table_since,
            one_run=True,
        )
        chosen = [c for c in self._collectors() if only is None or c.NAME in only]
        # other hosts' watches: asked first, so they answer while the collectors run here
        peers = self.peers if remote else None
        watches, elsewhere = peers.split(watches) if peers is not None else (watches, {})
        asked = peers.ask(sid, purpose, elsewhere, only) if peers and elsewhere else None
        # All collectors start at once: most of their time is spent in system calls, so the
        # snapshot costs about the slowest of them, not their sum. Each has its own deadline.
        deadline = time.monotonic() + self.settings.limits.collector_timeout_s
        timings: dict[str, float] = {}
        sections = {}
        submitted = [(c.NAME, self._submit(key, c, watches, ctx, timings)) for c in chosen]
        for name, future in submitted:
            sections[name] = (
                self._result(name, future, deadline) if future is not None else _busy(name)
            )
        started = time.perf_counter()
        observations = Observations.model_validate(sections)
        timings["validate"] = (time.perf_counter() - started) * 1000
        if peers is not None and asked is not None:
            started = time.perf_counter()
            peers.merge(asked, observations)
            timings["peers"] = (time.perf_counter() - started) * 1000
        # A probe is compared and dropped, never kept or shown; what it reports goes through
        # the redactor as the event snapshot's note.
        if not ctx.probe:
            started = time.perf_counter()
            observations = redact.scrub(observations)
            timings["redaction"] = (time.perf_counter() - started) * 1000
        self.last_timings[key] = timings
        return observations

    def forget(self, sid: str) -> None:
        """Drop a session's collector memory, every purpose: one no caller will ask again."""
        with self._guard:
            for key in [k for k in self._memory if k.split(":", 1)[1] == sid]:
                del self._memory[key]
            # a run still going keeps its entry: the next one must not share its memory
            for k, future in list(self._inflight.items()):
                if k[0].split(":", 1)[1] == sid and future.done():
                    del self._inflight[k]

    def _submit(
        self,
        key: str,
        collector: Collector,
        watches: list[Watch],
        ctx: CollectContext,
        timings: dict[str, float],
    ) -> Future | None:
        """Start a collector, unless its previous run for the same memory is still going: a
        timed-out collector cannot be stopped, and two runs must not share one memory."""
        with self._guard:
            running = self._inflight.get((key, collector.NAME))
            if running is not None and not running.done():
                return None
            future = self._pool.submit(_timed, collector, watches, ctx, timings)
            self._inflight[(key, collector.NAME)] = future
            return future

    def _result(self, name: str, future: Future, deadline: float) -> Any:
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            reason = f"timed out after {self.settings.limits.collector_timeout_s:g} s"
        except Exception as exc:  # a collector bug must not cost the whole dump
            log.exception("collector %s failed", name)
            reason = f"collector failed: {type(exc).__name__}"
        return {"unavailable": [Unavailable(target=name, reason=reason)]}


def _timed(
    collector: Collector, watches: list[Watch], ctx: CollectContext, timings: dict[str, float]
) -> Any:
    started = time.perf_counter()
    try:
        return collector.collect(watches, ctx)
    finally:
        timings[collector.NAME] = (time.perf_counter() - started) * 1000


def _busy(name: str) -> dict[str, list[Unavailable]]:
    reason = "still busy: its previous run has not finished (a hung filesystem or probe?)"
    return {"unavailable": [Unavailable(target=name, reason=reason)]}
