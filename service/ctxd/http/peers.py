"""Thin HTTP handlers of peers: the directory (/api/peers) and the peer side (/api/peer/*)."""

from typing import Annotated

from litestar import Controller, Request, Response, delete, get, post, put
from litestar.datastructures import State
from litestar.exceptions import PermissionDeniedException
from litestar.params import JSONBody, Parameter

from ctxd.http.api import use
from ctxd.models import PEER_NAME_PATTERN, Observations
from ctxd.peers import serve as peers_serve
from ctxd.peers.client import is_loopback
from ctxd.peers.fanout import PeerStatus
from ctxd.peers.serve import ObserveIn
from ctxd.store.peers import Peer, PeerIn

Name = Annotated[str, Parameter(pattern=PEER_NAME_PATTERN, max_length=63)]


def _served(state: State) -> None:
    """The peer side needs this host's token: without one, no other host may ask."""
    if use(state).settings.token is None:
        raise PermissionDeniedException("this ctxd has no token; start it with CTXD_TOKEN_FILE")


def _local_or_token(state: State, request: Request) -> None:
    """A peer names a file whose content ctxd sends out: without a token, only this machine
    may name one (`ctxd serve` already listens on loopback only without a token)."""
    client = request.client.host if request.client else ""
    if use(state).settings.token is None and not is_loopback(client):
        raise PermissionDeniedException(
            "this ctxd has no token: peers are set from this machine only (loopback)"
        )


class PeerController(Controller):
    """The directory (/api/peers) and the peer side (/api/peer/*)."""

    path = "/api"

    @put("/peers/{name:str}", sync_to_thread=True)
    def put_peer(
        self, state: State, request: Request, name: Name, data: JSONBody[PeerIn]
    ) -> Response[Peer]:
        _local_or_token(state, request)
        peer, created = use(state).put_peer(name, data)
        return Response(peer, status_code=201 if created else 200)

    @get("/peers", sync_to_thread=True)
    def list_peers(self, state: State) -> list[PeerStatus]:
        """Each peer with its reachability, round trip and clock offset, asked now."""
        return use(state).list_peers()

    @delete("/peers/{name:str}", sync_to_thread=True)
    def delete_peer(self, state: State, name: Name) -> None:
        use(state).delete_peer(name)

    @post("/peer/observe", sync_to_thread=True, status_code=200)
    def peer_observe(self, state: State, data: JSONBody[ObserveIn]) -> Observations:
        """Another host's watches observed here, redacted here (bearer token required)."""
        _served(state)
        return use(state).peer_observe(data)

    @get("/peer/clock", sync_to_thread=True)
    def peer_clock(self, state: State) -> dict[str, str]:
        _served(state)
        return peers_serve.clock()


handlers = [PeerController]
