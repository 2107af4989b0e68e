"""Who may talk to ctxd: Host allowlist, Origin check, bearer token or the caller's own account,
body size and rate limit.

One ASGI middleware in front of every route (API, pages, /mcp): ctxd serves process command
lines and logs, so a web page the user happens to open must not be able to read them, through
DNS rebinding (Host check) or a cross-site request (Origin check). A token, when configured,
is required everywhere and compared in constant time; without one, a loopback caller must be
ctxd's own account (or root, or one listed): the kernel's socket table says whose (caller.py).
"""

import hmac
import json
import math
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from litestar.types import ASGIApp, Receive, ReceiveMessage, Scope, Send, WebSocketCloseEvent

from ctxd.http import caller
from ctxd.settings import Settings

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
WILDCARD = frozenset({"0.0.0.0", "::", ""})
# Buckets of clients not seen for this long are dropped, so the table stays small.
_IDLE_S = 600.0
# The JSON decoder and validators recurse per level: 100,000 `[` end in RecursionError (a 500).
# ctxd's own bodies nest a handful of levels.
MAX_JSON_DEPTH = 64
_JSON_TOKENS = re.compile(rb'"(?:[^"\\]++|\\.)*+"?|[\[\]{}]')


def too_deep(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when `body` opens more than `limit` arrays or objects at once (strings skipped)."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    depth = 0
    for m in _JSON_TOKENS.finditer(body):
        c = m[0][0]
        if c in b"[{":
            depth += 1
            if depth > limit:
                return True
        elif c in b"]}":
            depth -= 1
    return False


def new_token_file(path: Path) -> str:
    """Write a fresh random token to `path`, mode 0600 from the first byte, and return it."""
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return token


# 16 characters of `ctxd token --new`'s alphabet are 96 bits; `CTXD_TOKEN=a` is not a token.
TOKEN_MIN_CHARS = 16
TOKEN_MIN_DISTINCT = 8


def token_problem(settings: Settings) -> str | None:
    """One line saying why the configured token must not be used, or None when it may."""
    token = settings.token
    if token is None:
        return None
    if len(token) < TOKEN_MIN_CHARS or len(set(token)) < TOKEN_MIN_DISTINCT:
        return (
            f"the token is too weak: use at least {TOKEN_MIN_CHARS} characters, "
            f"{TOKEN_MIN_DISTINCT} of them different (`ctxd token --new` writes one)"
        )
    path = settings.token_file
    if path is not None and token == _file_token(path):
        mode = os.stat(path).st_mode & 0o777
        if mode & 0o077:
            return f"token file {path} is mode {mode:04o}, readable by others: chmod 600 {path}"
    return None


def _file_token(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def allowed_hosts(settings: Settings) -> frozenset[str] | None:
    """Host header names accepted; None accepts any (configured with "*")."""
    extra = {h.lower() for h in settings.allowed_hosts}
    if "*" in extra:
        return None
    names = set(LOOPBACK_NAMES) | extra | {settings.host.lower()}
    if settings.host in WILDCARD:
        # Listening everywhere (token required): the machine's own names are expected.
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return frozenset(names)


def _host_name(value: str) -> str:
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8765
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class _Buckets:
    """Token buckets per client address: `rate` per second, up to `burst` at once, on `clock`
    (seconds; a test passes its own to step time instead of waiting for it)."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate, self.burst, self.clock = rate, float(burst), clock
        self._state: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, client: str) -> float:
        """0 when the request may pass, else the seconds until it could."""
        now = self.clock()
        with self._lock:
            if len(self._state) > 10_000:
                self._state = {k: v for k, v in self._state.items() if now - v[1] < _IDLE_S}
            tokens, last = self._state.get(client, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens < 1:
                self._state[client] = (tokens, now)
                return (1 - tokens) / self.rate
            self._state[client] = (tokens - 1, now)
            return 0.0


class AccessMiddleware:
    """Refuses, before any handler runs, what ctxd must never answer."""

    def __init__(self, app: ASGIApp, settings: Settings, buckets: _Buckets) -> None:
        self.app = app
        self.hosts = allowed_hosts(settings)
        self.token = f"Bearer {settings.token}".encode() if settings.token else None
        # who may call over loopback without a token: ctxd's own account, root, the listed
        self.uids = frozenset({os.geteuid(), 0, *settings.allowed_uids})
        self.max_body = settings.limits.max_body_bytes
        self.buckets = buckets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = self.check(scope)
        if refusal is None and scope["type"] == "http":
            refusal, receive = await self._read_body(receive)
        if refusal is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await _reply(send, *refusal)
        else:
            close: WebSocketCloseEvent = {"type": "websocket.close", "code": 1008, "reason": None}
            await send(close)

    def check(self, scope: Scope) -> tuple[int, str, dict[str, str]] | None:
        """(status, detail, headers) of a refusal, or None to let the request through."""
        headers: dict[str, str] = {}
        for key, value in scope.get("headers") or []:
            headers.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
        host = _host_name(headers.get("host", ""))
        if self.hosts is not None and host not in self.hosts:
            return 403, f"Host {host!r} is not allowed; add it to CTXD_ALLOWED_HOSTS", {}
        origin = headers.get("origin")
        if origin is not None and not self._own_origin(origin, headers.get("host", ""), scope):
            return 403, "cross-origin requests are refused (same-site is not same-origin)", {}
        # Another port of the same machine is "same-site": a page there is not ctxd's.
        if headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            return 403, "requests from another site or origin are refused", {}
        if self.token is not None:
            given = headers.get("authorization", "").encode("latin-1")
            if not hmac.compare_digest(given, self.token):
                detail = "a bearer token is required (Authorization: Bearer $CTXD_TOKEN)"
                return 401, detail, {"www-authenticate": "Bearer"}
        elif (refused := self._other_account(scope)) is not None:
            return 403, refused, {}
        client = (scope.get("client") or ("?", 0))[0]
        wait = self.buckets.take(str(client))
        if wait:
            retry = {"retry-after": str(max(1, math.ceil(wait)))}
            return 429, "too many requests; slow down", retry
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_body:
            return 413, f"request body larger than {self.max_body} bytes", {}
        return None

    def _other_account(self, scope: Scope) -> str | None:
        """Why a loopback caller is refused: its socket belongs to another account (the
        kernel's socket table says whose). None: ctxd's own account, root, or one allowed."""
        client, server = scope.get("client"), scope.get("server")
        if not client or not server or not caller.is_loopback(str(client[0])):
            return None
        uid = caller.owner((str(client[0]), int(client[1])), (str(server[0]), int(server[1] or 0)))
        if uid in self.uids:
            return None
        who = "an account the kernel does not name" if uid is None else f"uid {uid}"
        return (
            f"this ctxd serves uid {os.geteuid()}; {who} is refused (run your own ctxd, or add "
            "the uid to CTXD_ALLOWED_UIDS, or use a token)"
        )

    async def _read_body(self, receive: Receive) -> tuple[tuple[int, str, dict] | None, Receive]:
        """Read the whole body (it is bounded) to refuse one nested too deep; replay it."""
        messages: list[ReceiveMessage] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_body:
                return (413, f"request body larger than {self.max_body} bytes", {}), receive
            if not message.get("more_body", False):
                break
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        if too_deep(body):
            detail = f"request body is nested deeper than {MAX_JSON_DEPTH} levels"
            return (400, detail, {}), receive

        async def replay() -> ReceiveMessage:
            return messages.pop(0) if messages else await receive()

        return None, replay

    def _own_origin(self, origin: str, host: str, scope: Scope) -> bool:
        """True only for ctxd's own origin: the scheme it is served on and the exact host and
        port the request was sent to (which the Host check already allowed)."""
        try:
            parts = urlsplit(origin)
            name, port = (parts.hostname or "").lower(), parts.port
            own = urlsplit(f"//{host}")
            own_name, own_port = (own.hostname or "").lower(), own.port
        except ValueError:
            return False
        scheme = str(scope.get("scheme", "http"))
        if parts.scheme != scheme or not name:
            return False  # "null" (sandboxed frames, file://) is never ours
        default = 443 if scheme == "https" else 80
        if (name, port or default) != (own_name, own_port or default):
            return False
        bracketed = f"[{name}]" if ":" in name else name
        return self.hosts is None or bracketed in self.hosts or name in self.hosts


async def _reply(send: Send, status: int, detail: str, extra: dict[str, str]) -> None:
    body = json.dumps({"status_code": status, "detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    headers += [(k.encode(), v.encode()) for k, v in extra.items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def middleware(settings: Settings) -> Callable[[ASGIApp], ASGIApp]:
    """The factory Litestar's `middleware=[...]` takes; it wraps each route, so the rate
    limit's buckets are made here, once, and shared by every route."""
    buckets = _Buckets(settings.rate_per_s, settings.rate_burst)

    def wrap(app: ASGIApp) -> ASGIApp:
        return AccessMiddleware(app, settings, buckets)

    return wrap
