"""Where one snapshot's time goes: its phases and each collector, in-process on the standard
scenario, then the functions cProfile finds costliest (`python -m bench --profile`)."""

import cProfile
import io
import pstats
import statistics
import tempfile
from pathlib import Path

from ctxd.collectors import CollectContext, registry
from ctxd.collectors.proc import sampler
from ctxd.models import SessionIn, WatchIn
from ctxd.settings import Settings
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.database import Store

from bench.scenario import Scenario


def _watches(scenario: Scenario) -> list[dict]:
    return [
        {
            "kind": "process",
            "match": scenario.launcher_match,
            "expect_ports": [scenario.closed_port],
        },
        {"kind": "port", "port": scenario.listening_port},
        {"kind": "artifact", "path": str(scenario.artifacts)},
        *({"kind": "log", "path": str(path)} for path in scenario.logs),
    ]


def _table(title: str, laps: list[dict[str, float]]) -> None:
    print(f"  {title}")
    names = list(dict.fromkeys(name for lap in laps for name in lap))
    for name in names:
        values = [lap[name] for lap in laps if name in lap]
        print(f"    {name:<28} {statistics.median(values):8.2f} ms")


def run(scenario: Scenario, runs: int) -> None:
    print(f"profile of one snapshot (in-process, standard scenario, medians of {runs})")
    with tempfile.TemporaryDirectory(prefix="ctxd-profile-") as folder:
        settings = Settings(data_dir=Path(folder))
        store = Store(settings.db_path)
        snap = Snapshotter(settings, store)
        sampler.shared(settings.sample_interval_s)
        try:
            store.put_session("prof", SessionIn(title="profile", objective="where time goes"))
            for spec in _watches(scenario):
                limit = settings.limits.max_watches_per_session
                store.add_watch("prof", WatchIn.model_validate(spec).root, limit)
            snap.take("prof", force=True)
            phases, collectors, totals = [], [], []
            for _ in range(runs):
                snap.take("prof", force=True)
                phases.append(dict(snap.last_phases["prof"]))
                collectors.append(dict(snap.runner.last_timings["snapshot:prof"]))
                totals.append({"total": sum(phases[-1].values())})
            _table("phases (sequential; they add up to the total)", phases)
            print(f"    {'total':<28} {statistics.median(t['total'] for t in totals):8.2f} ms")
            _table("collectors (run concurrently: 'collect' costs about the slowest)", collectors)
            _cprofile("one snapshot, the request's thread", lambda: snap.take("prof", force=True))
            watches = store.list_watches("prof")
            ctx = CollectContext(settings=settings, memory={})
            for collector in registry():
                collector.collect(watches, ctx)  # warm, as in a real session's memory

            def serially() -> None:
                for collector in registry():
                    collector.collect(watches, ctx)

            _cprofile("the collectors, one after the other, one thread", serially)
        finally:
            snap.close()
            store.close()


def _cprofile(title: str, fn: object) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    fn()  # type: ignore[operator]
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(14)
    print(f"  cProfile, {title}: top functions by own time")
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("ncalls"))
    total = next((line for line in lines if "function calls" in line), "")
    print("    " + total.strip())
    for line in lines[start : start + 15]:
        print("    " + line[:150])
