"""The CTXD_* variables the client side reads (the hooks and the CLI), in one place.

Standard library only, and cheap: a hook imports it on every event (`urllib.parse` only where
an address is taken apart for a person). The server reads its own through
`ctxd.settings.Settings`.
"""

import os

from ctxd import DEFAULT_URL


def url() -> str:
    """The service the CLI and the hooks talk to, unless `--url` says otherwise."""
    return with_scheme(os.environ.get("CTXD_URL", DEFAULT_URL))


def served_port() -> dict[str, int]:
    """{"port": N} where CTXD_URL names this machine's service on port N (`ctxd serve` then
    listens where the CLI and the hooks call); {} where it names none, or another host."""
    where = _host_port(os.environ.get("CTXD_URL") or "")
    if where is None or where[1] is None or where[0] not in ("127.0.0.1", "localhost", "::1"):
        return {}
    return {"port": where[1]}


def start_command(url: str) -> str:
    """The command that starts the service `url` names, on this machine: `ctxd serve`, with
    the port (and a host that is not the default) when the URL has others."""
    where, default = _host_port(url), _host_port(DEFAULT_URL)
    words = ["ctxd serve"]
    if where is not None and default is not None:
        (host, port), (default_host, default_port) = where, default
        if host not in (default_host, "localhost"):
            words.append(f"--host {host}")
        if port is not None and port != default_port:
            words.append(f"--port {port}")
    return " ".join(words)


def _host_port(address: str) -> tuple[str, int | None] | None:
    """(host, port) of an address as `with_scheme` reads it; None for none, or no address."""
    from urllib.parse import urlsplit  # not on a hook's path

    if not address.strip():
        return None
    try:
        parts = urlsplit(with_scheme(address))
        return parts.hostname or "127.0.0.1", parts.port
    except ValueError:
        return None


def with_scheme(address: str) -> str:
    """`host:port` as `http://host:port`, the way a person often writes it, a bare port as this
    machine's (`18411`: `http://127.0.0.1:18411`); a URL as it is."""
    address = address.strip()
    if address.isdigit():
        return f"http://127.0.0.1:{address}"
    return address if "://" in address else f"http://{address}"


def token() -> str | None:
    """The bearer token of a service that wants one: CTXD_TOKEN, else the first line of the
    file CTXD_TOKEN_FILE names (the one `ctxd token --new` wrote)."""
    if given := os.environ.get("CTXD_TOKEN"):
        return given
    try:
        with open(token_file() or "", encoding="utf-8") as held:
            return held.readline(600).strip() or None
    except (OSError, ValueError):
        return None


def token_file() -> str | None:
    """The file holding the token (CTXD_TOKEN_FILE, or a hook's `--token-file`)."""
    return os.environ.get("CTXD_TOKEN_FILE") or None


def session() -> str | None:
    """The session a person pinned for this shell (the hooks record in it)."""
    return os.environ.get("CTXD_SESSION") or None


def hook_timeout_s() -> float | None:
    """The user's ceiling on how long a hook waits for the service."""
    given = os.environ.get("CTXD_HOOK_TIMEOUT", "")
    return max(0.1, float(given)) if given.replace(".", "", 1).isdigit() else None


def wake_max_s(default: float) -> float:
    """How long a waiter waits for news at most (CTXD_WAKE_MAX_S), else `default`."""
    given = os.environ.get("CTXD_WAKE_MAX_S", "").strip()
    return max(1.0, float(given)) if given.replace(".", "", 1).isdigit() else default


def hook_max_chars() -> int | None:
    """How much dump a hook hands the model, when the user chose."""
    given = os.environ.get("CTXD_HOOK_MAX_CHARS", "").strip()
    return max(200, int(given)) if given.isdigit() else None


def data_dir() -> str | None:
    """Where a service the hooks start by themselves keeps its data, when the user chose."""
    return os.environ.get("CTXD_DATA_DIR") or None


def autostart() -> bool:
    """Whether a hook may start a missing service on this machine (CTXD_AUTOSTART=0: no)."""
    return os.environ.get("CTXD_AUTOSTART", "1") != "0"
