"""What a shell command line says about launches, logs, ports and builds, read without running it.

Pure: no I/O, nothing from outside this package, never raises. Values (env values, argv)
are returned as given; whoever stores them passes them through the redactor first.
"""

import re
import shlex
from dataclasses import dataclass, field

from ctxd.discovery.argvfacts import NOT_FILES as _NOT_FILES
from ctxd.discovery.argvfacts import (
    Build,
    build_of,
    log_flags,
    ports_of,
    read_files,
    tee_targets,
)
from ctxd.discovery.shelltokens import FD_MARK, pipelines, tokens

# Commands above this are not parsed (a command is capped at 8 KB when stored anyway): the
# tokenizer is linear, but there is no reason to spend time on a pasted megabyte.
MAX_PARSE_CHARS = 16_384
_REDIRECTS = {">", ">>", "&>", "&>>", ">&", ">|", "<", "<<", "<<<", "<&"}
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_LOG_NAME = re.compile(r"(?:\.(?:log|out|err|txt)$|log)", re.IGNORECASE)
# Programs that talk to a port rather than open one: their ports are not expected ports.
_CLIENTS = {"curl", "wget", "nc", "ncat", "telnet", "ssh", "scp", "rsync", "http", "grpcurl"}
_WRAPPERS_BG = {"nohup", "setsid"}
_WRAPPER_RUNNERS = {"stdbuf", "nice", "ionice", "timeout", "sudo"}  # programs, not builtins
_WRAPPERS = {"exec", "time", "command", "builtin"} | _WRAPPER_RUNNERS
# The shell's words that a command follows (`…; do nohup python x &`, `until grep -q …`)
_RESERVED = {"do", "then", "else", "elif", "if", "while", "until", "!", "{"}
# Those that are programs of their own, and replace themselves by (or start) the program
# they are given: a process of one may be the moment before the launch is seen.
WRAPPER_PROGRAMS = frozenset(_WRAPPERS_BG | _WRAPPER_RUNNERS | {"env"})


@dataclass(frozen=True)
class SimpleCommand:
    """One program run: its argv after wrappers, leading env assignments, redirect targets."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    redirects: tuple[str, ...] = ()  # files stdout/stderr go to
    background: str = ""  # how it was sent off: "&", "nohup", "setsid", "disown", "tmux", "screen"
    cwd: str = ""  # the directory of an earlier `cd` in the same line, as written


@dataclass(frozen=True)
class CommandFacts:
    """Everything `parse_command` found; `parsed` is False for input that is not shell."""

    parsed: bool = False
    commands: tuple[SimpleCommand, ...] = ()
    launches: tuple[SimpleCommand, ...] = ()
    logs: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    env_names: tuple[str, ...] = ()
    builds: tuple[Build, ...] = ()
    reads: tuple[str, ...] = ()


def _split_words(words: list[str]) -> tuple[list[str], dict[str, str], list[str]]:
    """(argv, env assignments before the program, stdout/stderr redirect targets)."""
    argv: list[str] = []
    env: dict[str, str] = {}
    targets: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        fd = ""
        if word.startswith(FD_MARK) and i + 1 < len(words):
            fd, i = word[len(FD_MARK) :], i + 1
            word = words[i]
        if word in _REDIRECTS:
            target = words[i + 1] if i + 1 < len(words) else ""
            i += 2
            dup = word in (">&", "<&") and (target.isdigit() or target == "-")
            writes = word.startswith((">", "&>")) and not dup
            if writes and fd in ("", "1", "2") and target not in _NOT_FILES:
                targets.append(target)
            continue
        match = _ASSIGNMENT.match(word)
        if match and not argv:
            env[match[1]] = match[2]
        else:
            argv.append(word)
        i += 1
    return argv, env, targets


def _unwrap(argv: list[str]) -> tuple[list[str], str, dict[str, str]]:
    """Strip nohup/setsid/env/sudo/nice/timeout...: (program argv, background way, env)."""
    way = ""
    env: dict[str, str] = {}
    while argv:
        head = argv[0].rsplit("/", 1)[-1]
        if argv[0] in _RESERVED:
            argv = argv[1:]
        elif head in _WRAPPERS_BG:
            way = way or head
            argv = argv[1:]
            while argv and argv[0].startswith("-"):
                argv = argv[1:]
        elif head == "env":
            argv = argv[1:]
            while argv and (argv[0].startswith("-") or _ASSIGNMENT.match(argv[0])):
                if match := _ASSIGNMENT.match(argv[0]):
                    env[match[1]] = match[2]
                option = argv[0]
                argv = argv[1:]
                if option in ("-u", "-C", "-S", "--unset", "--chdir") and argv:
                    argv = argv[1:]
        elif head in _WRAPPERS:
            argv = argv[1:]
            while argv and argv[0].startswith("-"):
                option = argv[0]
                argv = argv[1:]
                if option in ("-n", "-u", "-g", "-c", "-s", "-k", "-o", "-e") and argv:
                    argv = argv[1:]
            if head == "timeout" and argv and re.match(r"^[0-9.]+[smhd]?$", argv[0]):
                argv = argv[1:]
        else:
            break
    return argv, way, env


def _join(words: list[str]) -> str:
    """tmux and screen take either one command string or the words of one command."""
    return words[0] if len(words) == 1 else " ".join(shlex.quote(w) for w in words)


def _detached(argv: list[str]) -> tuple[str, str] | None:
    """(way, command text) for `tmux new -d … CMD` and `screen -dm … CMD`, else None."""
    head = argv[0].rsplit("/", 1)[-1] if argv else ""
    if head == "tmux" and len(argv) > 1 and argv[1] in ("new", "new-session", "neww", "new-window"):
        rest, detached = argv[2:], argv[1] in ("neww", "new-window")
        while rest and rest[0].startswith("-"):
            option = rest.pop(0)
            detached = detached or "d" in option.lstrip("-")
            if option in ("-s", "-n", "-c", "-t", "-x", "-y", "-e", "-F") and rest:
                rest.pop(0)
        if detached and rest:
            return "tmux", _join(rest)
        return None
    if head == "screen":
        rest, detached = argv[1:], False
        while rest and rest[0].startswith("-"):
            option = rest.pop(0)
            detached = detached or ("d" in option and "m" in option)
            takes_value = option.endswith("S") or option in ("-Logfile", "-c", "-p")
            if takes_value and rest:
                rest.pop(0)
        if detached and rest:
            return "screen", _join(rest)
    return None


def _inner_script(argv: list[str]) -> str | None:
    """The script of `bash -c '…'` / `sh -c '…'`, one level deep."""
    head = argv[0].rsplit("/", 1)[-1] if argv else ""
    if head in ("bash", "sh", "zsh", "dash") and "-c" in argv[1:]:
        index = argv.index("-c", 1)
        return argv[index + 1] if index + 1 < len(argv) else None
    for i, arg in enumerate(argv[1:], 1):
        if re.match(r"^-[a-z]*c$", arg) and head in ("bash", "sh") and i + 1 < len(argv):
            return argv[i + 1]
    return None


_EXPORTERS = {"export", "declare", "typeset"}


def _exported(argv: list[str], assigned: dict[str, str]) -> dict[str, str]:
    """What `export A=1 B`, `declare -x A=1` (or `typeset -x`) exports: each name with its
    value as given, a bare name with the value an earlier `B=2` of the line gave it."""
    if argv[0] != "export" and "-x" not in argv[1:]:
        return {}
    out: dict[str, str] = {}
    for word in argv[1:]:
        if match := _ASSIGNMENT.match(word):
            out[match[1]] = match[2]
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word):
            out[word] = assigned.get(word, "")
    return out


def _collect(text: str, depth: int, cwd: str = "") -> list[SimpleCommand]:
    commands: list[SimpleCommand] = []
    # what the line's shell exports before a program runs: every later program inherits it
    # (`export HF_TOKEN=…; nohup …`, `set -a; A=1; set +a`)
    exported: dict[str, str] = {}
    assigned: dict[str, str] = {}
    allexport = False
    for pipeline, ampersand in pipelines(tokens(text)):
        # A pipeline sent off with '&' is a launch as a whole; its first program is the one.
        for position, words in enumerate(pipeline):
            argv, env, targets = _split_words(words)
            if not argv and env:  # `A=1` alone: the shell's variable, exported under `set -a`
                assigned.update(env)
                if allexport:
                    exported.update(env)
            elif argv and argv[0] in _EXPORTERS:
                exported.update(_exported(argv, assigned))
            elif argv[:1] == ["set"] and len(argv) > 1 and argv[1] in ("-a", "+a"):
                allexport = argv[1] == "-a"
            argv, way, wrapped_env = _unwrap(argv)
            env = {**exported, **env, **wrapped_env} if argv else {**env, **wrapped_env}
            if ampersand and position == 0:
                way = way or "&"
            if argv and argv[0] == "disown" and commands:
                last = commands[-1]
                way = last.background or "disown"
                commands[-1] = SimpleCommand(last.argv, last.env, last.redirects, way, last.cwd)
                continue
            if argv[:1] in (["cd"], ["pushd"]) and len(argv) == 2:
                cwd = argv[1] if argv[1].startswith(("/", "~")) or not cwd else f"{cwd}/{argv[1]}"
            inner = _detached(argv) if argv else None
            script = inner[1] if inner else (_inner_script(argv) if argv else None)
            if script is not None and depth == 0:
                nested = _collect(script, depth + 1, cwd)
                if inner:
                    nested = [
                        SimpleCommand(c.argv, c.env, c.redirects, inner[0], c.cwd) for c in nested
                    ]
                elif way or targets:
                    nested = [
                        SimpleCommand(
                            c.argv, {**env, **c.env}, (*targets, *c.redirects), way or "", c.cwd
                        )
                        if i == 0
                        else c
                        for i, c in enumerate(nested)
                    ]
                commands.extend(nested)
                continue
            if argv or env:
                commands.append(SimpleCommand(tuple(argv), env, tuple(targets), way, cwd))
    return commands


def parse_command(text: str) -> CommandFacts:
    """The facts of one shell command line; `CommandFacts()` (parsed=False) if it is not shell."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_PARSE_CHARS:
        return CommandFacts()
    try:
        commands = _collect(text, 0)
    except (ValueError, IndexError, RecursionError):
        return CommandFacts()  # unbalanced quotes, a dangling escape
    logs: list[str] = []
    ports: list[int] = []
    builds: list[Build] = []
    reads: list[str] = []
    env_names: list[str] = []
    for command in commands:
        # `echo x > config.yaml` writes a file, not a log: only a launch's output, or a
        # target named like a log, is one.
        logs.extend(t for t in command.redirects if command.background or _LOG_NAME.search(t))
        env_names.extend(command.env)
        if not command.argv:
            continue
        head = command.argv[0].rsplit("/", 1)[-1]
        argv = list(command.argv)
        if head == "tee":
            logs.extend(tee_targets(argv))
        logs.extend(log_flags(argv))
        if head not in _CLIENTS:
            ports.extend(ports_of(argv))
        if build := build_of(argv):
            builds.append(build)
        reads.extend(read_files(argv))
    return CommandFacts(
        parsed=True,
        commands=tuple(commands),
        launches=tuple(c for c in commands if c.background and c.argv),
        logs=tuple(dict.fromkeys(t for t in logs if t)),
        ports=tuple(dict.fromkeys(ports)),
        env_names=tuple(dict.fromkeys(env_names)),
        builds=tuple(builds),
        reads=tuple(dict.fromkeys(reads)),
    )
