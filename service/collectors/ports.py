"""Watched and expected TCP ports: whether something listens, and what the health URL answers."""

import socket
from concurrent.futures import ThreadPoolExecutor

import httpx

from service import redact
from service.collectors import CollectContext
from service.models import PortInfo, PortsSection, PortWatch, ProcessWatch, Unavailable, Watch

NAME = "ports"

CONNECT_TIMEOUT_S = 0.2
HEALTH_TIMEOUT_S = 1.0
MAX_THREADS = 32


def targets(watches: list[Watch]) -> list[PortInfo]:
    """One unchecked row per host:port; a port both watched and expected is one row with both."""
    rows: dict[tuple[str, int], PortInfo] = {}
    for watch in watches:
        spec = watch.spec
        if isinstance(spec, PortWatch):
            row = rows.setdefault(
                (spec.host, spec.port), PortInfo(host=spec.host, port=spec.port, listening=False)
            )
            if row.watch_id is None:
                row.watch_id = watch.id
            if row.url is None and spec.url:
                row.url = spec.url
        elif isinstance(spec, ProcessWatch):
            for port in spec.expect_ports:
                row = rows.setdefault(
                    ("127.0.0.1", port), PortInfo(host="127.0.0.1", port=port, listening=False)
                )
                if row.expected_by is None:
                    row.expected_by = watch.id
    return list(rows.values())


def is_listening(host: str, port: int, timeout: float = CONNECT_TIMEOUT_S) -> bool:
    """A completed TCP handshake: works without root and for any owner of the socket.

    Raises socket.gaierror when the host does not resolve, which is not the same as closed.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except socket.gaierror:
        raise
    except OSError:
        return False


def check_health(url: str, timeout: float = HEALTH_TIMEOUT_S) -> tuple[int | None, str | None]:
    """(status, None) when the URL answered at all, else (None, a short reason)."""
    try:
        # trust_env=False: an HTTP(S)_PROXY meant for the internet must not intercept localhost.
        with httpx.Client(timeout=timeout, trust_env=False, follow_redirects=False) as client:
            return client.get(url).status_code, None
    except httpx.TimeoutException:
        return None, f"timed out after {timeout:g} s"
    except httpx.ConnectError as exc:
        return None, _short(f"cannot connect: {exc}")
    except Exception as exc:  # any failure of the probe is an outcome, not a crash
        return None, _short(f"{type(exc).__name__}: {exc}")


def _short(reason: str) -> str:
    return redact.text(reason)[:200]


def _check(row: PortInfo) -> PortInfo | Unavailable:
    target = f"{row.host}:{row.port}"
    try:
        row.listening = is_listening(row.host, row.port)
    except socket.gaierror as exc:
        return Unavailable(watch_id=row.watch_id, target=target, reason=_short(f"{exc}"))
    except Exception as exc:  # never let one port cost the section
        return Unavailable(watch_id=row.watch_id, target=target, reason=_short(repr(exc)))
    if row.url:
        row.health_status, row.health_error = check_health(row.url)
        row.url = redact.text(row.url)
    return row


def collect(watches: list[Watch], ctx: CollectContext) -> PortsSection:
    section = PortsSection()
    rows = targets(watches)
    if not rows:
        return section
    try:
        # Threads, so ten closed ports cost about one connect timeout instead of ten.
        with ThreadPoolExecutor(max_workers=min(MAX_THREADS, len(rows))) as pool:
            results = list(pool.map(_check, rows))
    except Exception as exc:  # e.g. no threads left: say so rather than fail the dump
        section.unavailable.append(Unavailable(target=NAME, reason=_short(repr(exc))))
        return section
    for result in results:
        if isinstance(result, Unavailable):
            section.unavailable.append(result)
        else:
            section.items.append(result)
    return section
