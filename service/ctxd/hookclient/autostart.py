"""When a hook finds no ctxd on this machine, it starts one in the background, once: a lock
keeps ten hooks fired together from starting ten. Standard library only (hooks import it).

Switched off with CTXD_AUTOSTART=0; only for a loopback URL; the data directory is the
per-user one (`$XDG_DATA_HOME/ctxd`, else `~/.local/share/ctxd`) unless CTXD_DATA_DIR says.
The service runs in the home folder, whatever folder the hook fired in: its working directory
is one of its default watch roots, and a first hook fired from `/` must not make it one.
"""

import fcntl
import sys
import time
from pathlib import Path  # only when nothing answers: the hook imports this module then

from ctxd import user_data_dir
from ctxd.hookclient import env, request
from ctxd.hookclient.request import LOOPBACK

WAIT_S = 8.0  # a person waits on a prompt this long at most for a first start


def data_dir() -> Path:
    return Path(given) if (given := env.data_dir()) else user_data_dir()


def ensure(url: str, wait: bool) -> str | None:
    """Start ctxd for `url` unless another hook is doing it; returns what to tell the person,
    or None when it may not start one here (switched off, not a loopback address)."""
    _, host, port_given, _ = request.split(url)
    if not env.autostart() or host not in LOOPBACK:
        return None
    port = port_given or 80
    folder = data_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f".autostart-{port}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another hook is starting it: wait for that one
            return _waited(url, wait, f"ctxd is starting at {url}")
        if _healthy(url):
            return "ctxd was started by another hook"
        import subprocess  # only here: a hook that finds ctxd up does not pay for it

        log = open(folder / "ctxd.log", "ab")  # noqa: SIM115 (the child keeps it)
        subprocess.Popen(
            [sys.executable, "-m", "ctxd", "serve", "--host", host,
             "--port", str(port), "--data-dir", str(folder.absolute())],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            cwd=_fixed_cwd(folder),
        )  # fmt: skip
        return _waited(url, True, f"ctxd was not running: started it at {url} (data in {folder})")


def _fixed_cwd(folder: Path) -> str:
    """Home, which is a watch root anyway; the data directory where there is no home."""
    try:
        home = Path.home()
    except (RuntimeError, KeyError):
        home = None
    return str(home) if home is not None and home.is_dir() else str(folder.absolute())


def _waited(url: str, wait: bool, said: str) -> str:
    deadline = time.monotonic() + (WAIT_S if wait else 0)
    while not _healthy(url) and time.monotonic() < deadline:
        time.sleep(0.1)
    return said


def _healthy(url: str) -> bool:
    try:
        return request.request(url, "GET", "/health", b"", {}, timeout=1)[0] == 200
    except OSError:
        return False
