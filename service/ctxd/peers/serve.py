"""The peer side: another host's watches collected here, under this host's own rules.

A caller holding this host's token may ask for observations, not for more than a local client
could: each watch passes this host's command allowlist and watch roots, and what comes back
is redacted here before it leaves.
"""

import socket
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import Field

from ctxd import redact
from ctxd.errors import CtxdError
from ctxd.models import SESSION_ID_PATTERN, Observations, Strict, Unavailable, Watch, WatchSpec
from ctxd.peers.merge import add_unavailable, describe, for_peer
from ctxd.snapshotter.runner import CollectorRunner

# This host's watch admission (`usecases.admission.admit` with this host's settings).
Admit = Callable[[WatchSpec], WatchSpec]
# Caller sessions whose collector memory is kept; the least recently asked beyond go.
CALLERS_MAX = 64


class Callers:
    """The caller sessions this host keeps collector memory for: their ids are the caller's
    choice, so they are bounded, least recently asked dropped."""

    def __init__(self, limit: int = CALLERS_MAX) -> None:
        self.limit = limit
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def seen(self, session: str) -> list[str]:
        """Note `session` as just asked; the sessions dropped to make room."""
        with self._lock:
            self._seen[session] = None
            self._seen.move_to_end(session)
            dropped = []
            while len(self._seen) > self.limit:
                dropped.append(self._seen.popitem(last=False)[0])
            return dropped


class ObserveIn(Strict):
    session: Annotated[str, Field(pattern=SESSION_ID_PATTERN, max_length=64)]
    purpose: Literal["snapshot", "preview", "probe"] = "snapshot"
    watches: list[Watch] = Field(default=[], max_length=200)
    only: list[Annotated[str, Field(max_length=64)]] | None = Field(None, max_length=32)


def observe(
    runner: CollectorRunner, ask: ObserveIn, callers: Callers, admit: Admit
) -> Observations:
    """The watches observed on this host, for a peer, each passed through `admit` (this
    host's own admission); refused ones as unavailable lines."""
    admitted: list[Watch] = []
    refused: list[tuple[Watch, str]] = []
    for watch in ask.watches:
        watch = for_peer(watch)  # this host's view: never forwarded on to a third host
        try:
            spec = admit(watch.spec)
        except CtxdError as exc:
            refused.append((watch, f"refused by that host: {exc}"))
            continue
        admitted.append(watch.model_copy(update={"spec": spec}))
    only = frozenset(ask.only) if ask.only is not None else None
    # its own collector memory per caller session and purpose: offsets, CPU baselines
    key = f"peer/{ask.session}"
    for old in callers.seen(key):
        runner.forget(old)
    observations = runner.observe(key, admitted, purpose=ask.purpose, only=only, remote=False)
    for watch, why in refused:
        line = Unavailable(watch_id=watch.id, target=describe(watch), reason=why)
        add_unavailable(observations, watch, line)
    return redact.scrub(observations)


def clock() -> dict[str, str]:
    """What `GET /api/peer/clock` answers: this host's time and name."""
    return {"now": datetime.now(UTC).isoformat(), "hostname": socket.gethostname()}
