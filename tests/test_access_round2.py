"""Access, round two: bodies nested deep enough to exhaust the parser get a 400, not a 500."""

import httpx

from service import access
from tests.conftest import Server

JSON = {"Content-Type": "application/json"}


def test_deeply_nested_body_is_a_400(server: Server, client: httpx.Client) -> None:
    client.put("/api/sessions/deep", json={"title": "deep"})
    for body in (b"[" * 100_000, b'{"a":' * 50_000, b"[" * 65 + b"]" * 65):
        r = client.post("/api/sessions/deep/watches", content=body, headers=JSON)
        assert r.status_code == 400, (r.status_code, r.text[:300])
        assert "nested deeper than" in r.json()["detail"]
    assert "RecursionError" not in server.log()


def test_ordinary_nesting_still_reaches_validation(client: httpx.Client) -> None:
    client.put("/api/sessions/deep", json={"title": "deep"})
    r = client.post("/api/sessions/deep/watches", json={"kind": "log", "path": [[["x"]]]})
    assert r.status_code == 400
    assert "nested deeper" not in r.text
    r = client.post("/api/sessions/deep/watches", json={"kind": "process", "name": "[[[[ ]]]]"})
    assert r.status_code == 201, r.text


def test_depth_ignores_brackets_inside_strings() -> None:
    assert not access.too_deep(b'{"a": "' + b"[" * 1000 + b'"}', 64)
    assert not access.too_deep(b'{"a": "\\"' + b"[" * 1000 + b'"}', 64)
    assert access.too_deep(b"[" * 65, 64)
    assert not access.too_deep(b"[" * 64 + b"]" * 64, 64)
