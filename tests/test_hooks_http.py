"""The hooks' one-request HTTP client (ctxd.hookclient.request) against real sockets: a real
ctxd, a chunked answer, an answer that is not HTTP, nobody listening, a mute listener."""

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from ctxd.hookclient import request
from ctxd.http import access

from tests.conftest import Server


@contextmanager
def answering(
    reply: bytes, mute: bool = False, drip_s: float = 0.0, hold: bool = False,
    host: str = "127.0.0.1",
) -> Iterator[tuple[str, Callable[[], bytes]]]:  # fmt: skip
    """A listener that reads one request, then sends `reply` (a byte every `drip_s` when set)
    and closes. `mute`: sends nothing until the block ends; `hold`: keeps the connection open
    after the reply until the block ends. What the client does meanwhile is then told by its
    own answer, not by a clock."""
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listener.bind((host, 0))
    listener.listen(1)
    got: list[bytes] = []
    done = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            got.append(data)
            if mute:
                done.wait(120)
                return
            try:
                for at in range(0, len(reply), 1 if drip_s else len(reply)):
                    conn.sendall(reply[at : at + (1 if drip_s else len(reply))])
                    if done.wait(drip_s):
                        return
            except OSError:
                return  # the client gave up
            if hold:
                done.wait(120)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        name = f"[{host}]" if ":" in host else host
        yield f"http://{name}:{listener.getsockname()[1]}", lambda: got[0]
    finally:
        done.set()
        listener.close()


def test_a_real_ctxd_answers(server: Server):
    status, body = request.request(server.url, "GET", "/health", b"", {}, timeout=10)
    assert status == 200 and b'"status":"ok"' in body.replace(b" ", b"")
    status, body = request.request(
        server.url, "POST", "/api/hooks/claude", b"{}",
        {"content-type": "application/json"}, timeout=10,
    )  # fmt: skip
    assert status == 400 and body.startswith(b"{")


def test_chunked_and_length_bounded_answers():
    chunked = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n"
    )
    with answering(chunked) as (url, request_seen):
        assert request.request(url, "GET", "/x", b"", {}, timeout=5) == (200, b"hello, world")
        assert request_seen().startswith(b"GET /x HTTP/1.1\r\n")
    with answering(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nokEXTRA") as (url, _):
        assert request.request(url + "/base/", "POST", "/y", b"{}", {}, 5) == (201, b"ok")


def test_what_is_not_an_answer_is_an_oserror():
    not_http = answering(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
    with not_http as (url, _), pytest.raises(ConnectionError, match="not an HTTP answer"):
        request.request(url, "GET", "/", b"", {}, timeout=5)
    mute = answering(b"HTTP/1.1 200 OK\r\n\r\n", mute=True)
    with mute as (url, _), pytest.raises(TimeoutError):
        request.request(url, "GET", "/", b"", {}, timeout=0.5)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(ConnectionRefusedError):
        request.request(closed, "GET", "/", b"", {}, timeout=5)


def test_an_ipv6_literal_is_bracketed_in_host_and_ctxd_lets_it_in():
    with answering(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n", host="::1") as (
        url,
        request_seen,
    ):
        assert request.request(url, "GET", "/", b"", {}, timeout=5) == (204, b"")
        port = url.rsplit(":", 1)[1]
        assert f"\r\nHost: [::1]:{port}\r\n".encode() in request_seen()
    assert access._host_name(f"[::1]:{port}") in access.LOOPBACK_NAMES


def test_the_answer_ends_at_its_content_length_though_the_connection_stays_open():
    # The listener keeps the connection open until the request has returned: a client that
    # read on to the connection's end would get no answer, only its timeout.
    reply = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"
    with answering(reply, hold=True) as (url, _):
        assert request.request(url, "GET", "/", b"", {}, timeout=30) == (200, b"hello")


def test_a_slow_drip_answer_is_cut_at_the_one_overall_timeout():
    # A byte each 0.1 s for a minute: every read is well within the 1 s timeout, so only a
    # timeout over the whole request can end it before the answer is complete.
    reply = b"HTTP/1.1 200 OK\r\ncontent-length: 600\r\n\r\n" + b"x" * 600
    with answering(reply, drip_s=0.1) as (url, _), pytest.raises(TimeoutError):
        request.request(url, "GET", "/", b"", {}, timeout=1)
