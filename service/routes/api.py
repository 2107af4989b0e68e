"""Thin JSON/Markdown HTTP handlers of the API contract: one domain call each."""

from typing import Annotated, Any

from litestar import Controller, Response, delete, get, post, put
from litestar.datastructures import State
from litestar.params import Parameter

from service import __version__, recovery
from service.models import (
    SESSION_ID_PATTERN,
    Diff,
    JournalEntry,
    JournalIn,
    MessageIn,
    Session,
    SessionIn,
    Snapshot,
    SnapshotIn,
    SnapshotSummary,
    Watch,
    WatchIn,
)
from service.snapshots import Snapshotter

MARKDOWN = "text/markdown; charset=utf-8"
Sid = Annotated[str, Parameter(pattern=SESSION_ID_PATTERN, max_length=64)]
Version = Annotated[int, Parameter(ge=1)]


def snapshotter(state: State) -> Snapshotter:
    return state.snapshotter


@get("/health", sync_to_thread=False)
def health() -> dict[str, str]:
    return {"status": "ok", "version": __version__}


class SessionController(Controller):
    path = "/api/sessions"

    @put("/{sid:str}", sync_to_thread=True)
    def put_session(self, state: State, sid: Sid, data: SessionIn) -> Response[Session]:
        session, created = snapshotter(state).store.put_session(sid, data)
        return Response(session, status_code=201 if created else 200)

    @get("/", sync_to_thread=True)
    def list_sessions(self, state: State) -> list[Session]:
        return snapshotter(state).store.list_sessions()

    @get("/{sid:str}", sync_to_thread=True)
    def get_session(self, state: State, sid: Sid) -> Session:
        return snapshotter(state).store.get_session(sid)

    @post("/{sid:str}/watches", sync_to_thread=True)
    def add_watch(self, state: State, sid: Sid, data: WatchIn) -> Watch:
        snap = snapshotter(state)
        snap.store.touch(sid)
        return snap.store.add_watch(sid, data.root, snap.settings.limits.max_watches_per_session)

    @get("/{sid:str}/watches", sync_to_thread=True)
    def list_watches(self, state: State, sid: Sid) -> list[Watch]:
        return snapshotter(state).store.list_watches(sid)

    @get("/{sid:str}/watches/{wid:int}", sync_to_thread=True)
    def get_watch(self, state: State, sid: Sid, wid: int) -> Watch:
        return snapshotter(state).store.get_watch(sid, wid)

    @delete("/{sid:str}/watches/{wid:int}", sync_to_thread=True)
    def delete_watch(self, state: State, sid: Sid, wid: int) -> None:
        snapshotter(state).store.delete_watch(sid, wid)

    @post("/{sid:str}/journal", sync_to_thread=True)
    def add_entry(self, state: State, sid: Sid, data: JournalIn) -> JournalEntry:
        snap = snapshotter(state)
        snap.store.touch(sid)
        return snap.store.add_entry(sid, data)

    @get("/{sid:str}/journal", sync_to_thread=True)
    def list_entries(self, state: State, sid: Sid) -> list[JournalEntry]:
        return snapshotter(state).store.list_entries(sid)

    @post("/{sid:str}/snapshots", sync_to_thread=True)
    def take_snapshot(self, state: State, sid: Sid, data: SnapshotIn | None = None) -> Snapshot:
        snap = snapshotter(state)
        snap.store.touch(sid)
        return snap.take(sid, trigger="manual", note=data.note if data else None)

    @get("/{sid:str}/snapshots", sync_to_thread=True)
    def list_snapshots(self, state: State, sid: Sid) -> list[SnapshotSummary]:
        return snapshotter(state).store.list_snapshots(sid)

    @get("/{sid:str}/snapshots/{n:int}", sync_to_thread=True)
    def get_snapshot(self, state: State, sid: Sid, n: Version) -> Snapshot:
        return snapshotter(state).store.get_snapshot(sid, n)

    @get("/{sid:str}/snapshots/{n:int}/markdown", media_type=MARKDOWN, sync_to_thread=True)
    def get_markdown(self, state: State, sid: Sid, n: Version) -> str:
        return snapshotter(state).store.get_markdown(sid, n)

    @get("/{sid:str}/diff", sync_to_thread=True)
    def diff(
        self,
        state: State,
        sid: Sid,
        from_version: Annotated[int, Parameter(query="from", ge=1)],
        to_version: Annotated[int, Parameter(query="to", ge=1)],
    ) -> Diff:
        return recovery.diff(snapshotter(state), sid, from_version, to_version)

    @get("/{sid:str}/resume", media_type=MARKDOWN, sync_to_thread=True)
    def resume(
        self,
        state: State,
        sid: Sid,
        fresh: bool = True,
        max_chars: Annotated[int | None, Parameter(ge=200, le=10_000_000)] = None,
        since: Annotated[int | None, Parameter(ge=1)] = None,
    ) -> str:
        return recovery.resume(
            snapshotter(state), sid, fresh=fresh, max_chars=max_chars, since=since
        )

    @post("/{sid:str}/messages", sync_to_thread=True)
    def message(self, state: State, sid: Sid, data: MessageIn) -> Response[Any]:
        markdown = recovery.message(snapshotter(state), sid, data.text)
        if markdown is None:
            return Response({"status": "recorded"}, status_code=202)
        return Response(markdown, media_type=MARKDOWN, status_code=200)

    @post("/{sid:str}/heartbeat", sync_to_thread=True, status_code=204)
    def heartbeat(self, state: State, sid: Sid) -> None:
        snapshotter(state).store.touch(sid)
