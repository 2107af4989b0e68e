"""Cost of the process collector with 1,000 unrelated processes on the host and 9 watched ones.

Run: .venv/bin/python -m bench.bench_processes [--others 1000] [--runs 15]
Prints medians next to `ps -eo pid,ppid,stat,pcpu,rss,args` on the same machine.
"""

import argparse
import contextlib
import subprocess
import sys
import uuid
from datetime import UTC, datetime

import psutil
from ctxd.collectors import CollectContext, processes
from ctxd.models import ProcessWatch, Watch
from ctxd.settings import Settings

from bench.timing import median_ms

LAUNCHER = """
import subprocess, sys, time
kids = [subprocess.Popen(["sleep", "600"]) for _ in range(8)]
print("ready", flush=True)
time.sleep(600)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--others", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    tag = f"ctxd-bench-{uuid.uuid4().hex[:8]}"
    others: list[subprocess.Popen] = []
    launcher = None
    try:
        others = [subprocess.Popen(["sleep", "600"]) for _ in range(args.others)]
        launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, tag], stdout=subprocess.PIPE)
        assert launcher.stdout is not None and launcher.stdout.readline().strip() == b"ready"
        watch = Watch(id=1, session="bench", created_at=datetime.now(UTC),
                      spec=ProcessWatch(match=tag, expect_ports=[8000]))  # fmt: skip
        ctx = CollectContext(settings=Settings(cpu_sample_s=0.0))
        first = processes.collect([watch], ctx)  # warm: handles and sampler tracks exist after
        assert len(first.items) == 9, [p.pid for p in first.items]
        collect = median_ms(lambda: processes.collect([watch], ctx), args.runs)
        cold = median_ms(
            lambda: processes.collect([watch], CollectContext(settings=Settings(cpu_sample_s=0.0))),
            args.runs,
        )
        ps_argv = ["ps", "-eo", "pid,ppid,stat,pcpu,rss,args"]
        ps = median_ms(lambda: subprocess.run(ps_argv, capture_output=True, check=True), args.runs)
        print(f"processes on host: ~{args.others + 9 + 50}; watched: 9; runs: {args.runs}")
        print(f"process collector, warm (kept handles):   median {collect:7.1f} ms")
        print(f"process collector, cold (new context):    median {cold:7.1f} ms")
        print(f"ps -eo pid,ppid,stat,pcpu,rss,args:       median {ps:7.1f} ms")
    finally:
        if launcher is not None:  # its 8 children first, or they outlive it as orphans
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(launcher.pid).children():
                    child.kill()
        for proc in [*others, *([launcher] if launcher else [])]:
            proc.kill()
        for proc in [*others, *([launcher] if launcher else [])]:
            proc.wait()


if __name__ == "__main__":
    main()
