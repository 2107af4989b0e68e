"""One bounded exchange with a peer: one deadline for the whole answer, a size cap, one reason.

Whatever the peer does (refuses, resets, stalls, drips, answers garbage or 10 MB), the caller
gets either the parsed JSON or a `PeerFailure` whose text is one short line for the dump.
"""

import ipaddress
import json
import os
import pwd
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from ctxd import redact
from ctxd.fmt import human_bytes
from ctxd.named_files import (
    NotRegular,
    TimedReads,
    TooSlow,
    changed,
    open_named,
    opened_name,
    read_at_most,
)


class PeerFailure(Exception):
    """Why a peer gave no usable answer, as one line ("connection refused")."""


# What a token file may hold: one token, a trailing newline at most. Anything else (a private
# key, a config file) is never sent, whatever its mode: a token file names what is sent out.
TOKEN_SHAPE = re.compile(rb"[A-Za-z0-9._~+/=-]{16,512}\n?")
TOKEN_RULE = "one line of 16 to 512 characters from A-Z a-z 0-9 . _ ~ + / = -"
TOKEN_FILE_MAX = 1024
TOKEN_READ_S = 2.0
# The folder of ctxd's data directory that holds peer token files (hidden: no session id
# starts with a dot, so no session's Markdown folder can be it).
PEER_TOKEN_DIR = ".peers"
REFUSED = "not accepted as a token file"
_READS = TimedReads("token file", slots=4)


class _Refused(Exception):
    """A token file broke the rule; which part is never said (it would describe the file)."""


def token_folders(data_dir: Path) -> list[Path]:
    """Where a peer's token file may lie: ctxd's own configuration, chosen by whoever started
    ctxd, never by a request: `<data dir>/.peers/` and `$XDG_CONFIG_HOME/ctxd/` (by default
    `~/.config/ctxd/`) of the user ctxd runs as."""
    folders = [Path(os.path.abspath(data_dir)) / PEER_TOKEN_DIR]
    config = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(config):  # unset, or relative (which the XDG spec says to ignore)
        config = os.path.join(os.path.expanduser("~"), ".config")
    if os.path.isabs(config):  # "~" stays "~" when there is no home to expand it to
        folders.append(Path(config) / "ctxd")
    return folders


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def token_rule(folders: Sequence[Path]) -> str:
    """The whole rule for a token file, the same words whichever part of it a file breaks."""
    where = " or ".join(f"{folder}/" for folder in folders)
    return (
        f"it must be a regular file directly in {where}, owned by {_user()} (the user ctxd "
        "runs as), mode 0600 or stricter, not a link and with no other hard link, holding "
        f"one token alone ({TOKEN_RULE})"
    )


def read_token(token_file: str, folders: Sequence[Path]) -> str:
    """The token in `token_file`, if it keeps the rule (see token_rule); else PeerFailure.

    The reason is the rule alone, the same for a file that is missing, empty, binary, a link,
    a fifo or someone else's: nothing is said about whether a path exists or what it holds.
    Everything is checked on the descriptor that is read, never blocks (named_files), and
    the read is bounded by TOKEN_FILE_MAX bytes and TOKEN_READ_S seconds.
    """
    try:
        return _READS.run(lambda: _read_token(token_file, folders), TOKEN_READ_S)
    except (OSError, ValueError, NotRegular, TooSlow, _Refused):  # ValueError: a NUL
        raise PeerFailure(f"its token file is {REFUSED}: {token_rule(folders)}") from None


def _read_token(token_file: str, folders: Sequence[Path]) -> str:
    if not os.path.isabs(token_file) or os.path.normpath(token_file) != token_file:
        raise _Refused
    homes = {os.path.realpath(folder) for folder in folders}
    parent, name = os.path.split(token_file)
    real_parent = os.path.realpath(parent)  # the folder may be named through a link
    if real_parent not in homes:
        raise _Refused
    fd, st = open_named(os.path.join(real_parent, name))  # the file itself is no link
    try:
        opened = opened_name(fd)
        if (
            os.path.dirname(opened) not in homes  # a folder swapped since it was resolved
            or changed(opened, st)
            or st.st_uid != os.geteuid()
            or st.st_mode & 0o077
            or st.st_nlink != 1  # a hard link made to someone's private file
            or st.st_size > TOKEN_FILE_MAX
        ):
            raise _Refused
        raw = read_at_most(fd, TOKEN_FILE_MAX + 1)
    finally:
        os.close(fd)
    if not TOKEN_SHAPE.fullmatch(raw):
        raise _Refused
    return raw.strip().decode("ascii")


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
