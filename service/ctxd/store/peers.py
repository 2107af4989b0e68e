"""The peers table (migration m006_peers): other hosts' ctxd, by name, with their token file."""

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field

from ctxd.errors import NotFound
from ctxd.models import PathText, Strict
from ctxd.store.connection import Connection, iso, now


class PeerIn(Strict):
    """A peer as put: its base URL and the file holding the token the peer was started with.

    Only a file name, never the token: the token stays in a file of ctxd's own configuration
    (peers.client.read_token says which), so it is in no request body, no row of this table
    and no answer; the row keeps the name, which is read afresh before each request.
    """

    url: Annotated[str, Field(max_length=2048, pattern=r"^https?://[^/?#\s@]+/?$")]
    token_file: PathText


class Peer(BaseModel):
    name: str
    url: str
    token_file: str
    created_at: datetime


class PeerRows:
    """Rows of the `peers` table, over the store's one connection and lock."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def put(self, name: str, data: PeerIn) -> tuple[Peer, bool]:
        with self.conn._tx() as db:
            exists = bool(self.conn._rows("select 1 from peers where name = ?", [name]))
            row = {"name": name, "url": data.url.rstrip("/"), "token_file": data.token_file}
            if exists:
                db.table("peers").update(name, row)
            else:
                db.table("peers").insert(row | {"created_at": iso(now())})
        return self.get(name), not exists

    def get(self, name: str) -> Peer:
        rows = self.conn._rows("select * from peers where name = ?", [name])
        if not rows:
            raise NotFound(f"no peer '{name}' (PUT /api/peers/{name} adds it)")
        return Peer.model_validate(rows[0])

    def all(self) -> list[Peer]:
        return [
            Peer.model_validate(r) for r in self.conn._rows("select * from peers order by name")
        ]

    def delete(self, name: str) -> None:
        with self.conn._tx() as db:
            self.get(name)
            db.table("peers").delete(name)
