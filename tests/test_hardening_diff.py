"""A diff asked the wrong way round is refused with a reason, not answered reversed."""

import httpx


def test_diff_from_newer_to_older_is_400(client: httpx.Client) -> None:
    assert client.put("/api/sessions/d", json={}).status_code == 201
    for _ in range(2):
        assert client.post("/api/sessions/d/snapshots", json={"force": True}).status_code == 201
    r = client.get("/api/sessions/d/diff", params={"from": 2, "to": 1})
    assert r.status_code == 400, r.text
    assert "from must be older than to" in r.json()["detail"]
    assert client.get("/api/sessions/d/diff", params={"from": 1, "to": 2}).status_code == 200
    assert client.get("/api/sessions/d/diff", params={"from": 2, "to": 2}).status_code == 200
