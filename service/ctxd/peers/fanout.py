"""Peers: other hosts' ctxd, asked concurrently under one deadline, each resting after a failure.

A snapshot's watches with `host` set go to that host's ctxd (`POST /api/peer/observe`, the
peer's own bearer token), all peers at once, while this host's collectors run. Whatever is
missing at the deadline becomes `unavailable: host node2 …` lines; nothing waits longer. A
peer that failed is not asked again before it has rested (`peer_backoff_min_s`, doubling, up
to `peer_backoff_max_s`), so a dead host costs one line per snapshot, not one timeout each.
"""

import contextlib
import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel, ValidationError

from ctxd.errors import Invalid
from ctxd.models import Observations, Watch
from ctxd.peers.client import (
    REFUSED,
    PeerFailure,
    exchange,
    read_token,
    token_folders,
    token_rule,
    url_warning,
)
from ctxd.peers.merge import merge_answer, merge_failure, split
from ctxd.peers.serve import Callers
from ctxd.settings import Settings
from ctxd.store.connection import Connection
from ctxd.store.peers import Peer, PeerIn, PeerRows

log = logging.getLogger(__name__)

OBSERVE_PATH = "/api/peer/observe"
CLOCK_PATH = "/api/peer/clock"
_GRACE_S = 0.25
# requests remembered per peer, one per session and purpose: sessions are the caller's to name
BUSY_MAX = 64


class PeerStatus(BaseModel):
    name: str
    url: str
    reachable: bool
    error: str | None = None
    latency_ms: float | None = None
    # the peer's clock minus ours, from the middle of the round trip: positive, it is ahead
    clock_offset_s: float | None = None
    hostname: str | None = None
    warning: str | None = None  # what is wrong with the peer's address even when it answers


@dataclass
class _Health:
    failures: int = 0
    rest_until: float = 0.0
    last_error: str = ""
    busy: OrderedDict[tuple[str, str], Future] = field(default_factory=OrderedDict)

    def remember(self, key: tuple[str, str], future: Future) -> None:
        """The request now running for `key`; past BUSY_MAX, finished ones go, then the oldest."""
        self.busy[key] = future
        self.busy.move_to_end(key)
        if len(self.busy) > BUSY_MAX:
            for old in [k for k, f in self.busy.items() if f.done() and k != key]:
                del self.busy[old]
        while len(self.busy) > BUSY_MAX:
            self.busy.popitem(last=False)


class _Attempt:
    """One request to a peer; the first verdict on it (its own, or the deadline's) counts."""

    settled = False


@dataclass
class Asked:
    """Peers asked for one collection: their answers to come, by the deadline."""

    deadline: float
    watches: dict[str, list[Watch]]
    only: frozenset[str] | None  # the collectors asked for; None: all, the GPUs among them
    futures: dict[str, Future] = field(default_factory=dict)
    attempts: dict[str, _Attempt] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # peers not asked, and why


class Peers:
    """The peer directory (in the database) and the in-memory health of each peer."""

    def __init__(self, settings: Settings, conn: Connection) -> None:
        self.settings = settings
        self.rows = PeerRows(conn)
        self._health: dict[str, _Health] = {}
        self._guard = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="peer")
        self.callers = Callers()  # the peer side's memory of the sessions that ask this host
        # where token files may lie: ctxd's own configuration (see client.token_folders)
        self.token_folders = token_folders(settings.data_dir)
        # made private from the start, for the token files the refusal points to; with no
        # data directory yet, or a read-only one, the refusal still says where
        with contextlib.suppress(OSError):
            self.token_folders[0].mkdir(mode=0o700, exist_ok=True)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- the directory ----------------------------------------------------------------------

    def put(self, name: str, data: PeerIn) -> tuple[Peer, bool]:
        """Add or change a peer. Its token file is sent to its URL, so it must be one of ctxd's
        own (client.read_token): a request can never name another private file (a 0600
        `hf_…` token, a key) to have it sent out. The refusal states the rule only, the same
        for every file, so it cannot be used to learn whether a path exists or what it holds.
        """
        try:
            read_token(data.token_file, self.token_folders)
        except PeerFailure:
            raise Invalid(f"token_file {REFUSED}: {token_rule(self.token_folders)}") from None
        with self._guard:
            self._health.pop(name, None)  # a new address or token deserves a try at once
        return self.rows.put(name, data)

    def all(self) -> list[Peer]:
        return self.rows.all()

    def delete(self, name: str) -> None:
        self.rows.delete(name)
        with self._guard:
            self._health.pop(name, None)

    def names(self) -> set[str]:
        return {p.name for p in self.rows.all()}

    def status(self) -> list[PeerStatus]:
        """Every peer asked for its clock at once, under the one deadline."""
        peers = self.rows.all()
        deadline = time.monotonic() + self.settings.peer_deadline_s
        futures = [self._pool.submit(self._clock, peer, deadline) for peer in peers]
        answers = []
        for peer, future in zip(peers, futures, strict=True):
            try:
                answers.append(future.result(timeout=max(0.0, deadline - time.monotonic()) + 0.5))
            except FutureTimeout:
                answers.append(self._down(peer, "no answer within the deadline"))
        return answers

    def _clock(self, peer: Peer, deadline: float) -> PeerStatus:
        started, wall = time.monotonic(), time.time()
        try:
            token = read_token(peer.token_file, self.token_folders)
            answer = exchange(peer.url, token, CLOCK_PATH, None, deadline, 65536)
            theirs = datetime.fromisoformat(answer["now"]).timestamp()
            hostname = str(answer.get("hostname", ""))[:255]
        except PeerFailure as exc:
            self._failed(peer.name, str(exc))
            return self._down(peer, str(exc))
        except (KeyError, TypeError, ValueError):
            self._failed(peer.name, "answered JSON that is not ctxd's clock")
            return self._down(peer, "answered JSON that is not ctxd's clock")
        except Exception as exc:  # one peer's surprise must not cost the others' status
            why = _unexpected(peer, exc)
            self._failed(peer.name, why)
            return self._down(peer, why)
        took = time.monotonic() - started
        self._succeeded(peer.name)
        return PeerStatus(
            name=peer.name,
            url=peer.url,
            reachable=True,
            latency_ms=round(took * 1000, 1),
            clock_offset_s=round(theirs - (wall + took / 2), 3),
            hostname=hostname,
            warning=url_warning(peer.url),
        )

    def _down(self, peer: Peer, why: str) -> PeerStatus:
        return PeerStatus(
            name=peer.name, url=peer.url, reachable=False, error=why, warning=url_warning(peer.url)
        )

    # --- a collection -----------------------------------------------------------------------

    def split(self, watches: list[Watch]) -> tuple[list[Watch], dict[str, list[Watch]]]:
        """(this host's watches, each peer's); skips the database when no watch has a host."""
        if not any(getattr(w.spec, "host", None) not in (None, "127.0.0.1") for w in watches):
            return watches, {}
        return split(watches, self.names())

    def ask(
        self, sid: str, purpose: str, remote: dict[str, list[Watch]], only: frozenset[str] | None
    ) -> Asked:
        """Send each peer its watches now; the answers are collected by `merge`."""
        deadline = time.monotonic() + self.settings.peer_deadline_s
        asked = Asked(deadline=deadline, watches=remote, only=only)
        known = {p.name: p for p in self.rows.all()}
        for name, watches in remote.items():
            peer = known.get(name)
            if peer is None:
                asked.refused[name] = f"no such peer (PUT /api/peers/{name} adds it)"
                continue
            payload = {
                "session": sid,
                "purpose": purpose,
                "watches": [w.model_dump(mode="json") for w in watches],
                "only": sorted(only) if only is not None else None,
            }
            with self._guard:
                health = self._health.setdefault(name, _Health())
                # one request at a time per session and purpose: a stuck one is not doubled
                running = health.busy.get((sid, purpose))
                if running is not None and not running.done():
                    asked.refused[name] = "still answering the previous request"
                    continue
                if time.monotonic() < health.rest_until:
                    asked.refused[name] = f"{health.last_error} (resting before the next try)"
                    continue
                attempt = _Attempt()
                future = self._pool.submit(self._observe, peer, payload, asked.deadline, attempt)
                health.remember((sid, purpose), future)
            asked.futures[name], asked.attempts[name] = future, attempt
        return asked

    def merge(self, asked: Asked, into: Observations) -> None:
        """Each peer's answer, or its unavailable lines, added to `into` by the deadline."""
        gpus = asked.only is None or "gpus" in asked.only  # every peer is asked for its GPUs

        def failed(name: str, why: str) -> None:
            merge_failure(into, name, asked.watches[name], why, gpus=gpus)

        for name, why in asked.refused.items():
            failed(name, why)
        for name, future in asked.futures.items():
            try:
                # a moment of grace: the peer's own timeout says more (no connection, no answer)
                left = max(0.0, asked.deadline - time.monotonic()) + _GRACE_S
                answer = future.result(timeout=left)
            except FutureTimeout:
                why = f"no answer within {self.settings.peer_deadline_s:g} s"
                # the request still running will fail too: one failure, counted once
                self._settle(name, asked.attempts[name], why)
                failed(name, why)
                continue
            except PeerFailure as exc:
                failed(name, str(exc))
                continue
            merge_answer(into, name, answer)

    def _observe(
        self, peer: Peer, payload: dict, deadline: float, attempt: _Attempt
    ) -> Observations:
        try:
            token = read_token(peer.token_file, self.token_folders)
            limit = self.settings.peer_answer_bytes_max
            data = exchange(peer.url, token, OBSERVE_PATH, payload, deadline, limit)
            answer = Observations.model_validate(data)
        except ValidationError:
            why = "answered JSON that is not ctxd's observations"
            self._settle(peer.name, attempt, why)
            raise PeerFailure(why) from None
        except PeerFailure as exc:
            self._settle(peer.name, attempt, str(exc))
            raise
        except Exception as exc:  # one peer's surprise must not cost the snapshot
            why = _unexpected(peer, exc)
            self._settle(peer.name, attempt, why)
            raise PeerFailure(why) from None
        self._settle(peer.name, attempt, None)
        return answer

    def _settle(self, name: str, attempt: _Attempt, failure: str | None) -> None:
        """The attempt's verdict (None: it succeeded), unless it already has one."""
        with self._guard:
            if attempt.settled:
                return
            attempt.settled = True
        if failure is None:
            self._succeeded(name)
        else:
            self._failed(name, failure)

    def _failed(self, name: str, why: str) -> None:
        with self._guard:
            health = self._health.setdefault(name, _Health())
            health.failures += 1
            first = self.settings.peer_backoff_min_s
            rest = min(self.settings.peer_backoff_max_s, first * 2.0 ** (health.failures - 1))
            health.rest_until = time.monotonic() + rest
            health.last_error = why

    def _succeeded(self, name: str) -> None:
        with self._guard:
            health = self._health.setdefault(name, _Health())
            health.failures, health.rest_until, health.last_error = 0, 0.0, ""


def _unexpected(peer: Peer, exc: Exception) -> str:
    """A reason for what no rule foresaw: the exception's type only, since its text may quote
    the token or the answer."""
    log.warning("peer %s: unexpected %s", peer.name, type(exc).__name__)
    return f"failed unexpectedly ({type(exc).__name__})"
