"""The `ctxd` command line: serve, and thin HTTP calls to a running service."""

import argparse
import os
import sys
from pathlib import Path

from ctxd import __version__
from ctxd.harness.hook import hook_main

WATCH_KINDS = ["process", "port", "slurm", "artifact", "command", "log"]


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    # A hook runs on every prompt and tool call: answered before argparse and the client
    # are even imported, and with exit 0 whatever its arguments say.
    hooked = hook_main(given, sys.stdin, sys.stdout, sys.stderr)
    if hooked is not None:
        return hooked
    if "serve" in given:  # before the imports below and before any thread (harmless if wrong)
        from ctxd.http.footprint import lean_start

        lean_start()
    from ctxd.cli.commands import EXIT_SERVICE, CliError

    parser = build_parser()
    args = parser.parse_args(given)
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"ctxd: {exc}", file=sys.stderr)
        return exc.code
    except BrokenPipeError:
        # A reader such as `head` stopped early; keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_SERVICE


def build_parser() -> argparse.ArgumentParser:
    from ctxd.cli import commands, setup
    from ctxd.cli.commands import URL
    from ctxd.harness.registry import MODULES

    parser = argparse.ArgumentParser(prog="ctxd", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ctxd {__version__}")
    parser.add_argument("--url", default=URL, help="the running service (default %(default)s)")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    p = sub.add_parser("serve", help="run the service")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--data-dir", type=Path)
    p.add_argument(
        "--access-log",
        action="store_true",
        default=None,
        help="log every request (CTXD_ACCESS_LOG)",
    )
    p.set_defaults(func=commands.serve)

    p = sub.add_parser("token", help="write a new bearer token into a 0600 file")
    p.add_argument("--new", action="store_true", required=True)
    p.add_argument("--data-dir", type=Path)
    p.set_defaults(func=commands.token)

    p = sub.add_parser("session", help="create or update a session")
    p.add_argument("session")
    p.add_argument("--title")
    p.add_argument("--objective")
    p.add_argument("--quiet-after", type=int, dest="quiet_after_s")
    p.add_argument("--schedule-every", type=int, dest="schedule_every_s")
    p.add_argument("--cwd", help="scope the session to this directory (e.g. the git top-level)")
    p.set_defaults(func=commands.session)

    p = sub.add_parser("snapshot", help="take a snapshot now and print its version")
    p.add_argument("session")
    p.add_argument("--note")
    p.add_argument("--json", action="store_true", help="print the whole snapshot as JSON")
    p.set_defaults(func=commands.snapshot)

    p = sub.add_parser("resume", help="print the context dump as Markdown")
    p.add_argument("session")
    p.add_argument("--stored", action="store_true", help="the latest stored dump, not a fresh one")
    p.add_argument("--max-chars", type=int)
    p.add_argument("--since", type=int)
    p.set_defaults(func=commands.resume)

    p = sub.add_parser("watch", help="add a watch: process, log, artifact, port, command or slurm")
    p.add_argument("session")
    # the collectors' kinds (`collectors.kinds()`, checked by a test): importing the
    # collectors to read them would cost every CLI call half a second
    p.add_argument("kind", choices=WATCH_KINDS)
    p.add_argument(
        "target",
        help="process: a regex on the command line (or --pid, --name); log/artifact: "
        "a path or glob; port: a port number; command: its name in the server's allowlist; "
        "slurm: a job id (or --name, --mine)",
        nargs="?",
    )
    p.add_argument("--pid", type=int)
    p.add_argument("--name", help="process: its exact name (instead of a regex); slurm: job name")
    p.add_argument("--mine", action="store_true", help="slurm: my jobs (see --workdir)")
    p.add_argument("--workdir", help="slurm with --mine: only jobs started from this directory")
    p.add_argument("--no-children", action="store_true")
    p.add_argument("--expect-port", type=int, action="append", default=[])
    p.add_argument("--env", action="append", default=[], help="environment glob, e.g. 'NCCL_*'")
    p.add_argument("--lines", type=int)
    p.add_argument("--files", type=int, help="log glob: how many of the newest files to show")
    p.add_argument(
        "--errors", action="append", default=[], help="log: an extra regex of error lines"
    )
    p.add_argument("--timeout", type=float, help="command: seconds before it is cut off")
    p.add_argument("--cwd", help="command: the directory it runs in")
    p.add_argument("--host", help="a peer's name (see /api/peers); port: also an address")
    p.add_argument("--health-url")
    p.set_defaults(func=commands.watch)

    for name, remove in (("install", False), ("uninstall", True)):
        verb = "remove ctxd's hooks or plugin and its MCP server from" if remove else "add them to"
        said = f"{verb} Claude Code's or opencode's settings".replace("them", "ctxd")
        p = sub.add_parser(name, help=said)
        p.add_argument("harness", choices=list(MODULES))
        p.add_argument(
            "--scope",
            choices=["user", "project"],
            default="user",
            help="the user's settings (~/.claude, ~/.config/opencode; default), or this "
            "checkout's (.claude and .mcp.json, .opencode and opencode.json)",
        )
        p.add_argument("--dry-run", action="store_true", help="show the change; write nothing")
        p.set_defaults(func=setup.install, remove=remove)

    p = sub.add_parser("service", help="keep ctxd always on: a systemd user unit (or launchd)")
    p.add_argument("action", choices=["install", "uninstall"])
    p.add_argument("--dry-run", action="store_true", help="show the change; write nothing")
    p.set_defaults(func=setup.always_on)

    p = sub.add_parser("doctor", help="check the installation end to end and say what to fix")
    p.set_defaults(func=setup.doctor)

    p = sub.add_parser("action", help="tell ctxd a command you ran or a file you edited")
    p.add_argument("session")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--command", help="the shell command line you ran")
    what.add_argument("--edited", metavar="PATH", help="a file you wrote or edited")
    p.add_argument("--cwd", default=os.getcwd(), help="where it ran (default: here)")
    p.add_argument("--exit", type=int, dest="exit_status", help="its exit status")
    p.add_argument("--background", action="store_true", help="it was sent to the background")
    p.set_defaults(func=commands.action)

    p = sub.add_parser("note", help="add a journal entry (attempt, finding, decision, next, ...)")
    p.add_argument("session")
    p.add_argument("kind")
    p.add_argument("text")
    p.add_argument("--outcome")
    p.add_argument("--status")
    p.add_argument("--key", help="for a 'fact': its name")
    p.set_defaults(func=commands.note)

    p = sub.add_parser("update", help="update a journal entry (status, outcome, text)")
    p.add_argument("session")
    p.add_argument("entry", type=int)
    p.add_argument("--status")
    p.add_argument("--outcome")
    p.add_argument("--text")
    p.set_defaults(func=commands.update)

    p = sub.add_parser("continue", help="send the empty 'continue' message; print the fresh dump")
    p.add_argument("session")
    p.set_defaults(func=commands.continue_)

    p = sub.add_parser("sessions", help="list sessions (those scoped to a directory with --cwd)")
    p.add_argument("--cwd")
    p.set_defaults(func=commands.sessions)

    p = sub.add_parser("prune", help="thin out versions older than --keep-days (default: server's)")
    p.add_argument("--keep-days", type=int)
    p.set_defaults(func=commands.prune)

    p = sub.add_parser("health", help="is the service up, and its version")
    p.set_defaults(func=commands.simple, method="GET", path="/health")
    for name, text, method, path in SIMPLE:
        p = sub.add_parser(name, help=text)
        p.add_argument("session")
        if "{watch_id}" in path:
            p.add_argument("watch_id", type=int)
        p.set_defaults(func=commands.simple, method=method, path="/api/sessions/{session}/" + path)
    # `versions` was the name of `snapshots` before: kept for scripts, left out of the help.
    p = sub.add_parser("versions")
    p.add_argument("session")
    p.set_defaults(func=commands.simple, method="GET", path="/api/sessions/{session}/snapshots")

    p = sub.add_parser("show", help="print one version's dump (Markdown; JSON with --json)")
    p.add_argument("session")
    p.add_argument("version", type=int)
    p.set_defaults(func=commands.show)

    p = sub.add_parser("diff", help="what changed between two versions, then a unified diff")
    p.add_argument("session")
    p.add_argument("from_version", type=int)
    p.add_argument("to_version", type=int)
    p.set_defaults(func=commands.diff)

    p = sub.add_parser("search", help="search history: ctxd search [SESSION] QUERY (FTS5 syntax)")
    p.add_argument("first", metavar="SESSION", help="the session (leave out: every session)")
    p.add_argument("query", nargs="?", metavar="QUERY", help='words, "a phrase", prefix*, ...')
    p.add_argument("--limit", type=int, default=20, help="hits per page (at most 100)")
    p.add_argument("--offset", type=int, default=0, help="hits to skip (the next page)")
    p.set_defaults(func=commands.search)

    p = sub.add_parser("message", help="post a user message ('' = continue: prints a fresh dump)")
    p.add_argument("session")
    p.add_argument("text")
    p.set_defaults(func=commands.message)

    p = sub.add_parser("hook", help="be an agent harness's hook command (reads its JSON on stdin)")
    p.add_argument("harness", choices=["claude"])
    p.add_argument("--print-config", action="store_true", help="print the settings block")
    p.set_defaults(func=commands.hook)

    for name, p in sub.choices.items():
        if name not in ("serve", "hook", "snapshot"):
            p.add_argument("--json", action="store_true", help="print JSON, for scripts")
    return parser


# Thin calls about one session: name, help, method, path under /api/sessions/SESSION/.
SIMPLE = (
    ("watches", "list a session's watches", "GET", "watches"),
    ("unwatch", "remove a watch by its id (see `ctxd watches`)", "DELETE", "watches/{watch_id}"),
    ("journal", "list a session's journal entries", "GET", "journal"),
    ("snapshots", "list a session's snapshots, newest first", "GET", "snapshots"),
    ("heartbeat", "mark a session active without content", "POST", "heartbeat"),
)
