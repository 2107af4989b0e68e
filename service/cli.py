"""The `ctxd` command line: serve, and thin HTTP calls to a running service."""

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

DEFAULT_URL = os.environ.get("CTXD_URL", "http://127.0.0.1:8765")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class CliError(Exception):
    """A failure the user can act on: printed as one line, exit status 1 (2 for usage)."""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"ctxd: {exc}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxd", description=__doc__)
    parser.add_argument(
        "--url", default=DEFAULT_URL, help="the running service (default %(default)s)"
    )
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    p = sub.add_parser("serve", help="run the service")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--data-dir", type=Path)
    p.set_defaults(func=serve)

    p = sub.add_parser("session", help="create or update a session")
    p.add_argument("session")
    p.add_argument("--title")
    p.add_argument("--objective")
    p.add_argument("--quiet-after", type=int, dest="quiet_after_s")
    p.set_defaults(func=session)

    p = sub.add_parser("snapshot", help="take a snapshot now and print its version")
    p.add_argument("session")
    p.add_argument("--note")
    p.add_argument("--json", action="store_true", help="print the whole snapshot as JSON")
    p.set_defaults(func=snapshot)

    p = sub.add_parser("resume", help="print the context dump as Markdown")
    p.add_argument("session")
    p.add_argument("--stored", action="store_true", help="the latest stored dump, not a fresh one")
    p.add_argument("--max-chars", type=int)
    p.add_argument("--since", type=int)
    p.set_defaults(func=resume)

    p = sub.add_parser("watch", help="add a watch: process, log, artifact or port")
    p.add_argument("session")
    p.add_argument("kind", choices=["process", "log", "artifact", "port"])
    p.add_argument(
        "target",
        help="process: a regex on the command line (or --pid); log/artifact: "
        "a path or glob; port: a port number",
        nargs="?",
    )
    p.add_argument("--pid", type=int)
    p.add_argument("--no-children", action="store_true")
    p.add_argument("--expect-port", type=int, action="append", default=[])
    p.add_argument("--env", action="append", default=[], help="environment glob, e.g. 'NCCL_*'")
    p.add_argument("--lines", type=int)
    p.add_argument("--host")
    p.add_argument("--health-url")
    p.set_defaults(func=watch)

    p = sub.add_parser("note", help="add a journal entry (attempt, finding, decision, next, ...)")
    p.add_argument("session")
    p.add_argument("kind")
    p.add_argument("text")
    p.add_argument("--outcome")
    p.add_argument("--status")
    p.add_argument("--key", help="for a 'fact': its name")
    p.set_defaults(func=note)
    return parser


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.app import create_app
    from service.settings import Settings

    overrides = {k: v for k in ("host", "port", "data_dir") if (v := getattr(args, k)) is not None}
    settings = Settings(**overrides)
    if settings.host not in LOOPBACK and not settings.token:
        raise CliError(f"refusing to listen on {settings.host} without CTXD_TOKEN set")
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")
    return 0


def session(args: argparse.Namespace) -> int:
    body = {k: v for k in ("title", "objective", "quiet_after_s") if (v := getattr(args, k))}
    _print_json(_call(args, "PUT", f"/api/sessions/{args.session}", json=body))
    return 0


def snapshot(args: argparse.Namespace) -> int:
    body = {"note": args.note} if args.note else None
    result = _call(args, "POST", f"/api/sessions/{args.session}/snapshots", json=body)
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
    print(_call(args, "GET", f"/api/sessions/{args.session}/resume", params=params), end="")
    return 0


def watch(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"kind": args.kind}
    if args.kind == "process":
        if args.pid:
            body["pid"] = args.pid
        elif args.target:
            body["match"] = args.target
        body.update(children=not args.no_children, expect_ports=args.expect_port, env=args.env)
    elif args.kind in ("log", "artifact"):
        body["path"] = args.target
        if args.lines and args.kind == "log":
            body["lines"] = args.lines
    else:
        body["port"] = args.target
        body.update({k: v for k, v in (("host", args.host), ("url", args.health_url)) if v})
    _print_json(_call(args, "POST", f"/api/sessions/{args.session}/watches", json=body))
    return 0


def note(args: argparse.Namespace) -> int:
    body = {"kind": args.kind, "text": args.text}
    body.update({k: v for k in ("outcome", "status", "key") if (v := getattr(args, k))})
    _print_json(_call(args, "POST", f"/api/sessions/{args.session}/journal", json=body))
    return 0


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    url = args.url.rstrip("/") + path
    headers = (
        {"Authorization": f"Bearer {token}"} if (token := os.environ.get("CTXD_TOKEN")) else {}
    )
    try:
        response = httpx.request(method, url, headers=headers, timeout=60, **kwargs)
    except httpx.HTTPError as exc:
        raise CliError(
            f"cannot reach the service at {args.url} ({type(exc).__name__}); "
            "start it with `ctxd serve` or `make run`, or pass --url"
        ) from None
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise CliError(f"{method} {path}: HTTP {response.status_code}: {detail}")
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()
    return response.text


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))
