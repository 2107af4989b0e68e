"""The server's memory footprint settings, applied once at start-up before any thread runs.

`ctxd serve` stays resident for days beside the jobs it watches; its peak RSS is the figure
users meet. Two things cost it megabytes for nothing:

- glibc gives each thread that allocates a malloc arena of its own (up to 8 per core): the
  collector pool, the default thread pool and the sampler each kept freed memory in theirs.
  One arena serves them all at the same CPU cost (Python allocates under the GIL anyway).
- httpx imports its command-line client (rich, pygments) as soon as they are installed, and
  Litestar installs rich: 3 MB the server never uses.

Both together: the peak of bench/bench_rss.py (the standard scenario's snapshots, resumes
under wrk, an MCP session) fell from 127 to 112-114 MB.
"""

import ctypes
import sys

_M_ARENA_MAX = -8  # glibc's mallopt(3) parameter


def tune_malloc() -> bool:
    """One malloc arena for every thread; False where the C library has no such setting."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_ARENA_MAX, 1))  # 1 on success; musl's stub answers 0


def skip_httpx_cli() -> None:
    """Make httpx skip importing its command-line client (it falls back to a stub `main`)."""
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def lean_start() -> None:
    """Everything above; call first thing in the server process."""
    tune_malloc()
    skip_httpx_cli()
