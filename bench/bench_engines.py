"""What reading a cluster's own engine costs: the `ray` collector over a Ray head with 50
actors, and a running Slurm job's tasks collected on its node through srun.

Run: .venv/bin/python -m bench.bench_engines [--runs 7] [--actors 50]

Ray: a head on loopback from `.ray/` (what `make test` installs; CTXD_RAY_PYTHON names
another), a job holding `--actors` actors; the median of the collector's wall time (four
GETs of the dashboard's state API and the parse). Slurm: only where a cluster is already
configured here (SLURM_CONF, a running slurmd) and a job of yours is RUNNING with several
tasks (CTXD_BENCH_SLURM_JOB=ID): the median of one `srun --overlap` collection; else a line
that says why it was not measured.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import ray_head
from bench.scenario import free_port
from bench.timing import timed

ACTORS = """\
import sys, time, ray
ray.init(address=f"127.0.0.1:{sys.argv[1]}", log_to_driver=False)

@ray.remote(num_cpus=0)
class Replica:
    def ping(self):
        return 1

replicas = [Replica.options(name=f"replica-{i}").remote() for i in range(int(sys.argv[2]))]
ray.get([r.ping.remote() for r in replicas])
print("ready", flush=True)
time.sleep(600)
"""


def bench_ray(runs: int, actors: int) -> str:
    if (why := ray_head.missing()) is not None:
        return f"not measured: {why}"
    from ctxd.collectors import CollectContext, ray
    from ctxd.models import RayWatch, Watch
    from ctxd.settings import Settings

    mark = tempfile.mkdtemp(prefix="ctxd-bench-ray-", dir="/tmp")
    gcs, dashboard = free_port(), free_port()
    driver = None
    try:
        ray_head.start(mark, gcs, dashboard)
        job = Path(mark) / "actors.py"
        job.write_text(ACTORS)
        driver = subprocess.Popen(
            [ray_head.RAY_PYTHON, str(job), str(gcs), str(actors)], env=ray_head.environment(),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        if (said := ray_head.wait_ready(driver)) is not None:
            return f"not measured: the job did not start: {said[-300:]}"
        spec = RayWatch(url=f"http://127.0.0.1:{dashboard}")
        watch = Watch(id=1, session="bench", created_at=datetime.now(UTC), spec=spec)
        ctx = CollectContext(settings=Settings())
        first = ray.collect([watch], ctx)
        assert len(first.items[0].actors) >= actors, first
        took = timed(lambda: ray.collect([watch], CollectContext(settings=Settings())), runs)
        return f"{statistics.median(took):.0f} ms ({len(first.items[0].actors)} actors)"
    finally:
        ray_head.end(mark, [driver.pid] if driver else [])


def bench_slurm(runs: int) -> str:
    job = os.environ.get("CTXD_BENCH_SLURM_JOB")
    if not job or not os.environ.get("SLURM_CONF"):
        return "not measured: set SLURM_CONF and CTXD_BENCH_SLURM_JOB to a RUNNING job's id"
    from ctxd.collectors import _slurm_nodes

    tasks, problems = _slurm_nodes.collect(job, 1, 30.0)
    if problems:
        return f"not measured: {problems[0]}"
    took = timed(lambda: _slurm_nodes.collect(job, 1, 30.0), runs)
    return f"{statistics.median(took):.0f} ms ({len(tasks)} processes of job {job})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--actors", type=int, default=50)
    args = parser.parse_args()
    started = time.monotonic()
    print("a cluster's own engine, read by ctxd (median wall time of one collection)")
    print(
        f"  ray collector, a head with {args.actors} actors   {bench_ray(args.runs, args.actors)}"
    )
    print(f"  slurm tasks through srun --overlap       {bench_slurm(args.runs)}")
    print(f"  (the bench took {time.monotonic() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
