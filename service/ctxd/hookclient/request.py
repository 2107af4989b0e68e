"""One HTTP/1.1 request over a plain socket: what a hook needs to reach ctxd, without the
import cost of http.client (it pulls in email and ssl: some 30 ms on every prompt and tool
call), nor that of `socket` (enum, selectors) and `urllib.parse` (re): the C socket module and
a URL read here. Standard library only; https, rare for a local service, goes through
http.client.
"""

import _socket
import time

LOOPBACK = {"127.0.0.1", "localhost", "::1"}  # a service on this machine

MAX_ANSWER_BYTES = 20_000_000


def request(
    url: str, method: str, path: str, body: bytes, headers: dict[str, str], timeout: float
) -> tuple[int, bytes]:
    """(status, body) of one request; OSError when nothing answers (ConnectionRefusedError:
    nobody listens; TimeoutError: it did not answer within `timeout`)."""
    scheme, host, port, base = split(url)
    target = base.rstrip("/") + path
    if scheme == "https":
        return _https(host, port, method, target, body, headers, timeout)
    name = f"[{host}]" if ":" in host else host  # an IPv6 literal is bracketed in Host
    lines = [
        f"{method} {target} HTTP/1.1",
        f"Host: {name}:{port or 80}",
        "Connection: close",
        f"Content-Length: {len(body)}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    deadline = time.monotonic() + timeout  # one budget for the whole answer, not per read
    sock = _connected(host, port or 80, timeout)
    try:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        received = _answer(sock, deadline)
    finally:
        sock.close()
    head, _, rest = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    fields = dict(line.lower().split(": ", 1) for line in header_lines if ": " in line)
    try:
        status = int(status_line.split(" ", 2)[1])
    except (IndexError, ValueError):
        raise ConnectionError(f"not an HTTP answer: {status_line[:80]!r}") from None
    if fields.get("transfer-encoding") == "chunked":
        rest = _unchunked(rest)
    elif (length := fields.get("content-length", "")).isdigit():
        rest = rest[: int(length)]
    return status, rest


def split(url: str) -> tuple[str, str, int | None, str]:
    """(scheme, host, port, path) of an http(s) URL, as urllib's urlsplit reads them (the
    host lowercased and unbracketed, None for no port or one that is not a number)."""
    scheme, _, rest = url.strip().partition("://")
    netloc, slash, path = rest.partition("/")
    netloc = netloc.rpartition("@")[2]
    if netloc.startswith("["):  # an IPv6 literal
        host, _, after = netloc[1:].partition("]")
        port = after[1:] if after.startswith(":") else ""
    else:
        host, _, port = netloc.partition(":")
    return (
        scheme.lower(),
        host.lower() or "127.0.0.1",
        int(port) if port.isdigit() else None,
        (slash + path.partition("?")[0].partition("#")[0]),
    )


def _connected(host: str, port: int, timeout: float) -> "_socket.socket":
    """A socket connected to the first address of `host` that answers (socket's
    create_connection, over the C module)."""
    error: OSError | None = None
    # the host as bytes: a str is encoded by the idna codec (re, unicodedata: some 5 ms)
    name = host.encode() if host.isascii() else host
    for family, kind, proto, _, address in _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error or OSError(f"{host}: no address to connect to")


def _answer(sock: "_socket.socket", deadline: float) -> bytes:
    """The answer's bytes: until the connection closes, or once Content-Length bytes of body
    arrived (a server may keep the connection open); TimeoutError past `deadline`."""
    data, wanted = bytearray(), None
    while len(data) <= MAX_ANSWER_BYTES:
        if wanted is None and (end := data.find(b"\r\n\r\n")) >= 0:
            wanted = end + 4 + _content_length(data[:end])
        if wanted is not None and len(data) >= wanted:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no complete answer in time")
        sock.settimeout(left)
        if not (chunk := sock.recv(262_144)):
            break
        data += chunk
    return bytes(data)


def _content_length(head: bytes | bytearray) -> int:
    """The head's Content-Length; a huge number (read to the close) when there is none."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return int(value.strip())
    return MAX_ANSWER_BYTES * 2


def _unchunked(data: bytes) -> bytes:
    out: list[bytes] = []
    at = 0
    while True:
        end = data.find(b"\r\n", at)
        size = int(data[at:end].split(b";")[0] or b"0", 16) if end >= 0 else 0
        if size == 0:
            return b"".join(out)
        out.append(data[end + 2 : end + 2 + size])
        at = end + 2 + size + 2


def _https(
    host: str, port: int | None, method: str, target: str, body: bytes,
    headers: dict[str, str], timeout: float,
) -> tuple[int, bytes]:  # fmt: skip
    from http.client import HTTPSConnection

    connection = HTTPSConnection(host, port, timeout=timeout)
    try:
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read(MAX_ANSWER_BYTES)
    finally:
        connection.close()
