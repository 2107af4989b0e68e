"""The MCP endpoint at /mcp: ctxd's session API as tools and resources for a model."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from litestar import Litestar
from litestar.datastructures import State
from litestar.types import Receive, Scope, Send
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp_types import Resource as MCPResource
from pydantic import Field

from ctxd import __version__, redact
from ctxd.errors import CtxdError
from ctxd.harness.policy import HOOK_MAX_CHARS
from ctxd.http.mcp import sdk as mcp_sdk
from ctxd.http.mcp.common import SessionArg, Version, _given, _run
from ctxd.http.mcp.watch_tools import register_watch_tools
from ctxd.models import (
    JournalIn,
    JournalKind,
    JournalUpdate,
    SessionIn,
    SnapshotIn,
)
from ctxd.snapshotter.news import WAIT_MAX_S
from ctxd.usecases.operations import UseCases

LATEST_URI = "ctxd://sessions/{sid}/latest.md"

INSTRUCTIONS = """\
ctxd records the machine a long debugging session is about (processes with their flags, logs,
build artifacts, ports, GPUs) and the narrative you post (objective, attempts, findings,
decisions, next steps), as versioned Markdown dumps. Call `resume` first whenever you lost
context (after a compaction, a restart or a /clear): it tells you what ran, what was tried and
what to do next. While you work, post each attempt and finding with `add_entry` as it happens,
add watches for the processes, logs and artifacts you start, and `take_snapshot` before risky
steps. To wait for something you launched to come up or fail, call `wait_for_news` rather than
sleeping and polling. Find your session with `list_sessions` (pass your working directory as
`cwd`)."""


class McpEndpoint:
    """An MCP server bound to one Litestar app: `serve` answers /mcp, `lifespan` runs it."""

    def __init__(self, max_body_bytes: int, host: str) -> None:
        self.state: State | None = None
        mcp_sdk.import_server()  # idempotent; the mount has run it before the SDK's imports
        self.server = _Server(
            self,
            "ctxd",
            instructions=INSTRUCTIONS,
            version=__version__,
            request_state_security=mcp_sdk.request_state_security(),
        )
        _register_tools(self)
        register_watch_tools(self)
        _register_resources(self)
        # Builds the session manager; its Starlette wrapper is not used, we mount the bare
        # ASGI app so Litestar's routing decides the path. The SDK turns on DNS-rebinding
        # checks for a loopback host, and caps request bodies like the HTTP API does.
        self.server.streamable_http_app(max_request_body_size=max_body_bytes, host=host)
        self.app = StreamableHTTPASGIApp(self.server.session_manager)

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The bearer token was checked by the access middleware in front of every route.
        await self.app(scope, receive, send)  # type: ignore[arg-type]

    @asynccontextmanager
    async def lifespan(self, app: Litestar) -> AsyncIterator[None]:
        """Runs after the app's own lifespan set up the snapshotter, so tools can reach it."""
        self.state = app.state
        async with self.server.session_manager.run():
            yield
        self.state = None

    def use(self) -> UseCases:
        if self.state is None:
            raise ToolError("ctxd is starting or stopping; try again in a moment")
        return self.state.usecases


class _Server(MCPServer[Any]):
    """Lists one resource per session: the latest stored dump, which changes as work goes on."""

    def __init__(self, endpoint: McpEndpoint, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.endpoint = endpoint

    async def list_resources(self) -> list[MCPResource]:
        listed = await super().list_resources()
        if self.endpoint.state is None:
            return listed
        for s in self.endpoint.use().list_sessions():
            if s.versions:
                listed.append(
                    MCPResource(
                        uri=LATEST_URI.format(sid=s.id),
                        name=f"{s.id}-latest",
                        title=f"Latest context dump of {s.id}"
                        + (f": {s.title}" if s.title else ""),
                        description=f"version {s.versions}; objective: {s.objective[:200]}",
                        mime_type="text/markdown",
                    )
                )
        return listed


def _register_tools(ep: McpEndpoint) -> None:
    tool = ep.server.tool

    @tool()
    def list_sessions(
        cwd: Annotated[str | None, Field(max_length=4096)] = None,
    ) -> list[dict[str, Any]]:
        """Sessions, newest activity first. Call this first to find your session id; pass
        your working directory as `cwd` to get only the sessions scoped to it (deepest first)."""
        return [s.model_dump(mode="json") for s in _run(lambda: ep.use().list_sessions(cwd))]

    @tool()
    def put_session(
        session: SessionArg,
        title: str | None = None,
        objective: str | None = None,
        cwd: str | None = None,
        quiet_after_s: int | None = None,
        schedule_every_s: int | None = None,
    ) -> dict[str, Any]:
        """Create a session (or update its title, objective, cwd scope, quiet time or schedule:
        a snapshot every `schedule_every_s` seconds, 0 for none). Call it once when you start
        a long piece of work, with the objective in one or two sentences, and again when the
        objective changes. Omitted fields stay as they are."""
        given = _given(
            title=title,
            objective=objective,
            cwd=cwd,
            quiet_after_s=quiet_after_s,
            schedule_every_s=schedule_every_s,
        )
        data = _run(lambda: SessionIn(**given))
        result, _ = _run(lambda: ep.use().put_session(session, data))
        return result.model_dump(mode="json")

    @tool()
    def resume(
        session: SessionArg,
        max_chars: Annotated[int | None, Field(ge=200, le=10_000_000)] = HOOK_MAX_CHARS,
        fresh: bool = True,
        since: Version | None = None,
    ) -> str:
        """The context dump to pick up work from, as Markdown: objective, what is happening now,
        attempts and their outcomes, next steps, processes, ports, artifacts, log tails. Call it
        first after losing context. `fresh` observes the machine now (and stores a version if
        anything changed); `fresh=false` returns the latest stored dump. `max_chars` cuts it to
        fit (logs go first; null for the whole dump). `since=N` leads with changes since vN."""
        return _run(lambda: ep.use().resume(session, fresh=fresh, max_chars=max_chars, since=since))

    @tool()
    async def wait_for_news(
        session: SessionArg,
        attempt: Annotated[int | None, Field(ge=1)] = None,
        since: Annotated[int | None, Field(ge=0)] = None,
        wait_s: Annotated[float, Field(ge=0, le=WAIT_MAX_S)] = 60,
    ) -> dict[str, Any]:
        """Wait for what your launches come to instead of sleeping or polling: returns as
        soon as one of the session's attempts (attempt `attempt` alone, if given) comes up
        (its port answers), dies (with its error and log), is stuck or ends after version
        `since` (omitted: from now on), or after `wait_s` seconds with `news` empty. Call
        again with `since` = the answer's `version`; `pending` false: nothing is starting."""
        cases = ep.use()
        try:
            found = await cases.news(session, since, attempt, wait_s)
        except CtxdError as exc:
            raise ToolError(redact.text(str(exc))[:2000]) from None
        return found.model_dump(mode="json")

    @tool()
    def take_snapshot(
        session: SessionArg, note: str | None = None, force: bool = False
    ) -> dict[str, Any]:
        """Store a new version of the session's dump now. Call it before a risky step (a long
        build, a restart, a model load) or after a milestone, with a short `note` saying why.
        When nothing changed the latest version is confirmed instead, unless `force`."""
        asked = _run(lambda: SnapshotIn(note=note, force=force))  # the API's own bounds
        cases = ep.use()
        s = _run(lambda: cases.take(session, note=asked.note, force=asked.force))
        h = s.header
        return {
            "session": h.session,
            "version": h.version,
            "taken_at": h.taken_at.isoformat(),
            "previous_version": h.previous_version,
            "signals": [sig.text for sig in s.signals],
            "changes": [c.text for c in s.changes],
            "markdown": str(cases.snap.session_dir(session) / "latest.md"),
        }

    @tool()
    def add_entry(
        session: SessionArg,
        kind: JournalKind,
        text: str,
        outcome: str | None = None,
        status: str | None = None,
        key: str | None = None,
        concerns: list[int] | None = None,
    ) -> dict[str, Any]:
        """Post to the session's narrative as you work, one entry per event: `attempt` (what
        you tried; `outcome`; status running/failed/succeeded/abandoned), `finding`,
        `hypothesis` (open/confirmed/refuted), `decision`, `next` (open/done), `question`
        (open/answered), `note`, `fact` (pinned in every dump: `key` = name, `text` = value),
        `objective`. `concerns` lists ids of the entries this one is about (a finding about
        an attempt). Returns the entry with its id, for update_entry."""
        given = _given(outcome=outcome, status=status, key=key, concerns=concerns)
        entry = _run(lambda: JournalIn(kind=kind, text=text, **given))
        return _run(lambda: ep.use().add_entry(session, entry)).model_dump(mode="json")

    @tool()
    def update_entry(
        session: SessionArg,
        entry_id: int,
        status: str | None = None,
        outcome: str | None = None,
        text: str | None = None,
        concerns: list[int] | None = None,
    ) -> dict[str, Any]:
        """Change a journal entry as work goes on: an attempt that was `running` has `failed`
        or `succeeded` (with its `outcome`), a next step is `done`, a hypothesis `confirmed`;
        `concerns` replaces the ids of the entries it is about. Omitted fields stay as they
        are; ids come from add_entry or list_entries."""
        given = _given(status=status, outcome=outcome, text=text, concerns=concerns)
        update = _run(lambda: JournalUpdate(**given))
        return _run(lambda: ep.use().update_entry(session, entry_id, update)).model_dump(
            mode="json"
        )

    @tool()
    def list_entries(session: SessionArg) -> list[dict[str, Any]]:
        """The session's journal entries with their ids, oldest first (for update_entry)."""
        entries = _run(lambda: ep.use().list_entries(session))
        return [e.model_dump(mode="json") for e in entries]


def _register_resources(ep: McpEndpoint) -> None:
    @ep.server.resource(
        LATEST_URI,
        name="latest-dump",
        description="The latest stored context dump of a session, as Markdown",
        mime_type="text/markdown",
    )
    def latest(sid: str) -> str:
        try:
            return ep.use().latest_dump(sid)
        except CtxdError as exc:
            raise ResourceError(redact.text(str(exc))) from None
