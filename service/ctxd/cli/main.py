"""The `ctxd` command line: serve, and thin HTTP calls to a running service."""

import argparse
import os
import sys
from functools import partial
from pathlib import Path

from ctxd import DEFAULT_URL, __version__
from ctxd.hookclient.hook import hook_main

# The collectors' kinds (`collectors.kinds()`), the journal's kinds and the statuses each takes
# (`models/journal.py`), held equal to them by a test: importing those to read them would cost
# every CLI call half a second.
WATCH_KINDS = ["process", "port", "slurm", "ray", "artifact", "command", "log"]
NOTE_KINDS = [
    "objective", "attempt", "finding", "hypothesis", "decision", "next", "note", "fact", "question"
]  # fmt: skip
NOTE_STATUSES = {
    "attempt": ["running", "failed", "succeeded", "abandoned"],
    "hypothesis": ["open", "confirmed", "refuted"],
    "next": ["open", "done"],
    "question": ["open", "answered"],
}

DESCRIPTION = """\
ctxd keeps snapshots of an AI agent's work session (what runs, what was tried,
what is next) and hands back the dump to resume from. `ctxd help COMMAND`
explains a command."""
EPILOG = f"""\
output:
  A listing prints a table and a command that changes something says what it did,
  in one line. --json, before or after the command (`ctxd --json sessions`,
  `ctxd sessions --json`), prints the service's JSON instead, for scripts; a dump
  comes as {{"session": ..., "markdown": ...}}.

exit status:
  0 done; 1 the service failed or cannot be reached; 2 bad usage, or input the
  service refused; 3 no such session, version, watch or entry.

environment:
  CTXD_URL    the service, as host:port or a URL (default {DEFAULT_URL})
  CTXD_TOKEN  the bearer token of a service that asks for one
  CTXD_TOKEN_FILE  a file holding it (`ctxd token --new` writes one)
"""
JSON_HELP = "print JSON, for scripts (see `ctxd help`)"
DATA_DIR_SAID = "$XDG_DATA_HOME/ctxd, else ~/.local/share/ctxd"


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
    from ctxd.cli.commands import EXIT_SERVICE, EXIT_USAGE, CliError

    parser = build_parser()
    args = parser.parse_args(given)
    if args.func is None:  # bare `ctxd`: the help, and 2 as git and uv do (nothing was done)
        parser.print_help()
        return EXIT_USAGE
    if args.token_file:  # read by every request (env.token), and by an install's hooks
        os.environ["CTXD_TOKEN_FILE"] = args.token_file
    try:
        if not args.url_unused:
            args.url = _service_url(args.url)
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"ctxd: {exc}", file=sys.stderr)
        return exc.code
    except BrokenPipeError:
        # A reader such as `head` stopped early; keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_SERVICE


def _service_url(given: str | None) -> str:
    """--url, else CTXD_URL, as a URL (`host:port` is enough); a plain error when it is none."""
    from ctxd.cli.client import NotAnAddress, service_url
    from ctxd.cli.commands import EXIT_USAGE, CliError
    from ctxd.hookclient import env

    try:
        return service_url(env.url() if given is None else given)
    except NotAnAddress as exc:
        raise CliError(f"{'CTXD_URL' if given is None else '--url'}: {exc}", EXIT_USAGE) from None


def _help(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """`ctxd help [COMMAND]`: the whole help, or one command's."""
    from ctxd.cli.commands import EXIT_USAGE, CliError

    if args.topic is None:
        parser.print_help()
        return 0
    chosen = commands_of(parser).get(args.topic)
    if chosen is None:
        raise CliError(f"no command {args.topic!r}: `ctxd help` lists them", EXIT_USAGE)
    chosen.print_help()
    return 0


def commands_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's name and parser."""
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}


def _session(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION", help="the session's name (see `ctxd sessions`)")


URL_HELP = (
    "the running service: a port of this machine, host:port or a URL"
    f" (default: CTXD_URL, else {DEFAULT_URL}); before or after the command"
)
TOKEN_FILE_HELP = "a file holding the service's bearer token (default: CTXD_TOKEN_FILE)"


def build_parser() -> argparse.ArgumentParser:
    from ctxd.cli import commands, setup
    from ctxd.harness.registry import MODULES
    from ctxd.hookclient.harnesses import COMMAND_HOOKS

    parser = argparse.ArgumentParser(
        prog="ctxd",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ctxd {__version__}")
    parser.add_argument("--url", help=URL_HELP)
    parser.add_argument("--token-file", metavar="PATH", help=TOKEN_FILE_HELP)
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    parser.set_defaults(func=None, url_unused=False)
    sub = parser.add_subparsers(title="commands", dest="command_name", metavar="COMMAND")

    p = sub.add_parser("help", help="print this help, or a command's: ctxd help COMMAND")
    p.add_argument("topic", nargs="?", metavar="COMMAND", help="the command to explain")
    p.set_defaults(func=partial(_help, parser), url_unused=True)

    p = sub.add_parser("serve", help="run the service")
    p.add_argument("--host", help="the address to listen on (CTXD_HOST; default 127.0.0.1)")
    p.add_argument("--port", type=int, help="the port to listen on (CTXD_PORT; default 8765)")
    p.add_argument(
        "--data-dir",
        type=Path,
        help=f"where sessions and their dumps are kept (CTXD_DATA_DIR; default {DATA_DIR_SAID})",
    )
    p.add_argument(
        "--access-log",
        action="store_true",
        default=None,
        help="log every request (CTXD_ACCESS_LOG)",
    )
    p.set_defaults(func=commands.serve, url_unused=True)

    p = sub.add_parser("token", help="write a new bearer token into a 0600 file")
    p.add_argument("--new", action="store_true", required=True, help="make a new token")
    p.add_argument(
        "--data-dir",
        type=Path,
        help=f"the service's data dir, where the token file goes (default {DATA_DIR_SAID})",
    )
    p.set_defaults(func=commands.token, url_unused=True)

    p = sub.add_parser("session", help="create or update a session")
    _session(p)
    p.add_argument("--title", help="a short name for people (pages, `ctxd sessions`)")
    p.add_argument("--objective", help="what the session is for: every dump leads with it")
    p.add_argument(
        "--quiet-after",
        type=int,
        dest="quiet_after_s",
        metavar="SECONDS",
        help="take a snapshot once the session has been quiet this long (default 300)",
    )
    p.add_argument(
        "--schedule-every",
        type=int,
        dest="schedule_every_s",
        metavar="SECONDS",
        help="also take one every SECONDS (0: no schedule)",
    )
    p.add_argument("--cwd", help="scope the session to this directory (e.g. the git top-level)")
    p.set_defaults(func=commands.session)

    p = sub.add_parser("snapshot", help="take a snapshot now and print its version")
    _session(p)
    p.add_argument("--note", help="a note kept with this version")
    p.set_defaults(func=commands.snapshot)

    p = sub.add_parser("resume", help="print the context dump as Markdown")
    _session(p)
    p.add_argument("--stored", action="store_true", help="the latest stored dump, not a fresh one")
    p.add_argument(
        "--max-chars",
        type=int,
        metavar="N",
        help="cut the dump to N characters: log lines first, never the objective, signals, "
        "attempts or next steps",
    )
    p.add_argument(
        "--since", type=int, metavar="VERSION", help="lead with what changed since VERSION"
    )
    p.set_defaults(func=commands.resume)

    p = sub.add_parser(
        "wait", help="wait until an attempt comes up, dies, is stuck or ends; print what happened"
    )
    _session(p)
    p.add_argument("--attempt", type=int, metavar="N", help="attempt N alone (default: any)")
    p.add_argument("--since", type=int, metavar="VERSION",
                   help="what happened after VERSION (default: from now on)")  # fmt: skip
    p.add_argument("--timeout", type=float, default=300, metavar="SECONDS",
                   help="give up after SECONDS (default 300): exit status 4")  # fmt: skip
    p.set_defaults(func=commands.wait)

    p = sub.add_parser(
        "watch", help="add a watch: process, log, artifact, port, command, slurm or ray"
    )
    _session(p)
    p.add_argument("kind", metavar="KIND", choices=WATCH_KINDS, help=", ".join(WATCH_KINDS))
    p.add_argument(
        "target",
        metavar="TARGET",
        help="process: a regex on the command line (or --pid, --name); log/artifact: "
        "a path or glob; port: a port number; command: its name in the server's allowlist; "
        "slurm: a job id (or --name, --mine); ray: its dashboard's URL or port (8265), or"
        " auto (found as Ray finds its cluster)",
        nargs="?",
    )
    p.add_argument("--pid", type=int, help="process: its process id (instead of a regex)")
    p.add_argument(
        "--name",
        help="process: its exact name (instead of a regex); slurm: the job name; "
        "command: the command's name; ray: only actors whose name holds it",
    )
    p.add_argument("--mine", action="store_true", help="slurm: my jobs (see --workdir)")
    p.add_argument("--workdir", help="slurm with --mine: only jobs started from this directory")
    p.add_argument(
        "--no-children", action="store_true", help="process: the process alone, not its children"
    )
    p.add_argument(
        "--expect-port",
        type=int,
        action="append",
        default=[],
        metavar="PORT",
        help="process: a port it should listen on (repeat for more)",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="GLOB",
        help="process: environment variables to show, e.g. 'NCCL_*' (repeat for more)",
    )
    p.add_argument("--lines", type=int, help="log: how many of its last lines (default 40)")
    p.add_argument("--files", type=int, help="log glob: how many of the newest files to show")
    p.add_argument(
        "--errors",
        action="append",
        default=[],
        metavar="REGEX",
        help="log: an extra regex of error lines (repeat for more)",
    )
    p.add_argument("--timeout", type=float, help="command: seconds before it is cut off")
    p.add_argument("--cwd", help="command: the directory it runs in")
    p.add_argument("--host", help="a peer's name (see /api/peers); port: also an address")
    p.add_argument("--health-url", metavar="URL", help="port: a URL to GET as its health check")
    p.set_defaults(func=commands.watch)

    for name, remove in (("install", False), ("uninstall", True)):
        verb = (
            "remove ctxd's hooks and MCP server from"
            if remove
            else "wire ctxd's hooks and MCP server into"
        )
        p = sub.add_parser(name, help=f"{verb} an agent harness's settings")
        p.add_argument(
            "harness",
            nargs="?",
            choices=list(MODULES),
            help="the harness (left out: each one found on this machine)",
        )
        p.add_argument(
            "--scope",
            choices=["user", "project"],
            default="user",
            help="your own settings (under ~; default), or this checkout's (its personal, "
            "uncommitted settings where the harness has them)",
        )
        p.add_argument("--dry-run", action="store_true", help="show the change; write nothing")
        if not remove:
            p.add_argument(
                "--no-wake",
                dest="wake",
                action="store_false",
                help="never wake the idle agent when an attempt it launched comes up, dies or "
                "hangs (where the harness can be woken: Claude Code)",
            )
        p.set_defaults(func=setup.install, remove=remove, wake=True)

    p = sub.add_parser("service", help="keep ctxd always on: a systemd user unit (or launchd)")
    p.add_argument("action", choices=["install", "uninstall"], help="write the unit, or remove it")
    p.add_argument("--dry-run", action="store_true", help="show the change; write nothing")
    p.set_defaults(func=setup.always_on)

    p = sub.add_parser("doctor", help="check the installation end to end and say what to fix")
    p.set_defaults(func=setup.doctor)

    p = sub.add_parser("action", help="tell ctxd a command you ran or a file you edited")
    _session(p)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--command", help="the shell command line you ran")
    what.add_argument("--edited", metavar="PATH", help="a file you wrote or edited")
    p.add_argument("--cwd", default=os.getcwd(), help="where it ran (default: here)")
    p.add_argument("--exit", type=int, dest="exit_status", help="its exit status")
    p.add_argument("--background", action="store_true", help="it was sent to the background")
    p.set_defaults(func=commands.action)

    statuses = "; ".join(f"{kind}: {', '.join(said)}" for kind, said in NOTE_STATUSES.items())
    p = sub.add_parser("note", help="add a journal entry (attempt, finding, decision, next, ...)")
    _session(p)
    p.add_argument("kind", metavar="KIND", help="one of " + ", ".join(NOTE_KINDS))
    p.add_argument("text", metavar="TEXT", help="what to note (a fact's value)")
    p.add_argument("--outcome", help="what came of it (an attempt's result, a finding's cause)")
    p.add_argument("--status", help=f"where it stands; {statuses}")
    p.add_argument("--key", help="a fact's name (a fact needs one)")
    p.set_defaults(func=commands.note)

    p = sub.add_parser("update", help="update a journal entry (status, outcome, text)")
    _session(p)
    p.add_argument("entry", metavar="ENTRY", type=int, help="its id (see `ctxd journal`)")
    p.add_argument("--status", help=f"the new status; {statuses}")
    p.add_argument("--outcome", help="what came of it")
    p.add_argument("--text", help="the new text")
    p.set_defaults(func=commands.update)

    p = sub.add_parser("journal", help="list a session's journal entries")
    _session(p)
    p.set_defaults(func=commands.journal)

    p = sub.add_parser("continue", help="send the empty 'continue' message; print the fresh dump")
    _session(p)
    p.set_defaults(func=commands.continue_)

    p = sub.add_parser("message", help="post a user message ('' = continue: prints a fresh dump)")
    _session(p)
    p.add_argument("text", metavar="TEXT", help="the message ('' is 'continue')")
    p.set_defaults(func=commands.message)

    p = sub.add_parser("sessions", help="list sessions (those scoped to a directory with --cwd)")
    p.add_argument("--cwd", help="only the sessions scoped to this directory")
    p.set_defaults(func=commands.sessions)

    p = sub.add_parser("watches", help="list a session's watches")
    _session(p)
    p.set_defaults(func=commands.watches)

    p = sub.add_parser("unwatch", help="remove a watch by its id (see `ctxd watches`)")
    _session(p)
    p.add_argument("watch_id", metavar="WATCH", type=int, help="its id (see `ctxd watches`)")
    p.set_defaults(func=commands.unwatch)

    p = sub.add_parser("snapshots", help="list a session's snapshots, newest first")
    _session(p)
    p.set_defaults(func=commands.snapshots)
    # `versions` was the name of `snapshots` before: kept for scripts, left out of the help.
    p = sub.add_parser("versions")
    _session(p)
    p.set_defaults(func=commands.snapshots)

    p = sub.add_parser("show", help="print one version's dump (Markdown; JSON with --json)")
    _session(p)
    p.add_argument("version", metavar="VERSION", type=int, help="see `ctxd snapshots`")
    p.set_defaults(func=commands.show)

    p = sub.add_parser("diff", help="what changed between two versions, then a unified diff")
    _session(p)
    p.add_argument("from_version", metavar="FROM", type=int, help="the older version")
    p.add_argument("to_version", metavar="TO", type=int, help="the newer version")
    p.set_defaults(func=commands.diff)

    p = sub.add_parser(
        "search",
        help="search history: ctxd search [SESSION] QUERY (FTS5 syntax)",
        usage="ctxd search [-h] [--limit N] [--offset N] [--json] [SESSION] QUERY",
    )
    p.add_argument(
        "words",
        nargs="*",
        metavar="[SESSION] QUERY",
        help='the session to search (left out: every session), then the query: words, "a '
        'phrase", prefix*, NEAR(a b), AND, OR, NOT; a query of several words goes in quotes',
    )
    p.add_argument("--limit", type=int, default=20, metavar="N", help="hits per page (at most 100)")
    p.add_argument("--offset", type=int, default=0, metavar="N", help="hits to skip (next page)")
    p.set_defaults(func=commands.search)

    p = sub.add_parser("heartbeat", help="mark a session active without content")
    _session(p)
    p.set_defaults(func=commands.heartbeat)

    p = sub.add_parser("prune", help="thin out versions older than --keep-days")
    p.add_argument(
        "--keep-days",
        type=int,
        metavar="DAYS",
        help="keep every version of the last DAYS days (default: the server's, CTXD_KEEP_DAYS)",
    )
    p.set_defaults(func=commands.prune)

    p = sub.add_parser(
        "scrub",
        help="take secrets ctxd learned after storing them (and any given on stdin, one a line)"
        " out of everything it stored",
    )
    p.set_defaults(func=commands.scrub)

    p = sub.add_parser("health", help="is the service up, and its version")
    p.set_defaults(func=commands.health)

    p = sub.add_parser("hook", help="be an agent harness's hook command (reads its JSON on stdin)")
    p.add_argument(
        "harness", choices=list(COMMAND_HOOKS), help="the harness whose event comes on stdin"
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the hooks file `ctxd install HARNESS` writes (into an empty home), to "
        "paste by hand",
    )
    p.set_defaults(func=commands.hook)

    for name, p in sub.choices.items():
        if name not in ("help", "serve", "hook"):
            # SUPPRESS: left out, it keeps what `ctxd --json COMMAND` set
            p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=JSON_HELP)
        if name not in ("help", "serve", "token", "hook"):  # where the service is, either side
            p.add_argument("--url", default=argparse.SUPPRESS, help=URL_HELP)
            p.add_argument(
                "--token-file", metavar="PATH", default=argparse.SUPPRESS, help=TOKEN_FILE_HELP
            )
    return parser
