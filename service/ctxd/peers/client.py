"""One bounded exchange with a peer: one deadline for the whole answer, a size cap, one reason.

Whatever the peer does (refuses, resets, stalls, drips, answers garbage or 10 MB), the caller
gets either the parsed JSON or a `PeerFailure` whose text is one short line for the dump.
"""

import ipaddress
import json
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from ctxd import redact
from ctxd.fmt import human_bytes


class PeerFailure(Exception):
    """Why a peer gave no usable answer, as one line ("connection refused")."""


# What a token file may hold: one token, a trailing newline at most. Anything else (a private
# key, a config file) is never sent, whatever its mode: a token file names what is sent out.
TOKEN_SHAPE = re.compile(rb"[A-Za-z0-9._~+/=-]{16,512}\n?")
TOKEN_RULE = "one line of 16 to 512 characters from A-Z a-z 0-9 . _ ~ + / = -"


def read_token(token_file: str) -> str:
    """The token in `token_file`; its content is never part of a reason (it may be a secret)."""
    try:
        raw = Path(token_file).read_bytes()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise PeerFailure(f"cannot read its token file: {why}") from None
    token = raw.strip()
    if not token:
        raise PeerFailure("its token file is empty")
    if not all(0x20 <= byte < 0x7F or byte in b"\t\r\n" for byte in token):
        # a byte-order mark or a non-ASCII letter cannot go in an HTTP header
        raise PeerFailure("its token file holds characters that are not printable ASCII")
    if not TOKEN_SHAPE.fullmatch(raw):
        raise PeerFailure(f"its token file does not hold a token alone ({TOKEN_RULE})")
    return token.decode("ascii")


def is_loopback(host: str) -> bool:
    """True for an address of this machine's loopback ("127.0.0.2", "::1", "localhost")."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def url_warning(url: str) -> str | None:
    """Why a peer's address puts its token at risk, or None."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return None
    if parts.scheme == "http" and not is_loopback(host):
        return "http:// sends the token in clear to another host: use https:// or a tunnel"
    return None


def exchange(
    url: str,
    token: str,
    path: str,
    payload: object | None,
    deadline: float,
    max_bytes: int,
) -> Any:
    """POST `payload` (GET when None) to `url + path` and return the JSON answer.

    `deadline` is a `time.monotonic()` instant: every wait is bounded by what is left of it,
    and the body is read in chunks so a peer that drips is cut at the deadline too.
    """
    left = deadline - time.monotonic()
    if left <= 0:
        raise PeerFailure("no time left in the snapshot's deadline")
    headers = {"Authorization": f"Bearer {token}", "Accept-Encoding": "identity"}
    # trust_env off: a proxy from the environment must not see the peer token
    with httpx.Client(timeout=httpx.Timeout(left), trust_env=False) as client:
        try:
            body = _read(client, url.rstrip("/") + path, payload, headers, deadline, max_bytes)
        except httpx.HTTPError as exc:
            raise PeerFailure(_describe(exc, left)) from None
    try:
        return json.loads(body)
    except RecursionError:  # `[[[[…` within the size cap: the decoder recurses per level
        raise PeerFailure("answered JSON nested too deep") from None
    except ValueError:
        raise PeerFailure(f"answered {human_bytes(len(body))} that are not JSON") from None


def _read(
    client: httpx.Client,
    url: str,
    payload: object | None,
    headers: dict[str, str],
    deadline: float,
    max_bytes: int,
) -> bytes:
    method = "GET" if payload is None else "POST"
    with client.stream(method, url, json=payload, headers=headers) as answer:
        if answer.status_code == 401:
            raise PeerFailure("refused our token (HTTP 401)")
        if answer.status_code != 200:
            # ctxd's refusals say why ("Host '10.0.0.2' is not allowed; add it to ...")
            detail = _detail(answer, deadline)
            raise PeerFailure(f"answered HTTP {answer.status_code}{detail}")
        if answer.headers.get("content-encoding", "identity") != "identity":
            raise PeerFailure("answered compressed, which was not asked for")
        declared = answer.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise PeerFailure(f"answer of {human_bytes(int(declared))} is over the limit")
        body = bytearray()
        for chunk in answer.iter_raw():
            body += chunk
            if len(body) > max_bytes:
                raise PeerFailure(f"answer is over the limit of {human_bytes(max_bytes)}")
            if time.monotonic() > deadline:
                raise PeerFailure("answer not complete within the deadline")
        return bytes(body)


def _detail(answer: httpx.Response, deadline: float) -> str:
    """The `detail` of a ctxd error answer, from its first KB; empty when there is none."""
    head = bytearray()
    for chunk in answer.iter_raw():
        head += chunk
        if len(head) >= 1024 or time.monotonic() > deadline:
            break
    try:
        detail = json.loads(bytes(head)).get("detail", "")
    except (ValueError, AttributeError):
        return ""
    return f": {redact.text(str(detail))[:200]}" if detail else ""


def _describe(exc: httpx.HTTPError, budget: float) -> str:
    if isinstance(exc, httpx.ConnectTimeout):
        return f"no connection within {round(budget, 1):g} s (host down or partitioned?)"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {round(budget, 1):g} s"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "closed the connection before answering (killed or restarting?)"
    if isinstance(exc, httpx.ConnectError):
        cause = exc.__cause__ or exc.__context__
        why = getattr(cause, "strerror", None) or str(exc) or type(exc).__name__
        return "unreachable: " + re.sub(r"^\[Errno -?\d+\] ", "", why)
    if isinstance(exc, httpx.ReadError):
        return "the connection broke while it answered"
    return f"failed: {type(exc).__name__}"
