"""The MCP endpoint at /mcp: ctxd's session API as tools and resources for a model."""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

from litestar import Litestar
from litestar.datastructures import State
from litestar.types import Receive, Scope, Send
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp_types import Resource as MCPResource
from pydantic import Field, ValidationError

from service import __version__, redact
from service.discovery.actions import parse_action
from service.errors import CtxdError
from service.harness import HOOK_MAX_CHARS
from service.models import (
    SESSION_ID_PATTERN,
    JournalIn,
    JournalKind,
    JournalUpdate,
    SessionIn,
    SnapshotIn,
    WatchSpec,
)
from service.search import LIMIT_MAX, OFFSET_MAX
from service.usecases import UseCases

T = TypeVar("T")
Sid = Annotated[
    str, Field(pattern=SESSION_ID_PATTERN, description="the ctxd session id, a short slug")
]
Version = Annotated[int, Field(ge=1)]
LATEST_URI = "ctxd://sessions/{sid}/latest.md"

INSTRUCTIONS = """\
ctxd records the machine a long debugging session is about (processes with their flags, logs,
build artifacts, ports, GPUs) and the narrative you post (objective, attempts, findings,
decisions, next steps), as versioned Markdown dumps. Call `resume` first whenever you lost
context (after a compaction, a restart or a /clear): it tells you what ran, what was tried and
what to do next. While you work, post each attempt and finding with `add_entry` as it happens,
add watches for the processes, logs and artifacts you start, and `take_snapshot` before risky
steps. Find your session with `list_sessions` (pass your working directory as `cwd`)."""


def _run(call: Callable[[], T]) -> T:
    """Domain errors become tool errors a model can act on, with observed text redacted."""
    try:
        return call()
    except CtxdError as exc:
        hint = "; call list_sessions to see what exists" if exc.status == 404 else ""
        raise ToolError((redact.text(str(exc)) + hint)[:2000]) from None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
        )
        raise ToolError(redact.text(f"invalid input: {problems}")[:2000]) from None
    except ValueError as exc:
        raise ToolError(redact.text(str(exc))[:2000]) from None


def _given(**fields: Any) -> dict[str, Any]:
    """Only the arguments a model passed: the input models tell "omitted" from "null"."""
    return {k: v for k, v in fields.items() if v is not None}


class McpEndpoint:
    """An MCP server bound to one Litestar app: `serve` answers /mcp, `lifespan` runs it."""

    def __init__(self, max_body_bytes: int, host: str) -> None:
        self.state: State | None = None
        self.server = _Server(self, "ctxd", instructions=INSTRUCTIONS, version=__version__)
        _register_tools(self)
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
        session: Sid,
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
        session: Sid,
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
    def take_snapshot(session: Sid, note: str | None = None, force: bool = False) -> dict[str, Any]:
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
        session: Sid,
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
        session: Sid,
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
    def list_entries(session: Sid) -> list[dict[str, Any]]:
        """The session's journal entries with their ids, oldest first (for update_entry)."""
        entries = _run(lambda: ep.use().list_entries(session))
        return [e.model_dump(mode="json") for e in entries]

    @tool()
    def add_watch(session: Sid, watch: WatchSpec) -> dict[str, Any]:
        """Make every dump include something you started: a `process` (by `match`, a regex on
        its command line, or `pid`; children, `expect_ports`, `env` globs), a `log` (path or
        glob; last `lines`), an `artifact` (file, directory or glob: size, mtime, fingerprint),
        a `port` (with an optional health `url`), or a `command` allowed by the server.
        Add one as soon as you launch a server, a build or a long job."""
        return _run(lambda: ep.use().add_watch(session, watch)).model_dump(mode="json")

    @tool()
    def record_action(
        session: Sid,
        command: str | None = None,
        cwd: str | None = None,
        exit_status: int | None = None,
        output: str | None = None,
        background: bool = False,
        edited_path: str | None = None,
    ) -> dict[str, Any]:
        """Tell ctxd what you just did when no hook does it for you: a shell `command` you ran
        (with its `cwd`, `exit_status`, the tail of its `output`, whether it went to the
        `background`), or a file you edited (`edited_path`). ctxd then watches what it
        launched, logged, listened on or built, and lists it among recent commands."""
        given: dict[str, Any] = {"harness": "mcp"}
        if command is not None:
            given |= {"kind": "command", "command": command, "background": background}
            given |= _given(cwd=cwd, exit_status=exit_status, output_tail=output)
        elif edited_path is not None:
            given |= {"kind": "file_edit", "path": edited_path, **_given(cwd=cwd)}
        else:
            raise ToolError("give a `command` you ran or an `edited_path`")
        action = _run(lambda: parse_action(given))
        watches = _run(lambda: ep.use().record_actions(session, [action]))
        return {"recorded": 1, "watches": [w.model_dump(mode="json") for w in watches]}

    @tool()
    def list_watches(session: Sid) -> list[dict[str, Any]]:
        """What the session watches, with ids (for remove_watch)."""
        return [w.model_dump(mode="json") for w in _run(lambda: ep.use().list_watches(session))]

    @tool()
    def remove_watch(session: Sid, watch_id: int) -> str:
        """Stop watching something that no longer matters (a process you stopped for good, a
        log you no longer need), so dumps stay short."""
        _run(lambda: ep.use().remove_watch(session, watch_id))
        return f"removed watch {watch_id} from {session}"

    @tool()
    def list_snapshots(session: Sid) -> list[dict[str, Any]]:
        """Stored snapshots of the session's dump, newest first: version, time, trigger, how
        many signals and changes. Use it to pick versions for diff or resume(since=N)."""
        snapshots = _run(lambda: ep.use().list_snapshots(session))
        return [v.model_dump(mode="json") for v in snapshots]

    @tool()
    def diff(session: Sid, from_version: Version, to_version: Version) -> dict[str, Any]:
        """What changed between two versions: processes started and exited, log growth,
        artifact changes, new journal entries, and a unified diff of the two dumps."""
        result = _run(lambda: ep.use().diff(session, from_version, to_version))
        return result.model_dump(mode="json")

    @tool()
    def search(
        query: str,
        session: Sid | None = None,
        limit: Annotated[int, Field(ge=1, le=LIMIT_MAX)] = 20,
        offset: Annotated[int, Field(ge=0, le=OFFSET_MAX)] = 0,
    ) -> dict[str, Any]:
        """Search the history (journal, commands with their output, launches, every version's
        dump) of one session, or of all without `session`: "did we already try X, and what
        happened?". SQLite FTS5 syntax: words, "a phrase", prefix*, AND/OR/NOT, NEAR(a b, 10),
        column:term (kind, text, detail, status). Hits are best first, each with its kind, the
        version it links to, its time and a snippet with matches in **bold**."""
        return _run(lambda: ep.use().search(session, query, limit, offset)).model_dump(mode="json")


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
