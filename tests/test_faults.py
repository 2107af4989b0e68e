"""Faults and hostile input: collectors that raise or hang, vanishing processes, a hung
nvidia-smi, malformed and hostile bodies. Each ends in a section or a 4xx, never a 5xx."""

import errno
import importlib.util
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from ctxd.collectors import gpus, host, processes
from ctxd.models import SessionIn
from ctxd.settings import Limits, Settings
from ctxd.snapshotter import snapshotter as snapshots
from ctxd.store.database import Store

from tests.conftest import app_client

CANARY = "ghp_" + "F4uLtC4n4ry" * 3 + "abc"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    """In-process: hostile input meets the app's validation and handlers, not the socket."""
    with app_client(tmp_path / "data") as c:
        yield c


def _module(tmp_path: Path, name: str, body: str) -> ModuleType:
    """A real collector module written to disk and imported, as the registry holds modules."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_collector_that_raises_or_hangs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raising = _module(
        tmp_path,
        "raising_collector",
        f"""
        NAME = "gpus"
        def collect(watches, ctx):
            raise RuntimeError("driver said token={CANARY}")
        """,
    )
    hanging = _module(
        tmp_path,
        "hanging_collector",
        """
        import time
        NAME = "commands"
        def collect(watches, ctx):
            time.sleep(3)
        """,
    )
    monkeypatch.setattr(snapshots, "registry", lambda: (processes, raising, hanging, host))
    settings = Settings(data_dir=tmp_path / "data", limits=Limits(collector_timeout_s=0.5))
    store = Store(settings.db_path)
    snap = snapshots.Snapshotter(settings, store)
    try:
        store.put_session("faulty", SessionIn(title="faults"))
        snapshot = snap.take("faulty", force=True)
    finally:
        snap.close()
        store.close()
    obs = snapshot.observations
    assert obs.gpus.unavailable[0].reason == "collector failed: RuntimeError"
    assert "timed out after 0.5 s" in obs.commands.unavailable[0].reason
    assert obs.host.hostname, "the other collectors still ran"
    markdown = (tmp_path / "data" / "faulty" / "v0001.md").read_text()
    assert "unavailable" in markdown
    assert CANARY not in markdown and CANARY not in snapshot.model_dump_json()


def test_watched_processes_vanishing_mid_collection(client: httpx.Client, spawn) -> None:
    # A shell that forks short-lived children as fast as it can: some exit between being
    # listed and being read, every snapshot.
    churn = spawn("sh", "-c", "while :; do sleep 0.01 & sleep 0.005; done")
    client.put("/api/sessions/churn", json={})
    r = client.post(
        "/api/sessions/churn/watches",
        json={"kind": "process", "pid": churn.pid, "children": True},
    )
    assert r.status_code == 201, r.text
    for _ in range(8):
        r = client.post("/api/sessions/churn/snapshots", json={"force": True})
        assert r.status_code == 201, r.text
    churn.kill()
    churn.wait()
    r = client.post("/api/sessions/churn/snapshots", json={"force": True})
    assert r.status_code == 201, r.text
    assert client.get("/api/sessions/churn/resume").status_code == 200


@pytest.fixture
def hung_smi(tmp_path: Path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    fake = folder / "nvidia-smi"
    fake.write_text("#!/bin/sh\nexec sleep 600\n")  # a hang: it never answers by itself
    fake.chmod(0o755)
    return folder


def test_nvidia_smi_hanging_is_bounded(hung_smi: Path) -> None:
    # Bounded, or the test runs into its own timeout (the fake would answer in ten minutes)
    section = gpus.observe(1.0, str(hung_smi / "nvidia-smi"), use_nvml=False)
    assert "did not answer" in section.unavailable[0].reason


def test_nvidia_smi_hanging_through_the_server(hung_smi: Path, tmp_path: Path) -> None:
    from tests.conftest import start_server, stop_server

    env = {"PATH": f"{hung_smi}{os.pathsep}{os.environ['PATH']}", "CTXD_GPU_PROBE_TIMEOUT_S": "1"}
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        with srv.client() as c:
            c.put("/api/sessions/gpu", json={})
            c.post("/api/sessions/gpu/watches", json={"kind": "command", "name": "nvidia-smi",
                                                      "timeout_s": 1})  # fmt: skip
            r = c.post("/api/sessions/gpu/snapshots", json={"force": True})
            assert r.status_code == 201, r.text
            obs = r.json()["observations"]
            # The command watch runs the hung stand-in whatever the machine has; the GPU
            # collector only when NVML is absent (on a GPU machine NVML answers instead).
            (ran,) = obs["commands"]["items"]
            assert ran["timed_out"] and ran["exit_code"] is None, ran
            if obs["gpus"]["source"] != "nvml":
                assert "did not answer" in str(obs["gpus"]["unavailable"]), obs["gpus"]
            assert c.get("/health").status_code == 200
    finally:
        stop_server(srv)


# --- hostile bodies ---------------------------------------------------------------------------

HOSTILE = [
    "\x00",
    "a\x00b",
    "ü🙂\u202e\u200b\ufeff",
    "\ud7ff\ue000\U0010ffff",
    "x" * 200_000,
    "`" * 5000,
    "{{ 7*7 }}{% raw %}",
    "<script>alert(1)</script>",
    "../../../../etc/passwd",
    123,
    -1,
    1.5e308,
    True,
    None,
    [],
    {},
    ["a", {"b": None}],
]

BODIES = {
    "PUT /api/sessions/hostile": ["title", "objective", "quiet_after_s", "cwd", "schedule_every_s"],
    "POST /api/sessions/hostile/journal": ["kind", "text", "outcome", "status", "key"],
    "POST /api/sessions/hostile/watches": ["kind", "path", "match", "pid", "lines", "env"],
    "POST /api/sessions/hostile/snapshots": ["note", "force"],
    "POST /api/sessions/hostile/messages": ["text"],
}
DEFAULTS = {
    "POST /api/sessions/hostile/journal": {"kind": "note", "text": "t"},
    "POST /api/sessions/hostile/watches": {"kind": "log", "path": "/tmp/hostile.log"},
}


def test_hostile_values_in_every_field(client: httpx.Client) -> None:
    assert client.put("/api/sessions/hostile", json={}).status_code == 201
    seen: dict[int, int] = {}
    for route, fields in BODIES.items():
        method, path = route.split(" ")
        for field in fields:
            for value in HOSTILE:
                body = {**DEFAULTS.get(route, {}), field: value}
                r = client.request(method, path, json=body, timeout=60)
                seen[r.status_code] = seen.get(r.status_code, 0) + 1
                assert r.status_code < 500, (route, field, repr(value)[:80], r.text[:300])
                assert "Traceback" not in r.text
                if r.status_code >= 400:
                    assert r.json()["detail"], (route, field)
    assert client.post("/api/sessions/hostile/snapshots", json={"force": True}).status_code == 201
    assert client.get("/api/sessions/hostile/resume").status_code == 200
    page = client.get("/s/hostile")
    assert page.status_code == 200, page.text[:300]
    assert "<script>alert(1)</script>" not in page.text
    assert 400 in seen and (201 in seen or 200 in seen)


@pytest.mark.parametrize(
    "raw",
    [b"{not json", b"", b"[", b'{"text":', b"\xff\xfe\x00", b"null", b"[]", b'"text"', b"1e999999"],
)
def test_malformed_json(client: httpx.Client, raw: bytes) -> None:
    client.put("/api/sessions/malformed", json={})
    headers = {"Content-Type": "application/json"}
    for path in ("/api/sessions/malformed/journal", "/api/sessions/malformed/watches"):
        r = client.post(path, content=raw, headers=headers)
        assert 400 <= r.status_code < 500, (path, raw, r.text)
    r = client.put("/api/sessions/malformed", content=raw, headers=headers)
    assert r.status_code < 500, (raw, r.text)


def test_hostile_ids_and_queries(client: httpx.Client) -> None:
    for path in (
        "/api/sessions/" + "a" * 5000,
        "/api/sessions/%00",
        "/api/sessions/%F0%9F%99%82",
        "/api/sessions/x/snapshots/99999999999999999999999",
        "/api/sessions/x/diff?from=1&to=" + "9" * 400,
        "/api/sessions/x/resume?max_chars=-5",
        "/api/sessions?cwd=" + "%00" * 10,
    ):
        r = client.get(path)
        assert r.status_code < 500, (path, r.status_code, r.text[:200])


def test_exception_text_never_reaches_the_client(tmp_path: Path, caplog) -> None:
    # A handler that really raises, registered on the real app: the reply is a fixed text.
    from ctxd.http.app import create_app
    from litestar import get
    from litestar.testing import TestClient

    secret = "hf_" + "ExceptionLeak" * 3

    @get("/boom", sync_to_thread=False)
    def boom() -> None:
        raise RuntimeError(f"failed while holding {secret} at /srv/private/path.py")

    @get("/boom-os", sync_to_thread=False)
    def boom_os() -> None:
        raise OSError(errno.ENOTSUP, f"odd storage failure {secret}")

    app = create_app(Settings(data_dir=tmp_path / "data"))
    app.register(boom)
    app.register(boom_os)
    with TestClient(app, base_url="http://127.0.0.1") as c:
        for path in ("/boom", "/boom-os"):
            r = c.get(path)
            assert r.status_code == 500, (path, r.text)
            assert r.json()["detail"] == "internal error; see the ctxd log", r.text
            assert secret not in r.text and "Traceback" not in r.text and "private" not in r.text
    assert secret not in caplog.text


def test_null_text_on_update_is_400_and_the_entry_survives(client: httpx.Client) -> None:
    client.put("/api/sessions/nulls", json={})
    client.post("/api/sessions/nulls/journal", json={"kind": "note", "text": "kept"})
    r = client.patch("/api/sessions/nulls/journal/1", json={"outcome": None, "text": None})
    assert r.status_code == 400 and "text" in r.json()["detail"], r.text
    entries = client.get("/api/sessions/nulls/journal")
    assert entries.status_code == 200 and entries.json()[0]["text"] == "kept"
    r = client.get("/api/sessions/nulls/watches/99999999999999999999")
    assert r.status_code == 400, r.text
