"""Watched and expected TCP ports: whether something listens, and what the health URL answers."""

import ipaddress
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from urllib.parse import urlsplit

import httpx

from ctxd import redact
from ctxd.collectors import CollectContext, split, unavailable_from
from ctxd.collectors.proc import procfs
from ctxd.models import PortInfo, PortsSection, PortWatch, ProcessWatch, Unavailable, Watch

NAME = "ports"
SECTION = PortsSection
KIND = "port"
RETIRES = False
PROC_NET = procfs.PROC / "net"

CONNECT_TIMEOUT_S = 0.2
HEALTH_TIMEOUT_S = 1.0
MAX_THREADS = 32
BODY_CHARS = 200


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


def is_loopback(url: str) -> bool:
    host = (urlsplit(url).hostname or "").strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def probe_health(
    url: str, timeout: float = HEALTH_TIMEOUT_S
) -> tuple[int | None, str | None, float | None, str | None]:
    """(status, error, latency in ms, start of the body), reading at most a few KB of it."""
    started = time.perf_counter()
    try:
        # trust_env=False: an HTTP(S)_PROXY meant for the internet must not intercept localhost.
        with (
            httpx.Client(timeout=timeout, trust_env=False, follow_redirects=False) as client,
            client.stream("GET", url) as response,
        ):
            latency = (time.perf_counter() - started) * 1000
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) >= 4 * BODY_CHARS:
                    break
            excerpt = " ".join(body.decode("utf-8", "replace").split())
            return response.status_code, None, latency, redact.cut(excerpt, BODY_CHARS, "") or None
    except httpx.TimeoutException:
        return None, f"timed out after {timeout:g} s", None, None
    except httpx.ConnectError as exc:
        return None, _short(f"cannot connect: {exc}"), None, None
    except Exception as exc:  # any failure of the probe is an outcome, not a crash
        return None, _short(f"{type(exc).__name__}: {exc}"), None, None


def _short(reason: str) -> str:
    return redact.cut(reason, 200, marker="")


def _check(row: PortInfo, ctx: CollectContext, local: set[int] | None) -> PortInfo | Unavailable:
    target = f"{row.host}:{row.port}"
    try:
        # A local port is read from the kernel's LISTEN table: connecting would add to the
        # backlog of a server that is hung and not accepting, until it looked closed.
        if local is not None and is_local(row.host):
            row.listening = row.port in local
        else:
            row.listening = is_listening(row.host, row.port)
    except socket.gaierror as exc:
        return Unavailable(watch_id=row.watch_id, target=target, reason=_short(f"{exc}"))
    except Exception as exc:  # never let one port cost the section
        return Unavailable(watch_id=row.watch_id, target=target, reason=_short(repr(exc)))
    if ctx.probe:
        return row  # an event needs to know it listens; who owns it and its health can wait
    if row.listening and is_local(row.host):
        row.bound = _bound(row, ctx)
        if row.owner_pid is None:
            row.owner_pid = _owner(row.port, ctx, walk=True)
    if row.url:
        if not ctx.settings.allow_remote_health and not is_loopback(row.url):
            row.health_error = "refused: not a loopback URL (set CTXD_ALLOW_REMOTE_HEALTH=true)"
        else:
            timeout = ctx.settings.health_timeout_s
            row.health_status, row.health_error, row.health_latency_ms, row.health_body = (
                probe_health(row.url, timeout)
            )
        row.url = redact.text(row.url)
    return row


def _bound(row: PortInfo, ctx: CollectContext) -> str | None:
    """The address the local listener on `row.port` is bound to, where it is not the one the
    watch names: "0.0.0.0" for a server on every interface (IPv4 first, then IPv6)."""
    table = procfs.listening_of_run(ctx)
    found = {table.bound[i] for i, port in table.items() if port == row.port and i in table.bound}
    if not found or row.host in found:
        return None
    return min(found, key=lambda address: (":" in address, address))


def _owner(port: int, ctx: CollectContext, walk: bool) -> int | None:
    """Who holds the listening socket: the watched processes of the last snapshot are asked
    (collectors run concurrently, so this cannot wait for the process collector's answer),
    then, when `walk`, every process."""
    inodes = {inode for inode, p in procfs.listening_of_run(ctx).items() if p == port}
    if not inodes:
        return None
    previous = ctx.previous.processes.items if ctx.previous else []
    likely = [p.pid for p in previous if p.root] + [p.pid for p in previous if not p.root]
    return procfs.socket_owner(inodes, likely, walk=walk)


def _local_listening(ctx: CollectContext) -> set[int] | None:
    """Ports with a listening TCP socket in this network namespace; None if /proc says nothing."""
    tables = [PROC_NET / "tcp", PROC_NET / "tcp6"]
    if not any(t.exists() for t in tables):
        return None
    return set(procfs.listening_of_run(ctx).values())


def opened(section: PortsSection, max_age_s: float) -> bool:
    """Whether a local port `section` saw closed listens now, by the machine's LISTEN table
    read at most `max_age_s` ago (one read shared by every session asking): the watcher's
    cheap look between probes, as no kernel event says a port opened."""
    waiting = {row.port for row in section.items if not row.listening and is_local(row.host)}
    if not waiting:
        return False
    try:
        return not waiting.isdisjoint(procfs.listening_shared(max_age_s).values())
    except OSError:
        return False


def is_local(host: str) -> bool:
    return host in ("localhost", "0.0.0.0", "::") or is_loopback(f"http://{host}/")


def _may_wait(row: PortInfo, local: set[int] | None, ctx: CollectContext) -> bool:
    """Whether checking `row` may block: a connect elsewhere, a health request, or a walk of
    every process for a listening socket's owner not found among the likely pids."""
    if local is None or not is_local(row.host):
        return True  # a TCP connect, up to its timeout
    if ctx.probe or row.port not in local:
        return False
    return row.url is not None or row.owner_pid is None


def _check_alone(
    row: PortInfo, ctx: CollectContext, local: set[int] | None
) -> PortInfo | Unavailable:
    """_check, with any failure turned into that row's line: one port never costs the section."""
    try:
        return _check(row, ctx, local)
    except Exception as exc:
        watch_id = row.watch_id if row.watch_id is not None else row.expected_by
        return unavailable_from(exc, watch_id, f"{row.host}:{row.port}")


def collect(watches: list[Watch], ctx: CollectContext) -> PortsSection:
    """Every watched and expected port, checked at once (ten closed ports cost one timeout)."""
    rows = targets(watches)
    if not rows:
        return PortsSection()
    try:
        local = _local_listening(ctx)
        check = partial(_check_alone, ctx=ctx, local=local)
        if not ctx.probe:  # a listening port's owner among the likely pids is a few reads
            for row in rows:
                if local is not None and is_local(row.host) and row.port in local:
                    row.owner_pid = _owner(row.port, ctx, walk=False)
        # What may wait (a connect elsewhere, a health URL, a walk for a socket's owner) is
        # checked at once in threads; a local port's state is a lookup in the LISTEN table,
        # cheaper than a thread's start (a probe asks nothing more).
        done = {i: check(row) for i, row in enumerate(rows) if not _may_wait(row, local, ctx)}
        slow = [i for i in range(len(rows)) if i not in done]
        if slow:
            with ThreadPoolExecutor(max_workers=min(MAX_THREADS, len(slow))) as pool:
                done.update(zip(slow, pool.map(check, [rows[i] for i in slow]), strict=True))
        results = [done[i] for i in range(len(rows))]
    except Exception as exc:  # e.g. no threads left: say so rather than fail the dump
        return PortsSection(unavailable=[Unavailable(target=NAME, reason=_short(repr(exc)))])
    items, unavailable = split(results)
    return PortsSection(items=items, unavailable=unavailable)
