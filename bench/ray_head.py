"""A Ray head on this machine's loopback only, for the `ray` watch's test and bench: started in
a temp dir of its own, ended by that dir and by descent (never `ray stop`, which ends every Ray
on the box).

RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, on the head and on every driver, keeps Ray from rewriting
127.0.0.1 to the machine's interface address (and dialling it).
"""

import os
import signal
import subprocess
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
# `make test` installs Ray 2.60 into `.ray/`; CTXD_RAY_PYTHON names another interpreter with Ray
RAY_PYTHON = os.environ.get("CTXD_RAY_PYTHON") or str(REPO / ".ray" / "bin" / "python")
RAY = str(Path(RAY_PYTHON).parent / "ray")  # the `ray` CLI: there only once Ray's install finished
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def missing(python: str = RAY_PYTHON) -> str | None:
    """Why no head can be started with `python` (none there, or Ray not installed beside it);
    None when one can. A failed `pip install` leaves the interpreter without the `ray` CLI."""
    ray = str(Path(python).parent / "ray")
    for path, what in ((python, "no Python for Ray"), (ray, "Ray is not installed")):
        if not os.access(path, os.X_OK):
            return f"{what} ({path}: `make test` installs it, or set CTXD_RAY_PYTHON)"
    return None


def environment() -> dict[str, str]:
    """This process's environment for Ray's head and drivers: loopback only, no other cluster."""
    env = {**os.environ, **LOOPBACK_ONLY}
    env.pop("RAY_ADDRESS", None)
    return env


def start(mark: str, gcs: int, dashboard: int, extra: dict[str, str] | None = None) -> None:
    """A head with its GCS on `gcs` and its dashboard on `dashboard`, its files under `mark`;
    `extra`: more of its environment (Ray's `RAY_<setting>` overrides)."""
    subprocess.run(
        [RAY, "start", "--head", "--node-ip-address=127.0.0.1",
         f"--port={gcs}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
         "--include-dashboard=true", "--num-cpus=2", f"--temp-dir={mark}",
         "--disable-usage-stats"],
        env=environment() | (extra or {}), check=True, capture_output=True, timeout=120,
    )  # fmt: skip


def wait_ready(driver: subprocess.Popen) -> str | None:
    """Read a driver's output until it prints "ready" (Ray's own INFO lines come first): None
    then, else its last lines, when it ended without."""
    assert driver.stdout is not None
    said: list[str] = []
    for line in driver.stdout:
        said.append(line)
        if line.strip() == "ready":
            return None
    return "".join(said[-20:])


def end(mark: str, also: list[int]) -> None:
    """End this head: the processes whose command line names `mark`, what they started (the
    workers), and `also` (the driver)."""
    found: dict[int, psutil.Process] = {}
    for p in psutil.process_iter(["cmdline"]):
        if mark in " ".join(p.info["cmdline"] or []) or p.pid in also:
            try:
                for q in [p, *p.children(recursive=True)]:
                    found[q.pid] = q
            except psutil.Error:
                continue
    for q in found.values():
        try:
            q.send_signal(signal.SIGKILL)
        except psutil.Error:
            continue
    psutil.wait_procs(list(found.values()), timeout=10)
