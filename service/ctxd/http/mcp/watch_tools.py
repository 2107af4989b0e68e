"""The MCP tools about what a session watches and what it did: watches, actions, history."""

from typing import Annotated, Any

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from ctxd.discovery.actions import parse_action
from ctxd.http.mcp.common import SessionArg, Version, _given, _run
from ctxd.models import WatchSpec
from ctxd.usecases.search import LIMIT_MAX, OFFSET_MAX


def register_watch_tools(ep: Any) -> None:
    """`ep` is the McpEndpoint (its `server.tool` registers, `use()` reaches the use cases)."""
    tool = ep.server.tool

    @tool()
    def add_watch(session: SessionArg, watch: WatchSpec) -> dict[str, Any]:
        """Make every dump include something you started: a `process` (by `match`, a regex on
        its command line, or `pid`; children, `expect_ports`, `env` globs), a `log` (path or
        glob; last `lines`), an `artifact` (file, directory or glob: size, mtime, fingerprint),
        a `port` (with an optional health `url`), or a `command` allowed by the server.
        Add one as soon as you launch a server, a build or a long job."""
        return _run(lambda: ep.use().add_watch(session, watch)[0]).model_dump(mode="json")

    @tool()
    def record_action(
        session: SessionArg,
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
    def list_watches(session: SessionArg) -> list[dict[str, Any]]:
        """What the session watches, with ids (for remove_watch)."""
        return [w.model_dump(mode="json") for w in _run(lambda: ep.use().list_watches(session))]

    @tool()
    def remove_watch(session: SessionArg, watch_id: int) -> str:
        """Stop watching something that no longer matters (a process you stopped for good, a
        log you no longer need), so dumps stay short."""
        _run(lambda: ep.use().remove_watch(session, watch_id))
        return f"removed watch {watch_id} from {session}"

    @tool()
    def list_snapshots(session: SessionArg) -> list[dict[str, Any]]:
        """Stored snapshots of the session's dump, newest first: version, time, trigger, how
        many signals and changes. Use it to pick versions for diff or resume(since=N)."""
        snapshots = _run(lambda: ep.use().list_snapshots(session))
        return [v.model_dump(mode="json") for v in snapshots]

    @tool()
    def diff(session: SessionArg, from_version: Version, to_version: Version) -> dict[str, Any]:
        """What changed between two versions: processes started and exited, log growth,
        artifact changes, new journal entries, and a unified diff of the two dumps."""
        result = _run(lambda: ep.use().diff(session, from_version, to_version))
        return result.model_dump(mode="json")

    @tool()
    def search(
        query: str,
        session: SessionArg | None = None,
        limit: Annotated[int, Field(ge=1, le=LIMIT_MAX)] = 20,
        offset: Annotated[int, Field(ge=0, le=OFFSET_MAX)] = 0,
    ) -> dict[str, Any]:
        """Search the history (journal, commands with their output, launches, every version's
        dump) of one session, or of all without `session`: "did we already try X, and what
        happened?". SQLite FTS5 syntax: words, "a phrase", prefix*, AND/OR/NOT, NEAR(a b, 10),
        column:term (kind, text, detail, status). Hits are best first, each with its kind, the
        version it links to, its time and a snippet with matches in **bold**."""
        return _run(lambda: ep.use().search(session, query, limit, offset)).model_dump(mode="json")
