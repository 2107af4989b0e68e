"""Bad input gets a clear 4xx or an `unavailable` section: never a 500, never a hang."""

import json
import logging.config  # noqa: F401  imported here: the child run as nobody cannot read the stdlib
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ctxd.http.app import create_app
from ctxd.settings import Settings
from litestar.testing import TestClient

from tests.conftest import NOBODY, Server, app_client, as_nobody


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    """In-process: what is checked here is the app's answers, not the socket."""
    with app_client(tmp_path / "data") as c:
        yield c


@pytest.fixture
def session(client: httpx.Client) -> str:
    assert client.put("/api/sessions/bad", json={"title": "bad input"}).status_code == 201
    return "/api/sessions/bad"


def test_unknown_session_is_404(client: httpx.Client):
    for method, path in (
        ("GET", "/api/sessions/nope"),
        ("GET", "/api/sessions/nope/watches"),
        ("POST", "/api/sessions/nope/snapshots"),
        ("GET", "/api/sessions/nope/snapshots/1"),
        ("GET", "/api/sessions/nope/resume"),
        ("POST", "/api/sessions/nope/heartbeat"),
    ):
        r = client.request(method, path)
        assert r.status_code == 404, (method, path, r.text)
        assert "nope" in r.json()["detail"]


def test_unknown_version_and_watch_are_404(client: httpx.Client, session: str):
    assert client.get(f"{session}/snapshots/7").status_code == 404
    assert client.delete(f"{session}/watches/99").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "gpu-magic", "path": "/x"}, "kind"),
        ({"kind": "process", "match": "(unclosed"}, "regular expression"),
        ({"kind": "process"}, "pid"),
        ({"kind": "process", "pid": -4}, "pid"),
        ({"kind": "log", "path": "/tmp/x", "lines": 10**9}, "lines"),
        ({"kind": "port", "port": 70000}, "port"),
        ({"kind": "log", "path": "/tmp/x", "surprise": 1}, "surprise"),
    ],
)
def test_invalid_watch_is_400_naming_the_field(client: httpx.Client, session: str, body, field):
    r = client.post(f"{session}/watches", json=body)
    assert r.status_code == 400, r.text
    assert field in r.json()["detail"]


def test_invalid_session_bodies_and_ids(client: httpx.Client):
    r = client.put("/api/sessions/ok", json={"quiet_after_s": "soon"})
    assert r.status_code == 400 and "quiet_after_s" in r.json()["detail"]
    assert client.put("/api/sessions/Bad..ID!", json={}).status_code == 400
    assert client.put("/api/sessions/ok", content=b"{not json").status_code == 400
    assert client.put("/api/sessions/ok", json={}).status_code == 201
    r = client.post("/api/sessions/ok/journal", json={"kind": "fact", "text": "x"})
    assert r.status_code == 400 and "key" in r.json()["detail"], r.text
    r = client.post("/api/sessions/nobody/journal", json={"kind": "note", "text": "x"})
    assert r.status_code == 404, r.text


def test_oversized_body_is_413(client: httpx.Client, session: str):
    r = client.post(f"{session}/journal", json={"kind": "note", "text": "x" * 2_000_000})
    assert r.status_code == 413, r.text


def test_unobservable_targets_become_unavailable_sections(
    client: httpx.Client, session: str, tmp_path
):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    unused_pid = 4_000_000
    for spec in (
        {"kind": "log", "path": str(tmp_path / "missing.log")},
        {"kind": "log", "path": str(folder)},
        {"kind": "log", "path": str(fifo)},
        {"kind": "artifact", "path": str(tmp_path / "missing.whl")},
        {"kind": "process", "pid": unused_pid},
        {"kind": "process", "match": "no-such-process-[0-9]{40}"},
    ):
        assert client.post(f"{session}/watches", json=spec).status_code == 201
    r = client.post(f"{session}/snapshots", timeout=20)
    assert r.status_code == 201, r.text
    obs = r.json()["observations"]
    log_reasons = " / ".join(u["reason"] for u in obs["logs"]["unavailable"])
    assert len(obs["logs"]["unavailable"]) == 3, log_reasons
    assert "directory" in log_reasons and "fifo" in log_reasons.lower()
    assert len(obs["artifacts"]["unavailable"]) == 1
    assert len(obs["processes"]["unavailable"]) == 2
    markdown = client.get(f"{session}/snapshots/1/markdown").text
    assert markdown.count("unavailable:") >= 6


def test_unreadable_log_is_unavailable(open_dir: Path):
    # Root reads a chmod 000 file anyway: as root, the app runs in a child that became nobody
    # (in-process: this Python lives where nobody may not execute it).
    secret = open_dir / "secret.log"
    secret.write_text("hidden\n")
    secret.chmod(0)
    data = open_dir / "data"
    data.mkdir()
    if os.geteuid() == 0:
        os.chown(data, NOBODY, NOBODY)

    def observe() -> dict:
        app = create_app(Settings(data_dir=data, trigger_interval_s=3600))
        with TestClient(app, base_url="http://127.0.0.1") as c:
            c.put("/api/sessions/perm", json={})
            r = c.post("/api/sessions/perm/watches", json={"kind": "log", "path": str(secret)})
            assert r.status_code == 201, r.text
            return c.post("/api/sessions/perm/snapshots").json()["observations"]

    obs = as_nobody(observe)
    (unavailable,) = obs["logs"]["unavailable"]
    assert unavailable["reason"] == "permission denied", unavailable
    assert "hidden" not in json.dumps(obs)


def test_errors_never_leak_a_stack_trace(server: Server):
    with server.client() as client:
        client.put("/api/sessions/bad", json={})
        r = client.get("/api/sessions/bad/diff", params={"from": "one", "to": 2})
    assert r.status_code == 400
    assert "Traceback" not in r.text
    assert "Traceback" not in server.log()
