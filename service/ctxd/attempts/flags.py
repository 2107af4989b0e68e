"""Command lines compared: the program an argv runs (as a person types it), its flags, and what
changed from one attempt's command line and environment to the next.

Pure: the process facts come from the caller (procscan, the process collector); this module
only reads them. argv and env values are as observed; the caller redacts before storing.
"""

import re
from dataclasses import dataclass, field

from ctxd.attempts.model import Attempt
from ctxd.collectors.proc.argv import is_python
from ctxd.models import ProcessInfo

_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and arg not in ("-", "--") and not _NUMBER.match(arg)


def program_of(argv: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """(what is run: `python -m pkg` or `./serve`, the arguments it gets)."""
    if not argv:
        return (), []
    if is_python(argv[0]):
        i = 1
        while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-m", "-c"):
            i += 1
        if i < len(argv) and argv[i] in ("-m", "-c") and i + 1 < len(argv):
            return ("python", argv[i], argv[i + 1]), argv[i + 2 :]
        if i < len(argv):
            return ("python", argv[i]), argv[i + 1 :]
    return (argv[0].rsplit("/", 1)[-1],), argv[1:]


def typed_name(argv: list[str] | tuple[str, ...]) -> str:
    """A program as a person would type it: `python3 -m http.server`, `python3 serve.py`,
    `torchrun` (an entry point script run by its interpreter), `vllm`; "?" for none."""
    program, _ = program_of(list(argv))
    if not program:
        return "?"
    if program[0] != "python":
        return program[0]
    interpreter = argv[0].rsplit("/", 1)[-1]
    if program[1] == "-m":
        return f"{interpreter} -m {program[2]}"
    if program[1] == "-c":
        return f"{interpreter} -c"
    script = program[1].rsplit("/", 1)[-1]
    if "/bin/" in program[1] and "." not in script:  # a console script: `torchrun`, `sglang`
        return script
    return f"{interpreter} {script}"


def program_name(argv: list[str] | tuple[str, ...]) -> str:
    """How the Attempts table names an attempt: its program as a person would type it, with
    the word after it when that is no flag (`vllm serve`, `sleep 60`, `python3 -m http.server
    18555`); a script's own first argument is its flags', not its name's."""
    _, args = program_of(list(argv))
    typed = typed_name(argv)
    word = f" {args[0]}" if args and not args[0].startswith("-") else ""
    return typed + (word if " " not in typed or " -m " in typed else "")


def process_name(p: ProcessInfo) -> str:
    """A watched process by its typed name (`typed_name`), a peer's with its `node2:` prefix;
    its kernel name when its command line was not read."""
    if not p.argv:
        return p.name
    return f"{p.host}:{typed_name(p.argv)}" if p.host else typed_name(p.argv)


def parse_flags(args: list[str]) -> tuple[dict[str, str | None], list[str]]:
    """({flag: value or None for a bare flag}, positional args); a repeated flag's values are
    joined with a space, so `--a 1 --a 2` differs from `--a 1`."""
    flags: dict[str, str | None] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            positional.extend(args[i + 1 :])
            break
        if not _is_flag(arg):
            positional.append(arg)
            i += 1
            continue
        name, eq, glued = arg.partition("=")
        value: str | None = glued if eq else None
        if not eq and i + 1 < len(args) and not _is_flag(args[i + 1]) and args[i + 1] != "--":
            value, i = args[i + 1], i + 1
        if name in flags:
            value = " ".join(v for v in (flags[name], value) if v is not None)
        flags[name] = value
        i += 1
    return flags, positional


def _flag_text(name: str, value: str | None) -> str:
    return name if value is None else f"{name} {value}"


@dataclass
class FlagDiff:
    program_changed: bool = False
    added: list[str] = field(default_factory=list)  # "--log-level debug"
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # "--port 8000 → 30000"
    positional: list[str] = field(default_factory=list)  # "model.bin → model2.bin"
    env: list[str] = field(default_factory=list)  # "NCCL_P2P_DISABLE=1 added"

    def empty(self) -> bool:
        return not any(
            (
                self.program_changed,
                self.added,
                self.removed,
                self.changed,
                self.positional,
                self.env,
            )
        )


def attempt_diff(previous: Attempt, attempt: Attempt) -> FlagDiff:
    """`flag_diff` of two attempts. An environment read from /proc (a process seen) holds what
    the agent's shell passed to every launch (PYTHONPATH, PATH's kin); one known only from
    its command line (a launch that died before it was seen) holds what that line set. Such
    two are compared by the names either command line sets, so the shell's own variables are
    not "added". A value such a line gives as the shell's words (`$(cat ~/.token)`, `$TOKEN`)
    says where the value came from, not what it was: it is no change from the value seen."""
    old, new = previous.env, attempt.env
    if previous.seen != attempt.seen:
        written = {name for a in (previous, attempt) if a.command for name in a.env
                   if f"{name}=" in a.command or not a.seen}  # fmt: skip
        old = {k: v for k, v in old.items() if k in written}
        new = {k: v for k, v in new.items() if k in written}
        typed = (attempt if previous.seen else previous).env
        for name in set(old) & set(new):
            if "$" in typed[name] or "`" in typed[name]:
                new[name] = old[name]
    return flag_diff(previous.argv, attempt.argv, old, new)


def flag_diff(
    previous_argv: list[str] | tuple[str, ...],
    argv: list[str] | tuple[str, ...],
    previous_env: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> FlagDiff:
    """What changed from the previous attempt's command line and environment to this one's."""
    old_program, old_args = program_of(list(previous_argv))
    new_program, new_args = program_of(list(argv))
    old_flags, old_pos = parse_flags(old_args)
    new_flags, new_pos = parse_flags(new_args)
    diff = FlagDiff(program_changed=old_program != new_program)
    for name, value in new_flags.items():
        if name not in old_flags:
            diff.added.append(_flag_text(name, value))
        elif old_flags[name] != value:
            diff.changed.append(f"{name} {old_flags[name] or '(bare)'} → {value or '(bare)'}")
    diff.removed = [_flag_text(n, v) for n, v in old_flags.items() if n not in new_flags]
    if old_pos != new_pos:
        diff.positional.append(f"{' '.join(old_pos) or '(none)'} → {' '.join(new_pos) or '(none)'}")
    old_env, new_env = previous_env or {}, env or {}
    for name in sorted(set(old_env) | set(new_env)):
        if name not in old_env:
            diff.env.append(f"{name}={new_env[name]} added")
        elif name not in new_env:
            diff.env.append(f"{name} removed")
        elif old_env[name] != new_env[name]:
            diff.env.append(f"{name} {old_env[name]} → {new_env[name]}")
    return diff


def changed_values(diff: FlagDiff) -> dict[str, str]:
    """{flag or variable: the value it has now} of what a diff says changed: "--port 8000 →
    30000" gives ("--port", "30000"), a removed one "(removed)", a bare flag "(bare)"."""
    arrow = " \N{RIGHTWARDS ARROW} "
    out: dict[str, str] = {}
    for part in diff.added + diff.changed:
        name, _, value = part.partition(" ")
        out[name] = value.rsplit(arrow, 1)[-1] or "(bare)"
    for part in diff.removed:
        out[part.split(" ")[0]] = "(removed)"
    for part in diff.env:
        if part.endswith(" added"):
            name, _, value = part.removesuffix(" added").partition("=")
            out[name] = value
        elif part.endswith(" removed"):
            out[part.removesuffix(" removed")] = "(removed)"
        else:
            name, _, change = part.partition(" ")
            out[name] = change.rsplit(arrow, 1)[-1]
    return out


def summary_line(diff: FlagDiff, program: str = "", before: str = "") -> str:
    """One line, renderer-independent: "relaunched with --disable-cuda-graph, --log-level
    debug added; --speculative-algorithm EAGLE3 removed"."""
    if diff.program_changed:
        was = f" (the one before ran `{before}`)" if before else ""
        return f"a different program{': `' + program + '`' if program else ''}{was}"
    if diff.empty():
        return "relaunched unchanged"
    parts = []
    if diff.added:
        parts.append(f"{', '.join(diff.added)} added")
    if diff.removed:
        parts.append(f"{', '.join(diff.removed)} removed")
    if diff.changed:
        parts.append(", ".join(diff.changed))
    if diff.positional:
        parts.append("arguments " + ", ".join(diff.positional))
    if diff.env:
        parts.append("env " + ", ".join(diff.env))
    return "relaunched with " + "; ".join(parts)
