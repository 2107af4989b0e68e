"""Access, round two: bodies nested deep enough to exhaust the parser get a 400, not a 500."""

import os
import subprocess
import sys

import httpx
import pytest
from ctxd.http import access

from tests.conftest import Server, free_port

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


def test_same_site_is_not_same_origin(server: Server, client: httpx.Client) -> None:
    """A page on another port of the same machine must not add watches: only ctxd's origin."""
    client.put("/api/sessions/o", json={"title": "o"})
    port = server.url.rsplit(":", 1)[1]
    other = "3000" if port != "3000" else "3001"
    watch = b'{"kind": "process", "name": "x"}'
    for origin, site in (
        (f"http://127.0.0.1:{other}", "same-site"),
        (f"http://localhost:{other}", "same-site"),
        (f"https://127.0.0.1:{port}", "same-site"),  # another scheme is another origin
        (f"http://localhost:{port}", "same-site"),  # another host name is another origin
    ):
        headers = {"Origin": origin, "Sec-Fetch-Site": site, "Content-Type": "text/plain"}
        r = client.post("/api/sessions/o/watches", content=watch, headers=headers)
        assert r.status_code == 403, (origin, r.status_code)
        assert client.post("/s/o/now", headers=headers).status_code == 403, origin
    r = client.post(
        "/api/sessions/o/watches", content=watch, headers={"Sec-Fetch-Site": "same-site"}
    )
    assert r.status_code == 403, "same-site without an Origin"
    own = {"Origin": server.url, "Sec-Fetch-Site": "same-origin", **JSON}
    assert client.post("/api/sessions/o/watches", content=watch, headers=own).status_code == 201
    assert client.get("/api/sessions/o", headers={"Sec-Fetch-Site": "none"}).status_code == 200


def test_token_strength_and_file_mode(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ctxd.settings import Settings

    assert access.token_problem(Settings(token=None)) is None
    assert "too weak" in (access.token_problem(Settings(token="a")) or "")
    assert "too weak" in (access.token_problem(Settings(token="aaaaaaaaaaaaaaaaaaaa")) or "")
    assert access.token_problem(Settings(token="s3cret-token-value")) is None
    path = tmp_path / "token"
    access.new_token_file(path)
    assert access.token_problem(Settings(token_file=path)) is None
    path.chmod(0o644)
    problem = access.token_problem(Settings(token_file=path)) or ""
    assert "mode 0644" in problem and "chmod 600" in problem and "\n" not in problem


def test_serve_refuses_bad_tokens_in_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    weak = tmp_path / "weak"
    weak.write_text("a\n")
    loose = tmp_path / "loose"
    access.new_token_file(loose)
    loose.chmod(0o644)
    empty = tmp_path / "empty"
    empty.write_text("")
    cases = (
        ({"CTXD_TOKEN": "a"}, "too weak"),
        ({"CTXD_TOKEN_FILE": str(loose)}, "chmod 600"),
        ({"CTXD_TOKEN_FILE": str(tmp_path / "missing")}, "cannot read token file"),
        ({"CTXD_TOKEN_FILE": str(empty)}, "is empty"),
    )
    for env, words in cases:
        cmd = [sys.executable, "-m", "ctxd", "serve", "--port", str(free_port())]
        cmd += ["--data-dir", str(tmp_path / "data")]
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=60, env={**os.environ, **env}
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"{env} started a server")
        said = (done.stdout + done.stderr).strip()
        assert done.returncode != 0 and words in said, (env, said[-500:])
        assert "Traceback" not in said and len(said.splitlines()) == 1, (env, said[-500:])
