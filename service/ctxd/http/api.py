"""Thin JSON/Markdown HTTP handlers of the API contract: one use-case call each."""

from asyncio import to_thread
from functools import partial
from typing import Annotated, Any

from litestar import Controller, Response, Router, delete, get, patch, post, put
from litestar.datastructures import State
from litestar.params import FromPath, FromQuery, JSONBody, Parameter, QueryParameter

from ctxd.harness.adapter import HarnessName
from ctxd.harness.events import HookIn, HookOut, WakeIn, WakeOut
from ctxd.harness.resolve import PromptIn
from ctxd.http.encoded import EncodedAnswers, encoded_json
from ctxd.models import (
    SESSION_ID_PATTERN,
    Diff,
    JournalEntry,
    JournalIn,
    JournalUpdate,
    MessageIn,
    Session,
    SessionIn,
    Snapshot,
    SnapshotIn,
    SnapshotSummary,
    Watch,
    WatchIn,
)
from ctxd.snapshotter.news import WAIT_MAX_S, NewsOut
from ctxd.usecases.agent_actions import ActionsIn, ActionsOut
from ctxd.usecases.operations import UseCases
from ctxd.usecases.scrub import ScrubIn
from ctxd.usecases.search import LIMIT_MAX, OFFSET_MAX, SearchResult

MARKDOWN = "text/markdown"  # Litestar appends "; charset=utf-8" to text types
SessionPath = Annotated[str, Parameter(pattern=SESSION_ID_PATTERN, max_length=64)]
# SQLite integers are 64-bit: a larger id is a 400, not an OverflowError deep in the store.
MAX_ID = 2**63 - 1
Version = Annotated[int, Parameter(ge=1, le=MAX_ID)]
RowId = Annotated[int, Parameter(ge=1, le=MAX_ID)]
LATEST_DUMPS = EncodedAnswers(MARKDOWN)  # per session: its latest dump, ready to send


# like every string of a query: longer ones make URLs that servers refuse outright
Query = Annotated[str, QueryParameter(name="q", max_length=4096)]
Limit = Annotated[int, Parameter(ge=1, le=LIMIT_MAX)]
Offset = Annotated[int, Parameter(ge=0, le=OFFSET_MAX)]


def use(state: State) -> UseCases:
    return state.usecases


@get("/health", sync_to_thread=True)
def health(state: State) -> dict[str, str | int]:
    return use(state).health()


@post("/api/prune", sync_to_thread=True)
def prune(
    state: State, keep_days: Annotated[int | None, Parameter(ge=1, le=3650)] = None
) -> dict[str, int]:
    return {"removed": use(state).prune(keep_days)}


@post("/api/scrub", sync_to_thread=True, status_code=200)
def scrub(state: State, data: JSONBody[ScrubIn | None] = None) -> dict[str, int]:
    """Secrets learned since they were stored taken out of the store and the dump files now
    (ctxd also does it by itself, a moment after it learns one); how many places changed."""
    done = use(state).scrubber.now(data.values if data else [])
    return {"values": done.values, "rows": sum(done.rows.values()), "blobs": done.blobs,
            "dumps": done.dumps}  # fmt: skip


@get("/api/search", sync_to_thread=True)
def search_all(state: State, q: Query, limit: Limit = 20, offset: Offset = 0) -> SearchResult:
    """Every session's history, best hits first."""
    return use(state).search(None, q, limit, offset)


@post("/api/hooks/{harness:str}", sync_to_thread=True, status_code=200)
def hook(state: State, harness: FromPath[HarnessName], data: JSONBody[HookIn]) -> HookOut:
    """A harness hook event as the harness gave it; the answer says what to inject."""
    return use(state).hook(harness, data)


# What a harness posts itself carries a tool's whole output (the server keeps its end)
HARNESS_POST_MAX_BYTES = 64 * 2**20


@post(
    "/api/hooks/{harness:str}/http",
    sync_to_thread=True,
    status_code=200,
    request_max_body_size=HARNESS_POST_MAX_BYTES,
)
def harness_hook(
    state: State, harness: FromPath[HarnessName], data: JSONBody[dict[str, Any]]
) -> dict[str, Any]:
    """A hook event as the harness posts it itself (Claude Code's HTTP hooks); the answer in
    the harness's own hook output shape."""
    return use(state).http_hook(harness, data)


@post("/api/hooks/{harness:str}/wake", status_code=200)
async def wake(
    state: State, harness: FromPath[HarnessName], data: JSONBody[WakeIn]
) -> WakeOut | Response[str]:
    """A waiter's long poll for its session's attempts' news (`ctxd hook HARNESS --wake`);
    as plain text for the shell that waits."""
    said = await use(state).wake(harness, data)
    return Response(said.plain(), media_type="text/plain") if data.plain else said


class SessionController(Controller):
    path = "/"

    @put("/{sid:str}", sync_to_thread=True)
    def put_session(
        self, state: State, sid: SessionPath, data: JSONBody[SessionIn]
    ) -> Response[Session]:
        session, created = use(state).put_session(sid, data)
        return Response(session, status_code=201 if created else 200)

    @get("/", sync_to_thread=True)
    def list_sessions(
        self, state: State, cwd: Annotated[str | None, Parameter(max_length=4096)] = None
    ) -> list[Session]:
        return use(state).list_sessions(cwd=cwd)

    @get("/{sid:str}", sync_to_thread=True)
    def get_session(self, state: State, sid: SessionPath) -> Session:
        return use(state).get_session(sid)

    @post("/{sid:str}/watches", sync_to_thread=True)
    def add_watch(self, state: State, sid: SessionPath, data: JSONBody[WatchIn]) -> Response[Watch]:
        """201 with the new watch, or 200 with the session's watch of the same spec."""
        watch, added = use(state).add_watch(sid, data.root)
        return Response(watch, status_code=201 if added else 200)

    @get("/{sid:str}/watches", sync_to_thread=True)
    def list_watches(self, state: State, sid: SessionPath) -> list[Watch]:
        return use(state).list_watches(sid)

    @get("/{sid:str}/watches/{wid:int}", sync_to_thread=True)
    def get_watch(self, state: State, sid: SessionPath, wid: RowId) -> Watch:
        return use(state).get_watch(sid, wid)

    @delete("/{sid:str}/watches/{wid:int}", sync_to_thread=True)
    def delete_watch(self, state: State, sid: SessionPath, wid: RowId) -> None:
        use(state).remove_watch(sid, wid)

    @post("/{sid:str}/journal", sync_to_thread=True)
    def add_entry(self, state: State, sid: SessionPath, data: JSONBody[JournalIn]) -> JournalEntry:
        return use(state).add_entry(sid, data)

    @patch("/{sid:str}/journal/{eid:int}", sync_to_thread=True)
    def update_entry(
        self, state: State, sid: SessionPath, eid: RowId, data: JSONBody[JournalUpdate]
    ) -> JournalEntry:
        return use(state).update_entry(sid, eid, data)

    @get("/{sid:str}/journal", sync_to_thread=True)
    def list_entries(self, state: State, sid: SessionPath) -> list[JournalEntry]:
        return use(state).list_entries(sid)

    @post("/{sid:str}/snapshots", sync_to_thread=True)
    def take_snapshot(
        self, state: State, sid: SessionPath, data: JSONBody[SnapshotIn | None] = None
    ) -> Response[Snapshot]:
        note, force = (data.note, data.force) if data else (None, False)
        return encoded_json(use(state).take(sid, note=note, force=force), status_code=201)

    @get("/{sid:str}/snapshots", sync_to_thread=True)
    def list_snapshots(self, state: State, sid: SessionPath) -> list[SnapshotSummary]:
        return use(state).list_snapshots(sid)

    @get("/{sid:str}/snapshots/{n:int}", sync_to_thread=True)
    def get_snapshot(self, state: State, sid: SessionPath, n: Version) -> Snapshot:
        return use(state).get_snapshot(sid, n)

    @get("/{sid:str}/snapshots/{n:int}/markdown", media_type=MARKDOWN, sync_to_thread=True)
    def get_markdown(self, state: State, sid: SessionPath, n: Version) -> str:
        return use(state).get_markdown(sid, n)

    @get("/{sid:str}/search", sync_to_thread=True)
    def search(
        self, state: State, sid: SessionPath, q: Query, limit: Limit = 20, offset: Offset = 0
    ) -> SearchResult:
        return use(state).search(sid, q, limit, offset)

    @get("/{sid:str}/diff", sync_to_thread=True)
    def diff(
        self,
        state: State,
        sid: SessionPath,
        from_version: Annotated[int, QueryParameter(name="from", ge=1, le=MAX_ID)],
        to_version: Annotated[int, QueryParameter(name="to", ge=1, le=MAX_ID)],
    ) -> Diff:
        return use(state).diff(sid, from_version, to_version)

    @get("/{sid:str}/resume", media_type=MARKDOWN)
    async def resume(
        self,
        state: State,
        sid: SessionPath,
        fresh: FromQuery[bool] = True,
        max_chars: Annotated[int | None, Parameter(ge=200, le=10_000_000)] = None,
        since: Annotated[int | None, Parameter(ge=1, le=MAX_ID)] = None,
    ) -> Response[str]:
        cases = use(state)
        # The common case, the latest stored dump, is served from memory without a thread hop,
        # and as the bytes encoded for the previous request while the dump is the same.
        cached = cases.resume_from_memory(sid, fresh=fresh, max_chars=max_chars, since=since)
        if cached is not None:
            return LATEST_DUMPS.answer(sid, cached)
        markdown = await to_thread(
            partial(cases.resume, sid, fresh=fresh, max_chars=max_chars, since=since)
        )
        return Response(markdown, media_type=MARKDOWN)

    @get("/{sid:str}/news")
    async def news(
        self,
        state: State,
        sid: SessionPath,
        since: Annotated[int | None, Parameter(ge=0, le=MAX_ID)] = None,
        attempt: Annotated[int | None, Parameter(ge=1, le=MAX_ID)] = None,
        wait: Annotated[float, Parameter(ge=0, le=WAIT_MAX_S)] = 0,
    ) -> NewsOut:
        """What the session's attempts (attempt `attempt` alone, if given) came to after
        version `since` (none: from now on), waiting up to `wait` seconds for something to
        happen; ask again with `since` = the answer's `version`."""
        return await use(state).news(sid, since, attempt, wait)

    @post("/{sid:str}/messages", sync_to_thread=True)
    def message(self, state: State, sid: SessionPath, data: JSONBody[MessageIn]) -> Response[Any]:
        markdown = use(state).message(sid, data.text)
        if markdown is None:
            return Response({"status": "recorded"}, status_code=202)
        return Response(markdown, media_type=MARKDOWN, status_code=200)

    @post("/{sid:str}/prompts", sync_to_thread=True)
    def prompt(self, state: State, sid: SessionPath, data: JSONBody[PromptIn]) -> Response[Any]:
        """A hook's prompt: recorded (202), or for a bare "continue" the dump to inject (200)."""
        markdown = use(state).prompt(sid, data.text, data.max_chars)
        if markdown is None:
            return Response({"status": "recorded"}, status_code=202)
        return Response(markdown, media_type=MARKDOWN, status_code=200)

    @post("/{sid:str}/actions", sync_to_thread=True, status_code=202)
    def record_actions(
        self, state: State, sid: SessionPath, data: JSONBody[ActionsIn]
    ) -> ActionsOut:
        """What the agent just did; the watches it calls for are added by themselves."""
        watches = use(state).record_actions(sid, list(data.actions))
        return ActionsOut(recorded=len(data.actions), watches=watches)

    @post("/{sid:str}/heartbeat", sync_to_thread=True, status_code=204)
    def heartbeat(self, state: State, sid: SessionPath) -> None:
        use(state).heartbeat(sid)


# Any call about a session counts as its activity (the use cases mark it); pages do not.
sessions_router = Router(path="/api/sessions", route_handlers=[SessionController])
