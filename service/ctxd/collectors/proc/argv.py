"""Command lines: flags parsed into name/value pairs, and worker argv folded into one line."""

import os
import re
from collections import defaultdict

from ctxd.models import Flag

_PYTHON = re.compile(r"^(?:python|pypy)[\d.]*$")
_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
# Interpreter options that take the next argument as their value (`python -X dev -W error`).
_PY_VALUE_OPTIONS = {"-X", "-W"}


def is_python(program: str | None) -> bool:
    """Whether a program (a path or a name: `/usr/bin/python3.11`, `pypy3`) is a Python."""
    return bool(program) and bool(_PYTHON.match(os.path.basename(program or "")))


# --- command-line flags ---------------------------------------------------------------------


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and arg not in ("-", "--") and not _NUMBER.match(arg)


def _parse_interpreter(args: list[str], flags: list[Flag]) -> list[str]:
    """Consume Python's own options up to the module or script; return what the program gets."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith(("-m", "-c")) and len(arg) > 2:
            # `python -msglang.launch_server` or `python -c'code'`: value glued to the option.
            args = [arg[:2], arg[2:], *args[i + 1 :]]
            i, arg = 0, arg[:2]
        if arg == "-m" and i + 1 < len(args):
            flags.append(Flag(value=args[i + 1]))
            return args[i + 2 :]
        if (arg == "-c" or arg in _PY_VALUE_OPTIONS) and i + 1 < len(args):
            flags.append(Flag(name=arg, value=args[i + 1]))
            if arg == "-c":
                return args[i + 2 :]
            i += 2
            continue
        if _is_flag(arg):
            flags.append(Flag(name=arg))
            i += 1
            continue
        flags.append(Flag(value=arg))  # the script path (or "-" for stdin)
        return args[i + 1 :]
    return []


def parse_flags(argv: list[str]) -> list[Flag]:
    """Split a command line into flags and positionals, in order, skipping the program name."""
    flags: list[Flag] = []
    args = list(argv[1:])
    if argv and is_python(argv[0]):
        args = _parse_interpreter(args, flags)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            flags.extend(Flag(value=rest) for rest in args[i + 1 :])
            break
        if not _is_flag(arg):
            flags.append(Flag(value=arg))
        elif "=" in arg:
            name, _, value = arg.partition("=")
            flags.append(Flag(name=name, value=value))
        elif i + 1 < len(args) and args[i + 1] != "--" and not _is_flag(args[i + 1]):
            flags.append(Flag(name=arg, value=args[i + 1]))
            i += 1
        else:
            flags.append(Flag(name=arg))
        i += 1
    return flags


# --- workers that differ only in a rank -----------------------------------------------------

_DIGITS = re.compile(r"\d+")
VALUES_SHOWN = 8


def shape(argv: list[str]) -> tuple[str, ...]:
    """argv with every digit run blanked: workers of one launcher share a shape."""
    return tuple(_DIGITS.sub("#", arg) for arg in argv)


def _fold(values: list[str]) -> str:
    """`{0..7}` for consecutive integers, `{a,b,c}` otherwise, for the varying part of a token."""
    unique = sorted(set(values), key=lambda v: (len(v), v))
    if all(v.isdigit() for v in unique):
        numbers = sorted(int(v) for v in unique)
        if len(numbers) > 2 and numbers == list(range(numbers[0], numbers[-1] + 1)):
            return f"{{{numbers[0]}..{numbers[-1]}}}"
        unique = [str(n) for n in numbers]
    shown = unique[:VALUES_SHOWN] + (["…"] if len(unique) > VALUES_SHOWN else [])
    return "{" + ",".join(shown) + "}"


def _common_start(values: list[str]) -> str:
    first, last = min(values), max(values)
    size = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), None)
    return first[: len(first) if size is None else size]


def _merge_token(values: list[str]) -> str:
    if len(set(values)) == 1:
        return values[0]
    prefix = _common_start(values)
    while prefix and prefix[-1].isdigit():  # never split a number: 10..15 is not 1{0..5}
        prefix = prefix[:-1]
    suffix = _common_start([v[len(prefix) :][::-1] for v in values])[::-1]
    while suffix and suffix[0].isdigit():
        suffix = suffix[1:]
    middles = [v[len(prefix) : len(v) - len(suffix)] for v in values]
    return f"{prefix}{_fold(middles)}{suffix}"


def fold_workers(argvs: list[list[str]]) -> list[tuple[int, str]]:
    """(count, command) per group of command lines that differ only in their numbers.

    `python w.py --rank 0` … `--rank 7` become one `(8, "python w.py --rank {0..7}")`; a
    group of one keeps its command line as it is.
    """
    groups: dict[tuple[str, ...], list[list[str]]] = defaultdict(list)
    for argv in argvs:
        groups[shape(argv)].append(argv)
    folded = []
    for members in groups.values():
        tokens = [_merge_token([m[i] for m in members]) for i in range(len(members[0]))]
        folded.append((len(members), " ".join(tokens)))
    return sorted(folded, key=lambda g: (-g[0], g[1]))
