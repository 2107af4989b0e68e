"""The one HTTP client of a running ctxd, for the CLI and the hooks (light: a hook imports it)."""

from typing import Any

import httpx

from ctxd.cli import env


class Unreachable(Exception):
    """No answer from the service at all (not listening, refused, timed out)."""


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
