"""What reading a cluster's own engine costs: a snapshot of a Ray head with 50 actors through
the service (and the `ray` collector alone), and one collection of a 4-task Slurm job on its
node through srun (and sstat of its steps).

Run: .venv/bin/python -m bench.bench_engines [--runs 7] [--actors 50]

Ray: a head on loopback from `.ray/` (what `make test` and `make bench` install;
CTXD_RAY_PYTHON names another), a job holding `--actors` actors; the median of a forced
snapshot of a session watching it (`POST /api/sessions/…/snapshots`: every collector, the
store, the Markdown) and of the collector alone (four GETs of the dashboard's state API and
the parse). Slurm: where its daemons are installed and this runs as root, a single-node Slurm
of the bench's own (`bench/slurm_node.py`, as the tests start it) and a job of 4 tasks; the
median of one `srun --overlap` collection of its processes, and of one `sstat`. Else a line
that says why it was not measured. The figures are appended to bench/results.jsonl (mode
"engines").
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from bench import ray_head, slurm_node, table
from bench.scenario import free_port, start_server
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

TASKS = 4
TASK = "import time\ntime.sleep(600)\n"


def row(name: str, value: str) -> None:
    print(f"  {name:<48} {value}")


def bench_ray(runs: int, actors: int, figures: dict) -> None:
    if (why := ray_head.missing()) is not None:
        row(f"ray, a head with {actors} actors", f"not measured: {why}")
        return
    from ctxd.collectors import CollectContext, ray
    from ctxd.models import RayWatch, Watch
    from ctxd.settings import Settings

    mark = tempfile.mkdtemp(prefix="ctxd-bench-ray-", dir="/tmp")
    data_dir = Path(tempfile.mkdtemp(prefix="ctxd-bench-ray-data-"))
    gcs, dashboard = free_port(), free_port()
    driver = server = None
    try:
        ray_head.start(mark, gcs, dashboard)
        job = Path(mark) / "actors.py"
        job.write_text(ACTORS)
        driver = subprocess.Popen(
            [ray_head.RAY_PYTHON, str(job), str(gcs), str(actors)], env=ray_head.environment(),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        if (said := ray_head.wait_ready(driver)) is not None:
            row(f"ray, a head with {actors} actors", f"not measured: the job did not start: {said}")
            return
        url = f"http://127.0.0.1:{dashboard}"
        server = start_server(data_dir)
        with httpx.Client(base_url=server.url, timeout=60) as client:
            client.put("/api/sessions/ray", json={}).raise_for_status()
            client.post("/api/sessions/ray/watches", json={"kind": "ray", "url": url})
            take = lambda: client.post("/api/sessions/ray/snapshots", json={"force": True})  # noqa: E731
            first = take().json()["observations"]["ray"]["items"][0]
            assert len(first["actors"]) >= actors, first
            took = timed(lambda: take().raise_for_status(), runs)
        figures["ray_actors"] = actors
        figures["ray_snapshot_ms"] = statistics.median(took)
        row(
            f"ray snapshot through the service, {actors} actors",
            f"{statistics.median(took):.0f} ms",
        )
        watch = Watch(id=1, session="bench", created_at=datetime.now(UTC), spec=RayWatch(url=url))
        alone = timed(lambda: ray.collect([watch], CollectContext(settings=Settings())), runs)
        figures["ray_collect_ms"] = statistics.median(alone)
        row(f"ray collector alone, {actors} actors", f"{statistics.median(alone):.0f} ms")
    finally:
        if server is not None:
            server.stop()
        ray_head.end(mark, [driver.pid] if driver else [])
        shutil.rmtree(mark, ignore_errors=True)
        shutil.rmtree(data_dir, ignore_errors=True)


def bench_slurm(runs: int, figures: dict) -> None:
    if (why := slurm_node.missing()) is not None:
        row(f"slurm, a job of {TASKS} tasks", f"not measured: {why}")
        return
    from ctxd.collectors import _slurm_nodes, _slurm_steps

    root = Path(tempfile.mkdtemp(prefix="ctxd-bench-slurm-"))
    previous = os.environ.get("SLURM_CONF")
    try:
        with slurm_node.running(root) as cluster:
            os.environ["SLURM_CONF"] = str(cluster.conf)  # what srun and sstat read
            (cluster.jobs / "task.py").write_text(TASK)
            script = f"srun --overcommit -n {TASKS} {sys.executable} task.py"
            job = cluster.sbatch("-n", str(TASKS), "--overcommit", "--wrap", script)
            try:
                cluster.wait_state(job, {"RUNNING"})
                deadline = time.monotonic() + 60
                found = _slurm_nodes.collect(job, 1, 30.0)
                while len([t for t in found.tasks if t.step == "0"]) < TASKS:
                    if time.monotonic() > deadline:
                        row(f"slurm, a job of {TASKS} tasks", "not measured: its tasks never ran")
                        return
                    time.sleep(0.5)
                    found = _slurm_nodes.collect(job, 1, 30.0)
                took = timed(lambda: _slurm_nodes.collect(job, 1, 30.0), runs)
                figures["slurm_tasks"] = TASKS
                figures["slurm_collect_ms"] = statistics.median(took)
                said = f"{statistics.median(took):.0f} ms ({len(found.tasks)} processes)"
                row(f"slurm tasks through srun --overlap, {TASKS} tasks", said)
                argv = _slurm_steps.argv(job)
                steps = timed(lambda: subprocess.run(argv, capture_output=True, check=True), runs)
                figures["slurm_sstat_ms"] = statistics.median(steps)
                row("slurm steps through sstat", f"{statistics.median(steps):.0f} ms")
            finally:
                subprocess.run(["scancel", job], env=cluster.env(), check=False)
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--actors", type=int, default=50)
    args = parser.parse_args()
    started = time.monotonic()
    figures: dict = {"runs": args.runs}
    print("a cluster's own engine, read by ctxd (median wall time)")
    bench_ray(args.runs, args.actors, figures)
    bench_slurm(args.runs, figures)
    print(f"  (the bench took {time.monotonic() - started:.0f} s)", file=sys.stderr)
    if len(figures) > 1:
        table.append_results(figures, "engines")


if __name__ == "__main__":
    main()
