"""Access: loopback by default, a token on every route, Host and Origin checks, rate and size."""

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ctxd.http import access
from ctxd.settings import Settings

from tests.conftest import Server, StepClock, free_port, start_server, stop_server, wait_until

TOKEN = "test-token-0123456789abcdef"
SERVE = [sys.executable, "-m", "ctxd", "serve"]
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Server]:
    """A server that wants a token: polled with it, as start_server polls without one."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "ctxd.log"
    env = {**os.environ, "CTXD_TOKEN": TOKEN}
    with open(log_path, "ab") as out:
        process = subprocess.Popen(
            [*SERVE, "--port", str(port), "--data-dir", str(tmp_path / "data")],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    srv = Server(url, tmp_path / "data", process, log_path)

    def answers() -> bool:
        assert process.poll() is None, log_path.read_text()
        try:
            return httpx.get(f"{url}/health", headers=_auth(), timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(answers, "the guarded server to answer /health")
        yield srv
    finally:
        stop_server(srv)


def _auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_default_bind_is_loopback() -> None:
    assert Settings().host == "127.0.0.1"


def test_serve_refuses_a_public_bind_without_a_token(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CTXD_TOKEN", "CTXD_TOKEN_FILE")}
    done = subprocess.run(
        [*SERVE, "--host", "0.0.0.0", "--port", "0", "--data-dir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "token" in done.stderr.lower()


def test_token_required_on_every_route(guarded: Server) -> None:
    paths = ["/health", "/api/sessions", "/", "/schema/openapi.json", "/mcp"]
    with httpx.Client(base_url=guarded.url, timeout=30) as c:
        for path in paths:
            r = c.get(path)
            assert r.status_code == 401, (path, r.status_code)
            assert r.headers["www-authenticate"] == "Bearer"
            assert "bearer token" in r.json()["detail"]
            assert c.get(path, headers=_auth("wrong" + TOKEN)).status_code == 401
            assert c.get(path, headers={"Authorization": TOKEN}).status_code == 401
        assert c.put("/api/sessions/t", json={}).status_code == 401
        ok = c.put("/api/sessions/t", json={}, headers=_auth())
        assert ok.status_code == 201, ok.text
        assert c.get("/health", headers=_auth()).status_code == 200
        assert c.get("/", headers=_auth()).status_code == 200


def _scope(authorization: bytes | None) -> dict:
    headers = [(b"host", b"127.0.0.1")]
    if authorization is not None:
        headers.append((b"authorization", authorization))
    return {"type": "http", "headers": headers, "client": ("127.0.0.1", 1)}


def test_only_the_exact_token_passes() -> None:
    # Timing cannot be asserted reliably on a shared machine; what can is that every near miss
    # (a prefix, an extension, one character off, bytes that are not ASCII) is refused alike.
    middleware = access.AccessMiddleware(None, Settings(token=TOKEN), access._Buckets(1e6, 10**6))
    exact = f"Bearer {TOKEN}".encode()
    assert middleware.check(_scope(exact)) is None
    near = [exact[:-1], exact + b"0", exact[:-1] + b"X", exact.lower(), b"", b"Bearer ",
            TOKEN.encode(), exact.replace(b"Bearer", b"bearer"),
            b"Bearer \xff\xfe" + exact[9:]]  # fmt: skip
    for given in [*near, None]:
        refusal = middleware.check(_scope(given))
        assert refusal is not None and refusal[0] == 401, given


def test_token_file_is_0600_and_read_by_settings(tmp_path: Path) -> None:
    path = tmp_path / "data" / "token"
    token = access.new_token_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(token) >= 32
    assert Settings(token_file=path).token == token
    assert Settings(token="explicit", token_file=path).token == "explicit"
    assert access.new_token_file(path) != token, "a new token each time"
    assert not list(path.parent.glob(".token*")), "no temp file left"


def test_missing_or_empty_token_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read token file"):
        Settings(token_file=tmp_path / "nope")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        Settings(token_file=tmp_path / "empty")


def test_host_header_allowlist(server: Server) -> None:
    with server.client() as c:
        for host in ("evil.example", "attacker.com:8765", "127.0.0.1.nip.io"):
            r = c.get("/health", headers={"Host": host})
            assert r.status_code == 403, host
            assert "CTXD_ALLOWED_HOSTS" in r.json()["detail"]
        for host in ("127.0.0.1", "localhost:1234", "[::1]:8765"):
            assert c.get("/health", headers={"Host": host}).status_code == 200, host


def test_cross_site_requests_are_refused_and_no_cors(server: Server) -> None:
    with server.client() as c:
        for origin in ("http://evil.example", "null", "https://127.0.0.1.evil.example"):
            r = c.post("/api/sessions/x/heartbeat", headers={"Origin": origin})
            assert r.status_code == 403, origin
        r = c.get("/health", headers={"Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 403
        same = c.get("/health", headers={"Origin": server.url})
        assert same.status_code == 200
        preflight = c.options(
            "/api/sessions",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "PUT"},
        )
        assert preflight.status_code == 403, "a foreign Origin is refused before routing"
        assert "access-control-allow-origin" not in {k.lower() for k in same.headers}
        assert "access-control-allow-origin" not in {k.lower() for k in preflight.headers}


def test_rate_limit(tmp_path: Path) -> None:
    # A token per 100 s: however slow the machine, none comes back during the test, so the
    # burst passes and every request after it is refused, in this order.
    env = {"CTXD_RATE_PER_S": "0.01", "CTXD_RATE_BURST": "5"}
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        # From an address of its own: start_server's /health polls spent 127.0.0.1's tokens.
        own = httpx.HTTPTransport(local_address="127.0.0.2")
        with httpx.Client(base_url=srv.url, timeout=30, transport=own) as c:
            codes = [c.get("/health").status_code for _ in range(20)]
            assert codes == [200] * 5 + [429] * 15, codes
            limited = c.get("/health")
            assert limited.status_code == 429
            assert 1 <= int(limited.headers["retry-after"]) <= 100
            assert "slow down" in limited.json()["detail"]
    finally:
        stop_server(srv)


def test_bucket_refuses_past_its_burst_then_refills() -> None:
    clock = StepClock()
    buckets = access._Buckets(rate=4.0, burst=2, clock=clock)
    assert buckets.take("a") == 0 and buckets.take("a") == 0
    wait = buckets.take("a")
    assert wait == 1 / 4, "refused, told to wait one token's time"
    assert buckets.take("b") == 0, "per client"
    clock.advance(wait / 2)
    assert buckets.take("a") == pytest.approx(wait / 2), "half the wait: refused, half left"
    clock.advance(wait / 2)
    assert buckets.take("a") == 0, "refilled after the wait it named"
    assert buckets.take("a") > 0


def test_an_idle_bucket_holds_no_more_than_its_burst() -> None:
    clock = StepClock()
    buckets = access._Buckets(rate=5.0, burst=2, clock=clock)
    assert buckets.take("a") == 0 and buckets.take("a") == 0
    clock.advance(1.0)  # five tokens' worth of time: the bucket still holds two
    assert buckets.take("a") == 0 and buckets.take("a") == 0
    assert buckets.take("a") == pytest.approx(1 / 5)


def test_oversized_bodies_with_and_without_length(server: Server) -> None:
    big = b'{"kind":"note","text":"' + b"x" * 1_200_000 + b'"}'
    with server.client() as c:
        c.put("/api/sessions/big", json={})
        r = c.post("/api/sessions/big/journal", content=big, headers=JSON)
        assert r.status_code == 413, r.text

        def chunks() -> Iterator[bytes]:
            for i in range(0, len(big), 65536):
                yield big[i : i + 65536]

        r = c.post("/api/sessions/big/journal", content=chunks(), headers=JSON)
        assert r.request.headers.get("transfer-encoding") == "chunked"
        assert r.status_code == 413, r.text
        assert c.get("/health").status_code == 200


def test_raw_socket_lies_about_length(server: Server) -> None:
    # Announces a small body, then sends more: the server must neither hang nor 500.
    host, port = server.url.removeprefix("http://").split(":")
    body = b'{"kind":"note","text":"' + b"y" * 4000 + b'"}'
    request = (
        b"POST /api/sessions/big/journal HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 10\r\nConnection: close\r\n\r\n" + body
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 4"), reply[:100]
