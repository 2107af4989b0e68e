import http.server
import os
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from ctxd.collectors import CollectContext, ports
from ctxd.models import PortWatch, ProcessWatch, Watch
from ctxd.settings import Settings


def watch(wid: int, spec: PortWatch | ProcessWatch) -> Watch:
    return Watch(id=wid, session="t", created_at=datetime.now(UTC), spec=spec)


def context() -> CollectContext:
    return CollectContext(settings=Settings())


def closed_port() -> int:
    """A port that was free a moment ago; nothing listens on it once the socket is closed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 503)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass  # keep pytest output clean


@pytest.fixture
def server() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_listening_and_closed_ports(listener) -> None:
    closed = closed_port()
    watches = [watch(1, PortWatch(port=listener)), watch(2, PortWatch(port=closed))]
    section = ports.collect(watches, context())
    state = {row.port: (row.watch_id, row.listening) for row in section.items}
    assert state == {listener: (1, True), closed: (2, False)}
    assert section.unavailable == []


def test_expected_ports_of_process_watches(listener) -> None:
    closed = closed_port()
    spec = ProcessWatch(match="sglang", expect_ports=[listener, closed])
    watches = [watch(7, spec), watch(8, PortWatch(port=listener))]
    section = ports.collect(watches, context())
    rows = {row.port: row for row in section.items}
    assert len(section.items) == 2
    assert rows[listener].expected_by == 7 and rows[listener].watch_id == 8
    assert rows[listener].listening
    assert rows[closed].expected_by == 7 and rows[closed].watch_id is None
    assert not rows[closed].listening


def test_health_url_status(server) -> None:
    good = PortWatch(port=server, url=f"http://127.0.0.1:{server}/health")
    section = ports.collect([watch(1, good)], context())
    row = section.items[0]
    assert row.listening and row.health_status == 200 and row.health_error is None


def test_unreachable_health_url_is_an_error() -> None:
    port = closed_port()
    spec = PortWatch(port=port, url=f"http://127.0.0.1:{port}/health")
    row = ports.collect([watch(1, spec)], context()).items[0]
    assert not row.listening
    assert row.health_status is None
    assert row.health_error and "connect" in row.health_error


def test_ports_are_checked_concurrently(monkeypatch) -> None:
    # Every check waits for all ten at a barrier: done one after another, none would pass it.
    barrier = threading.Barrier(10, timeout=5)

    def meet(host: str, port: int) -> bool:
        barrier.wait()
        return False

    monkeypatch.setattr(ports, "is_listening", meet)
    specs = [PortWatch(port=9000 + i) for i in range(10)]
    section = ports.collect([watch(i, s) for i, s in enumerate(specs)], context())
    assert section.unavailable == []
    assert [row.listening for row in section.items] == [False] * 10


def test_unresolvable_host_is_unavailable() -> None:
    spec = PortWatch(host="no-such-host.invalid", port=80)
    section = ports.collect([watch(3, spec)], context())
    assert section.items == []
    assert section.unavailable[0].watch_id == 3
    assert section.unavailable[0].target == "no-such-host.invalid:80"


def test_no_port_watches() -> None:
    assert ports.collect([], context()).items == []


class Body(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(503)
        self.end_headers()
        self.wfile.write(b'{"status": "loading", "api_key": "sk-test-0123456789abcdefghij"}' * 50)

    def log_message(self, *args: object) -> None:
        pass


def test_health_latency_and_redacted_short_body() -> None:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Body)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        port = int(httpd.server_address[1])
        spec = PortWatch(port=port, url=f"http://localhost:{port}/health")
        row = ports.collect([watch(1, spec)], context()).items[0]
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert row.health_status == 503 and row.health_latency_ms is not None
    assert row.health_body and len(row.health_body) <= ports.BODY_CHARS
    assert "loading" in row.health_body and "0123456789abcdefghij" not in row.health_body


def test_remote_health_url_is_refused_unless_allowed() -> None:
    spec = PortWatch(port=closed_port(), url="http://192.0.2.1:8000/health")
    row = ports.collect([watch(1, spec)], context()).items[0]
    assert row.health_error and row.health_error.startswith("refused: not a loopback URL")
    assert not ports.is_loopback("http://example.com/") and ports.is_loopback("http://[::1]:1/")


def test_owner_is_the_process_holding_the_socket(listener) -> None:
    row = ports.collect([watch(1, PortWatch(port=listener))], context()).items[0]
    assert row.listening and row.owner_pid == os.getpid()
    closed = ports.collect([watch(1, PortWatch(port=closed_port()))], context()).items[0]
    assert closed.owner_pid is None


def test_a_hung_server_that_never_accepts_stays_listening() -> None:
    """Checking must not fill the backlog of a server that listens but never accepts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = int(sock.getsockname()[1])
        watches = [watch(1, PortWatch(port=port))]
        for _ in range(20):
            (row,) = ports.collect(watches, context()).items
            assert row.listening


def test_a_health_url_with_credentials_is_that_watch_line_only(
    listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One bad port watch (a health URL with user:pass@) must not cost the others (issue 18)."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = int(other.getsockname()[1])
        bad = PortWatch(port=port, url=f"http://user:pass@127.0.0.1:{port}/health")
        real_probe = ports.probe_health

        def probe(url: str, timeout: float = 1.0):  # issue 18: the probe raised on userinfo
            if "@" in url:
                raise ValueError(f"cannot probe {url}")
            return real_probe(url, timeout)

        monkeypatch.setattr(ports, "probe_health", probe)
        section = ports.collect([watch(1, bad), watch(2, PortWatch(port=listener))], context())
    assert [(p.port, p.listening) for p in section.items] == [(listener, True)]
    assert [(u.watch_id, u.target) for u in section.unavailable] == [(1, f"127.0.0.1:{port}")]
    assert "ValueError" in section.unavailable[0].reason
    assert "pass" not in section.model_dump_json()


def test_listening_sockets_from_netlink_match_proc_net_tcp() -> None:
    """sock_diag (the fast path) and /proc/net/tcp* (the fallback) list the same listeners,
    a fresh IPv4 and IPv6 listener included, each by its socket inode; a connected socket
    and a bound one that does not listen are in neither."""
    from pathlib import Path

    from ctxd.collectors.proc import procfs

    opened = []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        sock = socket.socket(family)
        try:
            sock.bind((host, 0))
        except OSError:
            sock.close()
            continue  # no IPv6 on this machine
        sock.listen()
        opened.append(sock)
    quiet = socket.socket()
    quiet.bind(("127.0.0.1", 0))
    try:
        fast = procfs.listening_inodes()
        # a path other than /proc itself takes the file reading path
        slow = procfs.listening_inodes(Path("/proc/self/.."))
        for sock in opened:  # other sockets of the machine may come and go meanwhile
            inode = os.fstat(sock.fileno()).st_ino
            assert fast[inode] == slow[inode] == sock.getsockname()[1]
        assert os.fstat(quiet.fileno()).st_ino not in fast
        assert os.fstat(quiet.fileno()).st_ino not in slow
    finally:
        for sock in [*opened, quiet]:
            sock.close()


def test_a_port_row_says_the_address_the_server_is_bound_to() -> None:
    """A server bound to another address than the watch names (here 127.0.0.2, as 0.0.0.0
    would be, on loopback only) is shown at the address it listens on, from the kernel's
    LISTEN table, by both of its readers (sock_diag and /proc/net/tcp)."""
    from pathlib import Path

    from ctxd.collectors.proc import procfs

    with socket.socket() as sock:
        sock.bind(("127.0.0.2", 0))
        sock.listen()
        port = int(sock.getsockname()[1])
        inode = os.fstat(sock.fileno()).st_ino
        assert procfs.listening_inodes().bound[inode] == "127.0.0.2"
        assert procfs.listening_inodes(Path("/proc/self/..")).bound[inode] == "127.0.0.2"
        (row,) = ports.collect([watch(1, PortWatch(port=port))], context()).items
    assert row.listening and row.host == "127.0.0.1" and row.bound == "127.0.0.2", row
