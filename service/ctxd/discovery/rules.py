"""Which automatic watches an agent action, or the machine, calls for: proposals, not writes.

Each proposal is a plain dict shaped like a watch spec (`kind` plus the spec's fields) with
`auto: True` and a `reason`; the caller validates it into a watch, stores it and redacts it.
Proposals are deduplicated against the session's existing watches, capped per session, and
never name a secrets file.
"""

import os
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from ctxd.collectors.proc.argv import is_python
from ctxd.discovery.argvfacts import health_urls
from ctxd.discovery.procscan import Candidate, is_excluded
from ctxd.discovery.shellparse import CommandFacts, SimpleCommand
from ctxd.discovery.workspace import is_secret_path

AUTO_WATCH_CAP = 16
REPEATED_READS = 2  # a file read by this many commands is followed as a log
ENV_NAMES_MAX = 32
# The launches of one command line that become attempts: a line sending off hundreds
# (`for i in …; do … & done` written out) is recorded in time linear in its size, its first
# ones followed.
LAUNCHES_PER_COMMAND = 64
# Where a build's output lands when the command does not say.
_DEFAULT_OUTPUTS = {"python -m build": "dist", "uv build": "dist", "setup.py": "dist"}
_DEFAULT_OUTPUTS |= {"cargo": "target"}
_BUILTINS = {
    "cd", "pushd", "popd", "export", "source", ".", "set", "unset", "echo", "printf",
    "true", "false", "wait", "trap", "ulimit", "umask", "alias", "read", "test", "[",
    # the shell's words that close or open a compound command: a loop sent off whole (`until
    # grep -q … log; do sleep 1; done`, the agent's own wait) launches nothing of theirs
    "done", "fi", "esac", "for", "}",
}  # fmt: skip
# `$(…)`, `${…}`, `$VAR` and backquotes: what they name is only known by running them; so is
# a glob's (`> logs/*.log` writes one file, or fails as ambiguous: never a watch of all).
_EXPANDS = re.compile(r"[$`*?[]")


def watch_key(watch: Mapping[str, Any]) -> tuple[str, str]:
    """What makes two watches the same: the kind and its target."""
    kind = str(watch.get("kind", ""))
    if kind == "port":
        return kind, f"{watch.get('host', '127.0.0.1')}:{watch.get('port')}"
    if kind == "process":
        return kind, str(watch.get("match") or watch.get("name") or watch.get("pid"))
    if kind == "ray":
        return kind, str(watch.get("address") or watch.get("url", ""))
    return kind, str(watch.get("path", ""))


def ray_dashboard(command: SimpleCommand) -> dict[str, str] | None:
    """Where the Ray cluster a command starts, joins or submits to shows itself, as a ray
    watch's target: `ray start --head` (its --dashboard-port, 8265 by default) and `ray job
    submit --address URL` (or RAY_ADDRESS set to an http URL on the command) name the
    dashboard's URL; a worker's `ray start --address HOST:PORT` and a server that starts Ray
    itself (vLLM's `--distributed-executor-backend ray`, SGLang's `--use-ray`) leave it to be
    found as Ray finds its cluster (`address: auto`: the current cluster file that start
    writes, or the local default); None for anything else."""
    argv = list(command.argv)

    def value(flag: str) -> str | None:
        for n, arg in enumerate(argv):
            if arg == flag and n + 1 < len(argv):
                return argv[n + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
        return None

    if value("--distributed-executor-backend") == "ray":  # vLLM's (and SGLang's engine's)
        return {"address": "auto"}
    if "--use-ray" in argv and any("sglang" in word for word in argv[:3]):  # SGLang's server
        return {"address": "auto"}
    if not argv or os.path.basename(argv[0]) != "ray":
        return None
    if argv[1:2] == ["start"] and "--head" in argv:
        host = value("--dashboard-host") or "127.0.0.1"
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "localhost") else host
        return {"url": f"http://{host}:{value('--dashboard-port') or 8265}"}
    if argv[1:2] == ["start"] and value("--address"):
        return {"address": "auto"}
    if argv[1:3] == ["job", "submit"]:
        address = value("--address") or command.env.get("RAY_ADDRESS", "")
        if address.startswith(("http://", "https://")):
            return {"url": address.rstrip("/")}
    return None


def program_pattern(argv: Iterable[str]) -> str | None:
    """A regex that finds this program again whatever its flags: `sglang\\.launch_server` for
    `python -m sglang.launch_server …`, `serve\\.py` for `python serve.py`, else the program."""
    args = list(argv)
    if not args:
        return None
    name = os.path.basename(args[0])
    if is_python(name):
        rest = args[1:]
        while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
            rest = rest[1:]
        if rest[:1] == ["-m"] and len(rest) > 1:
            name = rest[1]
        elif rest and rest[0] != "-c":
            name = os.path.basename(rest[0])
        else:
            return None  # `python -c …` has nothing stable to find it by
    # `$(which srv)` or `$APP` is known only by running it: no pattern rather than a guess
    return re.escape(name) if name and not _EXPANDS.search(name) else None


def _resolve(path: str, cwd: str | None, command: SimpleCommand | None = None) -> str | None:
    if _EXPANDS.search(path) or (command is not None and _EXPANDS.search(command.cwd)):
        return None  # `/tmp/x/$(id).log`, `$LOG`, `cd $DIR`: known only by running them
    path = os.path.expanduser(path)
    base = cwd or ""
    if command is not None and command.cwd:
        base = os.path.join(base, os.path.expanduser(command.cwd))
    full = os.path.normpath(os.path.join(base, path))
    return full if full.startswith("/") else None


def _at(at: datetime) -> str:
    return at.strftime("%H:%M")


def _expected_ports(existing: Iterable[Mapping[str, Any]]) -> set[int]:
    """The ports the session's watches expect a server on: its watched ports and those its
    watched processes are expected to open."""
    ports: set[int] = set()
    for watch in existing:
        if watch.get("kind") == "port":
            ports.add(int(watch.get("port") or 0))
        elif watch.get("kind") == "process":
            ports.update(int(p) for p in watch.get("expect_ports") or ())
    return ports


class _Proposals:
    """Collects proposals, skipping duplicates, secrets, disallowed paths and the cap."""

    def __init__(
        self, existing: Iterable[Mapping[str, Any]], cap: int, allowed: Callable[[str], bool]
    ):
        existing = list(existing)
        self.keys = {watch_key(w) for w in existing}
        self.left = cap - sum(1 for w in existing if w.get("auto"))
        self.allowed = allowed
        self.items: list[dict[str, Any]] = []

    def add(self, spec: dict[str, Any], reason: str) -> None:
        path = spec.get("path")
        if path is not None and (is_secret_path(path) or not self.allowed(path)):
            return
        key = watch_key(spec)
        if key in self.keys or self.left <= 0:
            return
        self.keys.add(key)
        self.left -= 1
        self.items.append({**spec, "auto": True, "reason": reason})


def propose_for_command(
    facts: CommandFacts,
    *,
    cwd: str | None,
    at: datetime,
    background: bool = False,
    existing: Iterable[Mapping[str, Any]] = (),
    read_counts: Mapping[str, int] | None = None,
    cap: int = AUTO_WATCH_CAP,
    allowed: Callable[[str], bool] = lambda path: True,
) -> list[dict[str, Any]]:
    """The watches one shell command calls for: processes it launched (with their expected
    ports and logs), builds' outputs, and files it reads that earlier commands read too.

    `background` is the harness's own flag (Claude Code's run_in_background): the whole
    command is then a launch even without `&`. `read_counts` holds how many earlier
    commands read each absolute path; the caller keeps it.
    """
    out = _Proposals(existing, cap, allowed)
    when = _at(at)
    launches = launched(facts, background)
    for launch in launches:
        pattern = program_pattern(launch.argv)
        if pattern:
            ports = sorted(set(facts.ports))[:32]
            spec: dict[str, Any] = {"kind": "process", "match": pattern, "expect_ports": ports}
            if where := launch_dir(launch, cwd):
                spec["cwd"] = where  # its own launches, not a same-named process elsewhere
            if launch.env:
                spec["env"] = sorted(launch.env)[:ENV_NAMES_MAX]
            out.add(spec, f"launched by the command at {when}")
    for command in launches:
        for target in command.redirects:
            if path := _resolve(target, cwd, command):
                out.add({"kind": "log", "path": path}, f"output of the command at {when}")
    owners = _owners(facts)
    for log in facts.logs:
        if path := _resolve(log, cwd, owners.get(log)):
            out.add({"kind": "log", "path": path}, f"log named by the command at {when}")
    if launches and not any(program_pattern(launch.argv) for launch in launches):
        # a launch's process watch expects its ports already; a port alone, else
        for port in facts.ports:
            out.add({"kind": "port", "port": port}, f"expected port of the command at {when}")
    for command in facts.commands:
        if cluster := ray_dashboard(command):
            out.add({"kind": "ray", **cluster}, f"Ray cluster of the command at {when}")
    served = _expected_ports(existing) | (set(facts.ports) if launches else set())
    for command in facts.commands:
        for port, url in health_urls(list(command.argv)):
            if port in served:  # a server this session started, not any URL the agent reads
                out.add({"kind": "port", "port": port, "url": url},
                        f"health URL the command at {when} asked")  # fmt: skip
    for build in facts.builds:
        outputs = build.outputs or (
            (_DEFAULT_OUTPUTS[build.tool],) if build.tool in _DEFAULT_OUTPUTS else ()
        )
        owner = next((c for c in facts.commands if c.argv == build.argv), None)
        for target in outputs:
            if path := _resolve(target, cwd, owner):
                out.add({"kind": "artifact", "path": path}, f"built by `{build.tool}` at {when}")
    counts = read_counts or {}
    for read in facts.reads:
        path = _resolve(read, cwd, owners.get(read))
        if path and counts.get(path, 0) + 1 >= REPEATED_READS:
            out.add({"kind": "log", "path": path}, f"read again by the command at {when}")
    return out.items


def launched(facts: CommandFacts, background: bool = False) -> list[SimpleCommand]:
    """The programs a command line sends off to keep running: its `&`, `nohup`, `setsid`, …
    launches, or, when the harness ran the whole line in the background (Claude Code's
    run_in_background), its last real program."""
    launches = list(facts.launches)
    if background and not launches:
        # The harness sent the whole line off: its last real program is the long-running one
        # (`cd x && source .venv/bin/activate && python serve.py`).
        launches = [c for c in facts.commands if c.argv and _is_work(c)][-1:]
    return [c for c in launches if _is_work(c)][:LAUNCHES_PER_COMMAND]


def launch_dir(launch: SimpleCommand, cwd: str | None) -> str | None:
    """The directory a launch runs in: the command's, after a `cd` in the same line."""
    if launch.cwd:
        return _resolve(".", cwd, launch)
    return os.path.normpath(cwd) if cwd and cwd.startswith("/") else None


def launch_logs(
    facts: CommandFacts, launches: list[SimpleCommand], cwd: str | None
) -> list[list[str]]:
    """The files each launch's output goes to: its own redirects, and the logs its line names
    that are no other launch's output (`… > a.log & tail -f b.log`); secrets files never.
    Linear in the line's size, however many launches it holds."""
    owners = _owners(facts)
    theirs = {target for launch in facts.launches for target in launch.redirects}
    named = [_resolve(log, cwd, owners.get(log)) for log in facts.logs if log not in theirs]
    secret: dict[str, bool] = {}

    def kept(paths: Iterable[str | None]) -> list[str]:
        out = [p for p in dict.fromkeys(paths) if p]
        for path in out:
            if path not in secret:
                secret[path] = is_secret_path(path)
        return [p for p in out if not secret[p]]

    return [
        kept([*(_resolve(t, cwd, launch) for t in launch.redirects), *named]) for launch in launches
    ]


def _is_work(command: SimpleCommand) -> bool:
    """Not a builtin, and not `sleep 60 &` or a backgrounded `tail -f`: something to watch."""
    if not command.argv or command.argv[0] in _BUILTINS:
        return False
    return not is_excluded(os.path.basename(command.argv[0]), list(command.argv))


def _owners(facts: CommandFacts) -> dict[str, SimpleCommand]:
    """{target: the first simple command it came from}, for its `cd` directory."""
    owners: dict[str, SimpleCommand] = {}
    for command in facts.commands:
        for target in (*command.redirects, *command.argv):
            owners.setdefault(target, command)
    return owners


def propose_from_machine(
    found: Iterable[tuple[Candidate, list[str]]],
    *,
    existing: Iterable[Mapping[str, Any]] = (),
    cap: int = AUTO_WATCH_CAP,
    allowed: Callable[[str], bool] = lambda path: True,
) -> list[dict[str, Any]]:
    """Watches for workspace processes found running (tree roots, with the files open on
    their stdout/stderr from `procscan.stdio_files`), whatever command started them."""
    out = _Proposals(existing, cap, allowed)
    for candidate, stdio in found:
        pattern = program_pattern(candidate.argv)
        if pattern and candidate.root == candidate.pid:
            spec = {"kind": "process", "match": pattern}
            if candidate.cwd:
                spec["cwd"] = candidate.cwd
            out.add(spec, f"running in the workspace (pid {candidate.pid})")
        for path in stdio:
            out.add({"kind": "log", "path": path}, f"stdout of pid {candidate.pid}")
    return out.items
