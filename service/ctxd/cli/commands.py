"""What each `ctxd` subcommand does: one call to the service through the one client, and
its answer printed for a person (`cli/output.py`) or, with `--json`, as the service's JSON."""

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx

from ctxd.cli import output
from ctxd.cli.client import Client, Unreachable, body, detail
from ctxd.hookclient import env

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


# Exit statuses a script can branch on (argparse itself exits 2 on a bad command line).
EXIT_SERVICE, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_NOTHING = 1, 2, 3, 4


class CliError(Exception):
    """A failure the user can act on: printed as one line; `code` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_SERVICE) -> None:
        super().__init__(message)
        self.code = code


def serve(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from ctxd.http import serve_loop
    from ctxd.http.access import token_problem
    from ctxd.http.app import create_app
    from ctxd.settings import Settings

    given = ("host", "port", "data_dir", "access_log")
    overrides = {k: v for k in given if (v := getattr(args, k)) is not None}
    if "port" not in overrides and not os.environ.get("CTXD_PORT"):
        overrides.update(env.served_port())  # the port CTXD_URL names: the one the CLI calls
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        problems = (e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise CliError("; ".join(problems)) from None
    if (problem := token_problem(settings)) is not None:
        raise CliError(problem)
    if settings.host not in LOOPBACK and not settings.token:
        raise CliError(
            f"refusing to listen on {settings.host} without a token: "
            "run `ctxd token --new` and set CTXD_TOKEN_FILE (or CTXD_TOKEN)"
        )
    config = uvicorn.Config(
        create_app(settings), host=settings.host, port=settings.port, log_level="info",
        access_log=settings.access_log,
        # a waiter's long poll does not hold a stop: it asks again of the next ctxd
        timeout_graceful_shutdown=2,
    )  # fmt: skip
    serve_loop.run(config)
    return 0


def token(args: argparse.Namespace) -> int:
    from ctxd.http.access import new_token_file
    from ctxd.settings import Settings

    data_dir = args.data_dir or Settings().data_dir
    path = (data_dir / "token").resolve()
    new_token_file(path)
    said = f"wrote a new token to {path}; start ctxd with CTXD_TOKEN_FILE={path}"
    _report(args, {"token_file": str(path)}, lambda _: said)
    return 0


def session(args: argparse.Namespace) -> int:
    keys = ("title", "objective", "quiet_after_s", "schedule_every_s", "cwd")
    # `is not None`: 0 and "" are values (`--schedule-every 0` switches a schedule off)
    fields = {k: v for k in keys if (v := getattr(args, k)) is not None}
    response = _request(args, "PUT", _session_path(args.session), json=fields)
    created = response.status_code == 201
    changed = [k.removesuffix("_s").replace("_", " ") for k in fields]
    _report(args, body(response), lambda s: output.session_saved(s, created, changed))
    return 0


def sessions(args: argparse.Namespace) -> int:
    params = {"cwd": args.cwd} if args.cwd else None
    _report(args, _call(args, "GET", "/api/sessions", params=params), output.sessions)
    return 0


def heartbeat(args: argparse.Namespace) -> int:
    _call(args, "POST", _session_path(args.session, "/heartbeat"))
    _report(args, {"status": "ok"}, lambda _: f"marked session {args.session} active")
    return 0


def snapshot(args: argparse.Namespace) -> int:
    asked = {"note": args.note} if args.note else None
    result = _call(args, "POST", _session_path(args.session, "/snapshots"), json=asked)
    _report(args, result, output.snapshot_taken)
    return 0


def snapshots(args: argparse.Namespace) -> int:
    found = _call(args, "GET", _session_path(args.session, "/snapshots"))
    _report(args, found, lambda f: output.snapshots(args.session, f))
    return 0


def resume(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"fresh": "false" if args.stored else "true"}
    if args.max_chars:
        params["max_chars"] = args.max_chars
    if args.since:
        params["since"] = args.since
    _markdown(args, _call(args, "GET", _session_path(args.session, "/resume"), params=params))
    return 0


WAIT_POLL_S = 50  # one long poll of `ctxd wait`, within the client's own timeout


def wait(args: argparse.Namespace) -> int:
    """`ctxd wait SESSION [--attempt N] [--since V] [--timeout S]`: blocks until one of the
    session's attempts (attempt N) comes up, dies, is stuck or ends (after version V; from now
    on without it), prints what happened and exits 0; exits EXIT_NOTHING when nothing did
    within S seconds. The server holds each ask (no polling on either side)."""
    deadline = time.monotonic() + args.timeout
    params: dict[str, Any] = {"since": args.since} if args.since is not None else {}
    if args.attempt is not None:
        params["attempt"] = args.attempt
    while True:
        left = deadline - time.monotonic()
        params["wait"] = round(max(0.0, min(left, WAIT_POLL_S)), 1)
        answer = _call(args, "GET", _session_path(args.session, "/news"), params=params)
        if answer["news"]:
            if args.json:
                _print_json(answer)
            for told in [] if args.json else answer["news"]:
                print(f"v{told['version']}: {told['text']}")
            return 0
        params["since"] = answer["version"]
        if left <= WAIT_POLL_S:
            about = f"attempt {args.attempt}" if args.attempt is not None else "its attempts"
            still = " (still pending)" if answer["pending"] else ""
            print(f"{args.session}: nothing happened to {about}{still} within {args.timeout:g} s",
                  file=sys.stderr)  # fmt: skip
            return EXIT_NOTHING


# What TARGET is for the kinds that cannot do without it.
TARGET_OF_KIND = {
    "log": "a path or glob",
    "artifact": "a file, folder or glob",
    "port": "a port number",
    "command": "a command's name in the server's allowlist",
}


def watch(args: argparse.Namespace) -> int:
    target = args.target if args.kind != "command" else args.target or args.name
    if args.kind in TARGET_OF_KIND and not target:
        needed = TARGET_OF_KIND[args.kind]
        raise CliError(f"a {args.kind} watch needs TARGET: {needed}", EXIT_USAGE)
    if args.kind == "port" and not target.isdigit():
        raise CliError(f"a port watch's TARGET is a port number, not {target!r}", EXIT_USAGE)
    spec = {"kind": args.kind, **_watch_fields(args, target)}
    if args.host:
        spec["host"] = args.host
    response = _request(args, "POST", _session_path(args.session, "/watches"), json=spec)
    added = response.status_code == 201  # 200: the session's watch of this very spec
    _report(args, body(response), lambda w: output.watched(w, added))
    return 0


def _watch_fields(args: argparse.Namespace, target: str | None) -> dict[str, Any]:
    """The spec's fields of `args.kind` from the options given (the service checks them)."""
    chosen: tuple[tuple[str, Any], ...]
    if args.kind == "process":
        chosen = (("pid", args.pid), ("name", args.name), ("match", target))
        fields = {k: v for k, v in chosen if v is not None}
        return fields | {
            "children": not args.no_children, "expect_ports": args.expect_port, "env": args.env
        }  # fmt: skip
    if args.kind == "log":
        chosen = (("lines", args.lines), ("files", args.files), ("errors", args.errors))
        return {"path": target} | {k: v for k, v in chosen if v}
    if args.kind == "artifact":
        return {"path": target}
    if args.kind == "command":
        chosen = (("timeout_s", args.timeout), ("cwd", args.cwd))
        return {"name": target} | {k: v for k, v in chosen if v is not None}
    if args.kind == "slurm":
        workdir = os.path.abspath(args.workdir) if args.workdir else None
        chosen = (("job", target), ("name", args.name), ("mine", args.mine), ("workdir", workdir))
        return {k: v for k, v in chosen if v}
    if args.kind == "port":
        return {"port": int(target or 0)} | ({"url": args.health_url} if args.health_url else {})
    if args.kind == "ray":  # TARGET: the dashboard's URL (a bare port: this machine's), or auto
        url = f"http://127.0.0.1:{target}" if target and target.isdigit() else target
        where = ("address", "auto") if target == "auto" else ("url", url)
        chosen = (where, ("actors", args.name))
        return {k: v for k, v in chosen if v}
    return {"target": target} if target else {}  # a kind this command has no options for


def watches(args: argparse.Namespace) -> int:
    found = _call(args, "GET", _session_path(args.session, "/watches"))
    _report(args, found, lambda f: output.watches(args.session, f))
    return 0


def unwatch(args: argparse.Namespace) -> int:
    _call(args, "DELETE", _session_path(args.session, f"/watches/{args.watch_id}"))
    said = f"removed watch {args.watch_id} from session {args.session}"
    _report(args, {"status": "ok"}, lambda _: said)
    return 0


def action(args: argparse.Namespace) -> int:
    done: dict[str, Any] = {"harness": "cli", "cwd": args.cwd}
    if args.command is not None:
        done |= {"kind": "command", "command": args.command, "background": args.background}
        if args.exit_status is not None:
            done["exit_status"] = args.exit_status
        exited = f" (exit {args.exit_status})" if args.exit_status is not None else ""
        what = f"`{args.command}`{exited}"
    else:
        done |= {"kind": "file_edit", "path": os.path.abspath(args.edited)}
        what = f"the edit of {done['path']}"
    result = _call(args, "POST", _session_path(args.session, "/actions"), json={"actions": [done]})
    _report(args, result, lambda r: output.actions(args.session, what, r))
    return 0


def note(args: argparse.Namespace) -> int:
    entry = {"kind": args.kind, "text": args.text}
    entry.update({k: v for k in ("outcome", "status", "key") if (v := getattr(args, k))})
    added = _call(args, "POST", _session_path(args.session, "/journal"), json=entry)
    _report(args, added, lambda e: output.noted(e, "added"))
    return 0


def update(args: argparse.Namespace) -> int:
    fields = {k: v for k in ("status", "outcome", "text") if (v := getattr(args, k)) is not None}
    path = _session_path(args.session, f"/journal/{args.entry}")
    _report(args, _call(args, "PATCH", path, json=fields), lambda e: output.noted(e, "updated"))
    return 0


def journal(args: argparse.Namespace) -> int:
    entries = _call(args, "GET", _session_path(args.session, "/journal"))
    _report(args, entries, lambda e: output.journal(args.session, e))
    return 0


def continue_(args: argparse.Namespace) -> int:
    path = _session_path(args.session, "/messages")
    _markdown(args, _call(args, "POST", path, json={"text": ""}))
    return 0


def message(args: argparse.Namespace) -> int:
    result = _call(args, "POST", _session_path(args.session, "/messages"), json={"text": args.text})
    if isinstance(result, str):
        _markdown(args, result)  # a blank message was the continue signal: a dump came back
    else:
        _report(args, result, lambda _: f"recorded the message in session {args.session}")
    return 0


def show(args: argparse.Namespace) -> int:
    path = _session_path(args.session, f"/snapshots/{args.version}")
    if args.json:
        _print_json(_call(args, "GET", path))
    else:
        print(_call(args, "GET", f"{path}/markdown"), end="")
    return 0


def diff(args: argparse.Namespace) -> int:
    params = {"from": args.from_version, "to": args.to_version}
    result = _call(args, "GET", _session_path(args.session, "/diff"), params=params)
    if args.json:
        _print_json(result)
        return 0
    for change in result["changes"]:
        print(f"- {change['text']}")
    print(("\n" if result["changes"] else "") + result["markdown_diff"])
    return 0


def search(args: argparse.Namespace) -> int:
    """`ctxd search [SESSION] QUERY`: one word is a query over every session; two are a
    session and a query."""
    if not args.words:
        raise CliError("give a QUERY: ctxd search [SESSION] QUERY", EXIT_USAGE)
    if len(args.words) > 2:
        raise CliError(
            "give a SESSION and a QUERY at most; a query of several words goes in quotes: "
            "ctxd search [SESSION] 'WORDS ...'",
            EXIT_USAGE,
        )
    sid, query = args.words if len(args.words) == 2 else (None, args.words[0])
    path = _session_path(sid, "/search") if sid else "/api/search"
    params = {"q": query, "limit": args.limit, "offset": args.offset}
    try:
        result = _call(args, "GET", path, params=params)
    except CliError as exc:
        if sid is None or exc.code != EXIT_NOT_FOUND:
            raise
        every = f"search every session for both words: ctxd search {shlex.quote(f'{sid} {query}')}"
        raise CliError(f"{exc}; or {every}", exc.code) from None
    _report(args, result, lambda r: output.search_hits(args.url, r, args.limit, args.offset))
    return 0


def hook(args: argparse.Namespace) -> int:
    """`ctxd hook HARNESS --print-config` (the hook itself is run before argparse)."""
    import tempfile
    from pathlib import Path

    from ctxd.harness.registry import adapter

    for where in ("CODEX_HOME", "GEMINI_CLI_HOME", "XDG_CONFIG_HOME"):  # the user's own files
        os.environ.pop(where, None)
    with tempfile.TemporaryDirectory() as empty:
        home = Path(empty)
        hooks_file = adapter(args.harness).plan(args.url, "user", home, home, False)[0]
    print(hooks_file.after, end="")
    return 0


def prune(args: argparse.Namespace) -> int:
    params = {"keep_days": args.keep_days} if args.keep_days else None
    result = _call(args, "POST", "/api/prune", params=params)
    _report(args, result, lambda r: output.pruned(r["removed"], args.keep_days))
    return 0


def scrub(args: argparse.Namespace) -> int:
    """Values piped on stdin (never on the command line, where `ps` shows them) are scrubbed
    with those ctxd learned by itself."""
    values = [] if sys.stdin.isatty() else [v.strip() for v in sys.stdin if v.strip()]
    result = _call(args, "POST", "/api/scrub", json={"values": values})
    _report(args, result, output.scrubbed)
    return 0


def health(args: argparse.Namespace) -> int:
    _report(args, _call(args, "GET", "/health"), lambda r: output.health(args.url, r))
    return 0


def _session_path(sid: str, tail: str = "") -> str:
    """The API path of session `sid`; a '/' would make it another path: said here, in the
    service's words (imported only then: the models cost every call their import)."""
    if "/" in sid:
        from ctxd.models.base import SESSION_ID_RULE

        raise CliError(f"{sid!r}: {SESSION_ID_RULE}", EXIT_USAGE)
    return f"/api/sessions/{quote(sid, safe='')}{tail}"


def _request(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """The service's answer when it is a success; else a CliError in the CLI's words."""
    try:
        response = Client(args.url).call(method, path, **kwargs)
    except Unreachable as exc:
        start = env.start_command(args.url)
        raise CliError(f"{exc}; start it with `{start}`, or pass --url") from None
    if response.status_code >= 400:
        status = response.status_code
        code, hint = HINTS.get(status, (EXIT_SERVICE, "see the service log"))
        hint = hint.format(command=getattr(args, "command_name", None) or "COMMAND")
        raise CliError(f"{in_cli_words(detail(response))} (HTTP {status}; {hint})", code)
    return response


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    return body(_request(args, method, path, **kwargs))


HINTS = {
    400: (EXIT_USAGE, "fix the input; see `ctxd {command} --help`"),
    403: (EXIT_USAGE, "the server's configuration does not allow it"),
    404: (EXIT_NOT_FOUND, "see what exists: `ctxd sessions`, `ctxd watches|journal|snapshots SID`"),
    409: (EXIT_SERVICE, "a limit was reached; remove something first"),
    413: (EXIT_USAGE, "the request is larger than the server accepts"),
}

# The API names JSON fields; the command line has TARGET and flags for them.
IN_CLI_WORDS = (
    ("give exactly one of 'pid', 'match' or 'name'", "give one of a regex TARGET, --pid or --name"),
    (
        "give exactly one of 'job', 'name' or 'mine': true",
        "give one of a job id TARGET, --name or --mine",
    ),
    ("'workdir' narrows 'mine': true", "--workdir goes with --mine"),
    ("give exactly one of 'name' or 'argv'", "give the command's name as TARGET"),
    ("a 'fact' entry needs a 'key' (its value goes in 'text')", "a fact needs --key NAME"),
    ("kind: Input should be", "KIND should be"),
)


def in_cli_words(said: str) -> str:
    """What the service said, with its field names put as the CLI's arguments."""
    said = said.removeprefix("body: ")  # the request as a whole: nothing to point at
    for api, cli in IN_CLI_WORDS:
        said = said.replace(api, cli)
    return said


def _report(args: argparse.Namespace, result: Any, line: Callable[[Any], str]) -> None:
    """The answer as JSON with --json; else what `line` makes of it, for a person."""
    if args.json:
        _print_json(result)
    else:
        print(line(result))


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def _markdown(args: argparse.Namespace, markdown: str) -> None:
    if args.json:
        _print_json({"session": args.session, "markdown": markdown})
    else:
        print(markdown, end="")
