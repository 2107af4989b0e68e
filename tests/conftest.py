"""Shared fixtures: a real ctxd server on a free port, the same app in-process, and real child
processes."""

import contextlib
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, TypeVar

import httpx
import pytest

from tests.forkserver import Forked, ForkServer

if TYPE_CHECKING:
    from ctxd.snapshotter.triggers import Watcher

FIXTURES = Path(__file__).resolve().parent / "fixtures"


DATA_HOME = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """A service a test starts without a data directory keeps its store in the per-user one
    (`ctxd.user_data_dir`): here, a folder of this run's (removed at its end), never the
    user's real store."""
    os.environ["XDG_DATA_HOME"] = config.stash[DATA_HOME] = tempfile.mkdtemp(
        prefix="ctxd-test-data-"
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    FORKS.close()
    shutil.rmtree(config.stash[DATA_HOME], ignore_errors=True)  # this run's, made above


FORKS = ForkServer()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    url: str
    data_dir: Path
    process: subprocess.Popen | Forked
    log_path: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_server(
    data_dir: Path, log_path: Path, env: dict[str, str] | None = None, user: int | None = None
) -> Server:
    """`ctxd serve` on a free port, once it answers /health; as `user` when given (root only).
    Forked from the fork server (`tests/forkserver.py`: the imports paid once); run as the
    command as another user, or with a PYTHON* variable (read as the interpreter starts)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = ["serve", "--port", str(port), "--data-dir", str(data_dir)]
    environment = {**os.environ, **(env or {})}
    process: subprocess.Popen | Forked
    if user is None and not any(name.startswith("PYTHON") for name in env or {}):
        process = FORKS.start(argv, environment, log_path)
    else:
        with open(log_path, "ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "ctxd", *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=environment,
                user=user,
                group=user,
                extra_groups=[],
            )
    token = (env or {}).get("CTXD_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ctxd exited with {process.returncode}: {log_path.read_text()}")
        try:
            if httpx.get(f"{url}/health", headers=headers, timeout=1).status_code == 200:
                return Server(url, data_dir, process, log_path)
        except httpx.HTTPError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("ctxd did not answer /health within 30 s")


def stop_server(server: Server) -> None:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log")
    try:
        yield srv
    finally:
        stop_server(srv)


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client() as c:
        yield c


@contextmanager
def app_client(data_dir: Path, **settings: object) -> Iterator[httpx.Client]:
    """The app `ctxd serve` runs (create_app, its lifespan, middleware, error handlers), called
    in-process: for tests where the socket is not the point. An httpx.Client like the others."""
    from ctxd.http.app import create_app
    from ctxd.settings import Settings
    from litestar.testing import TestClient

    app = create_app(Settings(data_dir=data_dir, **settings))  # type: ignore[arg-type]
    # 127.0.0.1: the Host check allows it; exceptions are answered, as a real server would.
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as c:
        c.follow_redirects = False
        yield c


@pytest.fixture
def spawn() -> Iterator:
    """Start real child processes; every one is killed and reaped when the test ends."""
    children: list[subprocess.Popen] = []

    def start(*args: str, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(list(args), **kwargs)
        children.append(proc)
        return proc

    yield start
    for proc in children:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


NOBODY = 65534
T = TypeVar("T")


def as_nobody(work: Callable[[], T]) -> T:
    """`work()` in a forked child that dropped to `nobody` first (when run as root), its result
    sent back: "permission denied" then happens even where root could read anything."""
    if os.geteuid() != 0:
        return work()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop, work, report, never return into pytest
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            result = ("ok", work())
        except BaseException as exc:  # reported to the parent, which fails the test
            result = ("error", f"{type(exc).__name__}: {exc}")
        try:
            with os.fdopen(write, "wb") as out:
                out.write(pickle.dumps(result))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data) if data else ("error", "the child sent nothing")
    assert kind == "ok", f"as nobody: {value}"
    return value


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder any user may enter (pytest's tmp_path is root's alone): files in it are kept
    from `nobody` by their own mode, not by the folder above."""
    folder = Path(tempfile.mkdtemp(prefix="ctxd-open-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def mount_tmpfs(folder: Path, size: str, source: str = "tmpfs") -> None:
    """A fresh tmpfs of `size` mounted on `folder`; the test is skipped, with the kernel's
    reason, where that is refused. The caller unmounts it."""
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", source, str(folder)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs here: {done.stderr.strip()}")


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MB filesystem (tmpfs), so "no space left" comes from the kernel."""
    mount = tmp_path / "small"
    mount.mkdir()
    mount_tmpfs(mount, "2m")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill_disk(folder: Path) -> Path:
    """Writes zeros into `folder` until the filesystem is full; returns the filler file."""
    filler = folder / "filler"
    with contextlib.suppress(OSError), open(filler, "wb", buffering=0) as out:
        while True:
            out.write(b"\0" * 4096)
    return filler


@pytest.fixture
def fresh_redaction() -> Iterator[None]:
    """Redaction caches and learned secrets emptied before and after the test."""
    from ctxd import redact
    from ctxd.redact import known as redact_known

    redact._text_short.cache_clear()
    redact_known.forget_all()
    yield
    redact._text_short.cache_clear()
    redact_known.forget_all()


def claude_hooks(client: httpx.Client, conversation: str, cwd: Path) -> Callable[..., dict]:
    """Claude Code's hook events of one conversation in `cwd`, posted as its hooks post them
    (`/api/hooks/claude`); each call answers ctxd's JSON."""

    def hook(event: str, **fields: object) -> dict:
        payload = {"hook_event_name": event, "session_id": conversation, "cwd": str(cwd),
                   **fields}  # fmt: skip
        answer = client.post("/api/hooks/claude", json={"payload": payload})
        answer.raise_for_status()
        return dict(answer.json())

    return hook


def wait_until(check: Callable[[], T], what: str = "the condition", limit: float = 30.0,
               every: float = 0.05) -> T:  # fmt: skip
    """Polls `check` until it returns something true, and returns that; fails after `limit` s."""
    deadline = time.monotonic() + limit
    while True:
        if value := check():
            return value
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(every)


def asleep(pid: int, call: str = "") -> bool:
    """Whether `pid` sleeps in the kernel (state S) at a waiting point that names `call`
    ("nanosleep", "futex", …; the kernel function or, on x86_64, the system call): a child
    that has reached the wait a test needs, not one still starting or handling a signal."""
    from ctxd.collectors.proc import procfs

    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    point = procfs.waiting_point(pid) or ""
    # a point with no name (no wchan, a system call by number off x86_64) cannot tell `call`
    unnamed = point.startswith("syscall ")
    sleeping = stat[stat.rfind(")") + 2 :].startswith("S")
    return sleeping and bool(point) and (call in point or unnamed)


def settled(pid: int) -> bool:
    """Whether `pid` is older than the process table's SETTLED_S (it has called exec: the
    table reads it as what it runs now, not as a fresh fork that may still change)."""
    from ctxd.collectors.proc import procfs, proctree

    try:
        start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return False
    return uptime * procfs.CLOCK_TICKS - start > (proctree.SETTLED_S + 0.05) * procfs.CLOCK_TICKS


def ctxd(url: str, *args: str) -> subprocess.CompletedProcess:
    """The CLI, `ctxd --url URL ARGS…`, as a user runs it against a server."""
    return subprocess.run(
        [sys.executable, "-m", "ctxd", "--url", url, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@contextmanager
def ticked_watcher(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, probe_s: float, min_gap_s: float
) -> Iterator["Watcher"]:
    """The trigger loop's Watcher on a real store, ticked by the test instead of a timer."""
    from ctxd.settings import Settings
    from ctxd.snapshotter.snapshotter import Snapshotter
    from ctxd.snapshotter.triggers import Activity, Watcher
    from ctxd.store.database import Store

    monkeypatch.setenv("CTXD_EVENT_PROBE_S", str(probe_s))
    monkeypatch.setenv("CTXD_EVENT_MIN_GAP_S", str(min_gap_s))
    settings = Settings(data_dir=data_dir)
    store = Store(settings.db_path)
    snap = Snapshotter(settings, store)
    watcher = Watcher(snap, Activity())
    try:
        yield watcher
    finally:
        watcher.stop()
        snap.close()
        store.close()


def tagged(mark: str) -> list[int]:
    """The pids whose command line holds `mark`: a test's own processes, by a tag only it uses."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if mark.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
    return found


@pytest.fixture
def tag() -> Iterator[str]:
    """A tag of this test's own for every command line it starts; its processes are ended by
    that tag alone when the test ends (never by a name real programs share)."""
    mark = f"ctxd-test-{uuid.uuid4().hex[:10]}"
    yield mark
    for pid in tagged(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def rooted_server(tmp_path: Path) -> Iterator[Server]:
    """`ctxd serve` whose watch roots are this test's folder (its workspaces and logs)."""
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log",
                       env={"CTXD_WATCH_ROOTS": f'["{tmp_path}"]'})  # fmt: skip
    try:
        yield srv
    finally:
        stop_server(srv)


class StepClock:
    """A clock the test moves: `clock()` reads it, `clock.advance(s)` steps it. Passed where
    code takes a `clock`, so an outcome that depends on elapsed time does not depend on load."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> StepClock:
    """The trigger loop's clock (its probe periods and event gap), stepped by the test: however
    long a tick takes on a busy machine, every session of one tick sees the same moment."""
    from ctxd.snapshotter import triggers

    stepped = StepClock()
    monkeypatch.setattr(triggers, "time", SimpleNamespace(monotonic=stepped))
    return stepped
