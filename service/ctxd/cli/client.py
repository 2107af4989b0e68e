"""The one HTTP client of a running ctxd, for the CLI and the hooks (light: a hook imports it)."""

import re
from typing import Any

import httpx

from ctxd.hookclient import env


class Unreachable(Exception):
    """No answer from the service at all (not listening, refused, timed out)."""


class NotAnAddress(ValueError):
    """What was given for the service's address cannot be one."""


HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


def service_url(given: str) -> str:
    """The service's URL from a port (this machine's), `host`, `host:port` or an http(s) URL (a
    path is kept: a proxy may serve ctxd under one); `NotAnAddress` says in plain words why it
    cannot be one."""
    address = env.with_scheme(given)
    try:
        parsed = httpx.URL(address)
        port = parsed.port
    except (httpx.InvalidURL, ValueError) as exc:
        raise NotAnAddress(f"{given!r} is not an address ({exc}): {ADDRESS_FORMS}") from None
    if parsed.scheme not in ("http", "https"):
        raise NotAnAddress(f"{given!r}: ctxd answers http:// or https://, not {parsed.scheme}://")
    if not (HOST_NAME.match(parsed.host) or ":" in parsed.host):  # a name, an IPv4 or an IPv6
        raise NotAnAddress(f"{given!r} holds no valid host name: {ADDRESS_FORMS}")
    if parsed.host in ("http", "https"):  # `http//host`: the ':' left out
        raise NotAnAddress(f"{given!r} is not an address: {ADDRESS_FORMS}")
    if port is not None and not 1 <= port <= 65535:
        raise NotAnAddress(f"{given!r}: a port is 1 to 65535")
    return address.rstrip("/")


ADDRESS_FORMS = "give PORT, host:port or http://host:port, e.g. 127.0.0.1:8765"


class Client:
    """Calls a ctxd at `url`, with CTXD_TOKEN as the bearer token when it is set."""

    def __init__(self, url: str, timeout: float = 60, connect_timeout: float | None = None) -> None:
        token = env.token()
        self.url = url
        self.http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"} if token else {},
            timeout=httpx.Timeout(timeout, connect=connect_timeout or timeout),
        )

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The response whatever its status; `Unreachable` when none came."""
        try:
            return self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise Unreachable(
                f"cannot reach the service at {self.url} ({type(exc).__name__})"
            ) from None


def body(response: httpx.Response) -> Any:
    """The answer as JSON when it is JSON, else as text (a Markdown dump)."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()
    return response.text


def detail(response: httpx.Response) -> str:
    """What the service said went wrong, in one line."""
    try:
        said = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        said = response.text
    return str(said)
