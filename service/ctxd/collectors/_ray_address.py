"""Where a Ray cluster's dashboard is for the address "auto", found as Ray finds its cluster.

Ray's own order (`ray.init(address="auto")`, `ray job submit`): RAY_API_SERVER_ADDRESS or
RAY_ADDRESS in the environment (ctxd's own: the server's, or the peer's that collects); else
the current cluster file the last `ray start` on this machine wrote, `ray_current_cluster`
under Ray's temp dir (RAY_TMPDIR, else TMPDIR, else /tmp, then `ray/`); else the default
dashboard, http://127.0.0.1:8265. RAY_ADDRESS and that file name the cluster's GCS
(`host:port`), not its dashboard: Ray asks the GCS, which ctxd cannot (it never imports Ray),
so the dashboard is the one this machine runs for that GCS (its `dashboard.py` process names
`--gcs-address`, `--host` and `--port`), else the default port on the GCS's host (a worker
node's: the head runs the dashboard). `Found.how` says what was looked at, for the line a
dump shows when nothing answers there.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

DEFAULT_PORT = 8265
DEFAULT = f"http://127.0.0.1:{DEFAULT_PORT}"
CURRENT_CLUSTER = "ray_current_cluster"
_WILDCARDS = ("0.0.0.0", "::", "", "localhost")


@dataclass(frozen=True)
class Found:
    url: str  # the dashboard
    how: str  # what named it, and what was looked at before: "RAY_ADDRESS unset; …"


def temp_dir(environ: Mapping[str, str]) -> str:
    """Ray's default temp dir, as Ray computes it on Linux."""
    base = environ.get("RAY_TMPDIR") or environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, "ray")


def find(environ: Mapping[str, str] = os.environ) -> Found:
    """The dashboard of the cluster "auto" means here (see the module's docstring)."""
    looked = []
    for name in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"):
        value = environ.get(name, "").strip()
        if not value:
            looked.append(f"{name} unset")
            continue
        if value.startswith(("http://", "https://")):
            return Found(value.rstrip("/"), "; ".join([*looked, f"{name}={value}"]))
        if "://" in value or value == "auto":
            looked.append(f"{name}={value} (not a dashboard or GCS address)")
            continue
        url, where = dashboard_of(value)
        return Found(url, "; ".join([*looked, f"{name}={value} names the GCS, {where}"]))
    path = os.path.join(temp_dir(environ), CURRENT_CLUSTER)
    try:
        with open(path) as handle:
            gcs = handle.read(256).strip()
    except OSError:
        gcs = ""
    if gcs:
        url, where = dashboard_of(gcs)
        return Found(url, "; ".join([*looked, f"{path} names the GCS {gcs}, {where}"]))
    looked.append(f"no {path}")
    return Found(DEFAULT, "; ".join([*looked, f"so the default {DEFAULT}"]))


def dashboard_of(gcs: str) -> tuple[str, str]:
    """(the dashboard URL of the cluster whose GCS is at `gcs`, how it was found)."""
    flag = f"--gcs-address={gcs}"
    for p in psutil.process_iter(["cmdline"]):
        argv = p.info["cmdline"] or []
        if flag not in argv or not any(a.endswith("dashboard/dashboard.py") for a in argv):
            continue
        values = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
        if values.get("port", "").isdigit():
            host = values.get("host", "")
            host = "127.0.0.1" if host in _WILDCARDS else host
            return f"http://{_bracketed(host)}:{values['port']}", f"its dashboard (pid {p.pid})"
    host = gcs.rpartition(":")[0].strip("[]") or "127.0.0.1"
    host = "127.0.0.1" if host in _WILDCARDS else host
    url = f"http://{_bracketed(host)}:{DEFAULT_PORT}"
    return url, f"no dashboard of it runs here, so its host's default {url}"


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host
