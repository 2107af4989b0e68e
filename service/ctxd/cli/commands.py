"""What each `ctxd` subcommand does: one call to the service through the one client."""

import argparse
import json
import os
import sys
from typing import Any

from ctxd.cli import env
from ctxd.cli.client import Client, Unreachable, body, detail

URL = env.url()  # the service, unless --url says otherwise
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


# Exit statuses a script can branch on (argparse itself exits 2 on a bad command line).
EXIT_SERVICE, EXIT_USAGE, EXIT_NOT_FOUND = 1, 2, 3


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
    )  # fmt: skip
    serve_loop.run(config)
    return 0


def token(args: argparse.Namespace) -> int:
    from ctxd.http.access import new_token_file
    from ctxd.settings import Settings

    data_dir = args.data_dir or Settings().data_dir
    path = (data_dir / "token").resolve()
    new_token_file(path)
    print(f"wrote a new token to {path}; start ctxd with CTXD_TOKEN_FILE={path}")
    return 0


def session(args: argparse.Namespace) -> int:
    keys = ("title", "objective", "quiet_after_s", "schedule_every_s", "cwd")
    # `is not None`: 0 and "" are values (`--schedule-every 0` switches a schedule off)
    fields = {k: v for k in keys if (v := getattr(args, k)) is not None}
    _print_json(_call(args, "PUT", f"/api/sessions/{args.session}", json=fields))
    return 0


def snapshot(args: argparse.Namespace) -> int:
    asked = {"note": args.note} if args.note else None
    result = _call(args, "POST", f"/api/sessions/{args.session}/snapshots", json=asked)
    if args.json:
        _print_json(result)
    else:
        header = result["header"]
        print(f"{header['session']} v{header['version']} ({len(result['signals'])} signals)")
    return 0


def resume(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"fresh": "false" if args.stored else "true"}
    if args.max_chars:
        params["max_chars"] = args.max_chars
    if args.since:
        params["since"] = args.since
    _markdown(args, _call(args, "GET", f"/api/sessions/{args.session}/resume", params=params))
    return 0


def watch(args: argparse.Namespace) -> int:
    spec: dict[str, Any] = {"kind": args.kind}
    if args.kind == "process":
        if args.pid:
            spec["pid"] = args.pid
        elif args.name:
            spec["name"] = args.name
        elif args.target:
            spec["match"] = args.target
        spec.update(children=not args.no_children, expect_ports=args.expect_port, env=args.env)
    elif args.kind in ("log", "artifact"):
        spec["path"] = args.target
        if args.kind == "log":
            given = (("lines", args.lines), ("files", args.files), ("errors", args.errors))
            spec.update({k: v for k, v in given if v})
    elif args.kind == "command":
        spec["name"] = args.target or args.name
        options = (("timeout_s", args.timeout), ("cwd", args.cwd))
        spec.update({k: v for k, v in options if v is not None})
    elif args.kind == "slurm":
        chosen = (("job", args.target), ("name", args.name), ("mine", args.mine or None))
        spec.update({k: v for k, v in chosen if v})
        if args.workdir:
            spec["workdir"] = os.path.abspath(args.workdir)
    elif args.kind == "port":
        spec["port"] = args.target
        if args.health_url:
            spec["url"] = args.health_url
    elif args.target:  # a kind this command has no options for: its target names it
        spec["target"] = args.target
    if args.host:
        spec["host"] = args.host
    _print_json(_call(args, "POST", f"/api/sessions/{args.session}/watches", json=spec))
    return 0


def action(args: argparse.Namespace) -> int:
    done: dict[str, Any] = {"harness": "cli", "cwd": args.cwd}
    if args.command is not None:
        done |= {"kind": "command", "command": args.command, "background": args.background}
        if args.exit_status is not None:
            done["exit_status"] = args.exit_status
    else:
        done |= {"kind": "file_edit", "path": os.path.abspath(args.edited)}
    path = f"/api/sessions/{args.session}/actions"
    _print_json(_call(args, "POST", path, json={"actions": [done]}))
    return 0


def note(args: argparse.Namespace) -> int:
    entry = {"kind": args.kind, "text": args.text}
    entry.update({k: v for k in ("outcome", "status", "key") if (v := getattr(args, k))})
    _print_json(_call(args, "POST", f"/api/sessions/{args.session}/journal", json=entry))
    return 0


def update(args: argparse.Namespace) -> int:
    fields = {k: v for k in ("status", "outcome", "text") if (v := getattr(args, k)) is not None}
    path = f"/api/sessions/{args.session}/journal/{args.entry}"
    _print_json(_call(args, "PATCH", path, json=fields))
    return 0


def continue_(args: argparse.Namespace) -> int:
    dump = _call(args, "POST", f"/api/sessions/{args.session}/messages", json={"text": ""})
    _markdown(args, dump)
    return 0


def message(args: argparse.Namespace) -> int:
    result = _call(args, "POST", f"/api/sessions/{args.session}/messages", json={"text": args.text})
    if isinstance(result, str):
        _markdown(args, result)  # a blank message was the continue signal: a dump came back
    elif args.json:
        _print_json(result)
    return 0


def simple(args: argparse.Namespace) -> int:
    result = _call(args, args.method, args.path.format(**vars(args)))
    if args.json or result != "":
        _print_json(result if result != "" else {"status": "ok"})
    return 0


def show(args: argparse.Namespace) -> int:
    path = f"/api/sessions/{args.session}/snapshots/{args.version}"
    if args.json:
        _print_json(_call(args, "GET", path))
    else:
        print(_call(args, "GET", f"{path}/markdown"), end="")
    return 0


def diff(args: argparse.Namespace) -> int:
    params = {"from": args.from_version, "to": args.to_version}
    result = _call(args, "GET", f"/api/sessions/{args.session}/diff", params=params)
    if args.json:
        _print_json(result)
        return 0
    for change in result["changes"]:
        print(f"- {change['text']}")
    print(("\n" if result["changes"] else "") + result["markdown_diff"])
    return 0


def search(args: argparse.Namespace) -> int:
    """One argument is a query over every session; two are a session and a query."""
    sid, query = (args.first, args.query) if args.query is not None else (None, args.first)
    path = f"/api/sessions/{sid}/search" if sid else "/api/search"
    params = {"q": query, "limit": args.limit, "offset": args.offset}
    result = _call(args, "GET", path, params=params)
    if args.json:
        _print_json(result)
        return 0
    for hit in result["hits"]:
        where = f"v{hit['version']}" if hit["version"] else "before v1"
        at = (hit["at"] or "")[:19].replace("T", " ")
        print(f"{hit['session']} {where} {at} [{hit['kind']}] {args.url.rstrip('/')}{hit['link']}")
        print("    " + " ".join(hit["snippet"].split()))
    if not result["hits"]:
        print("no hits")
    elif result["more"]:
        print(f"more: --offset {args.offset + args.limit}")
    return 0


def hook(args: argparse.Namespace) -> int:
    from ctxd.harness import claude, hook
    from ctxd.harness.adapter import hook_command

    if args.print_config:
        _print_json(claude.config(hook_command(claude.ADAPTER.name, args.url)))
        return 0
    return hook.run(claude.ADAPTER, args.url, sys.stdin, sys.stdout, sys.stderr)


def sessions(args: argparse.Namespace) -> int:
    params = {"cwd": args.cwd} if args.cwd else None
    _print_json(_call(args, "GET", "/api/sessions", params=params))
    return 0


def prune(args: argparse.Namespace) -> int:
    params = {"keep_days": args.keep_days} if args.keep_days else None
    _print_json(_call(args, "POST", "/api/prune", params=params))
    return 0


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    try:
        response = Client(args.url).call(method, path, **kwargs)
    except Unreachable as exc:
        raise CliError(f"{exc}; start it with `ctxd serve` or `make run`, or pass --url") from None
    if response.status_code >= 400:
        status = response.status_code
        code, hint = HINTS.get(status, (EXIT_SERVICE, "see the service log"))
        raise CliError(f"{method} {path}: HTTP {status}: {detail(response)} ({hint})", code)
    return body(response)


HINTS = {
    400: (EXIT_USAGE, "fix the input; see `ctxd COMMAND --help`"),
    403: (EXIT_USAGE, "the server's configuration does not allow it"),
    404: (EXIT_NOT_FOUND, "see what exists: `ctxd sessions`, `ctxd watches|journal|snapshots SID`"),
    409: (EXIT_SERVICE, "a limit was reached; remove something first"),
    413: (EXIT_USAGE, "the request is larger than the server accepts"),
}


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def _markdown(args: argparse.Namespace, markdown: str) -> None:
    if args.json:
        _print_json({"session": args.session, "markdown": markdown})
    else:
        print(markdown, end="")
