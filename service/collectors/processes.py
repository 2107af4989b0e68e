"""Watched processes: trees matched by pid or command line, their flags, environment and load."""

import contextlib
import os
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any

import psutil

from service import redact
from service.collectors import CollectContext
from service.models import Flag, ProcessesSection, ProcessInfo, ProcessWatch, Unavailable, Watch

NAME = "processes"

# What decides how a GPU job behaves, and which Python and libraries it actually loads.
_ML_ENV = ("CUDA_*", "NCCL_*", "TORCH_*", "PYTORCH_*", "HF_*", "SGLANG_*", "VLLM_*")
_PATH_ENV = ("OMP_NUM_THREADS", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX")
DEFAULT_ENV = _ML_ENV + _PATH_ENV

_PYTHON = re.compile(r"^(python|pypy)[\d.]*$")
_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
# Interpreter options that take the next argument as their value (`python -X dev -W error`).
_PY_VALUE_OPTIONS = {"-X", "-W"}
_ATTRS = ["ppid", "name", "username", "status", "memory_info", "num_threads", "create_time"]

Key = tuple[int, float]


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
    if argv and _PYTHON.match(os.path.basename(argv[0])):
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


# --- finding processes ----------------------------------------------------------------------


@dataclass
class _Entry:
    """One line of the process table, read once per collect and shared by every watch."""

    ppid: int
    text: str


def _scan() -> dict[int, _Entry]:
    table: dict[int, _Entry] = {}
    for proc in psutil.process_iter(["ppid", "name", "cmdline"], ad_value=None):
        info = proc.info
        # Zombies and kernel threads have no command line; their name is all there is to match.
        text = " ".join(info["cmdline"] or []) or info["name"] or ""
        table[proc.pid] = _Entry(ppid=info["ppid"] or 0, text=text)
    return table


def _ancestors(pid: int, table: dict[int, _Entry]) -> list[int]:
    found: list[int] = []
    entry = table.get(pid)
    while entry is not None and entry.ppid and entry.ppid not in found and entry.ppid != pid:
        found.append(entry.ppid)
        entry = table.get(entry.ppid)
    return found


def _descendants(roots: list[int], table: dict[int, _Entry]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, entry in table.items():
        children.setdefault(entry.ppid, []).append(pid)
    found: list[int] = []
    seen = set(roots)
    stack = sorted(roots, reverse=True)
    while stack:
        for child in sorted(children.get(stack.pop(), []), reverse=True):
            if child not in seen:
                seen.add(child)
                found.append(child)
                stack.append(child)
    return found


def _candidates(
    spec: ProcessWatch, table: dict[int, _Entry], excluded: set[int]
) -> list[tuple[int, bool]]:
    """(pid, root) pairs for one watch, roots first; a match under another match is no root."""
    if spec.pid is not None:
        matched = [spec.pid] if spec.pid in table or psutil.pid_exists(spec.pid) else []
    else:
        pattern = re.compile(spec.match or "")
        matched = [
            pid
            for pid, entry in sorted(table.items())
            if pid not in excluded and pattern.search(entry.text)
        ]
    matched_set = set(matched)
    roots = [p for p in matched if not matched_set.intersection(_ancestors(p, table))]
    rows = [(pid, True) for pid in roots]
    if spec.children:
        rows += [(pid, False) for pid in _descendants(roots, table)]
    else:
        rows += [(pid, False) for pid in matched if pid not in roots]
    return rows


# --- describing processes -------------------------------------------------------------------


def _handle(pid: int, handles: dict[Key, psutil.Process]) -> tuple[Key, psutil.Process, bool]:
    """The kept psutil handle for pid (and whether it is new); raises psutil.NoSuchProcess."""
    proc = psutil.Process(pid)
    key = (pid, proc.create_time())
    kept = handles.get(key)
    if kept is not None:
        return key, kept, False
    handles[key] = proc
    return key, proc, True


def _describe(
    proc: psutil.Process, watch_id: int, root: bool, env_patterns: tuple[str, ...]
) -> tuple[ProcessInfo, bool]:
    """A row for proc, and False if its environment could not be read; raises NoSuchProcess."""
    attrs = _ATTRS + ["cmdline"] + (["environ"] if root else [])
    with proc.oneshot():
        info: dict[str, Any] = proc.as_dict(attrs, ad_value=None)
        try:
            cpu: float | None = proc.cpu_percent(None)
        except psutil.AccessDenied:
            cpu = None
    created = info["create_time"] or 0.0
    argv = redact.argv(info["cmdline"] or [])
    environ = info.get("environ")
    selected = {
        k: v
        for k, v in sorted((environ or {}).items())
        if any(fnmatchcase(k, pattern) for pattern in env_patterns)
    }
    memory = info["memory_info"]
    row = ProcessInfo(
        watch_id=watch_id,
        pid=proc.pid,
        ppid=info["ppid"] or 0,
        name=info["name"] or "?",
        user=info["username"],
        state=info["status"] or "unknown",
        cpu_percent=cpu,
        rss_bytes=memory.rss if memory else None,
        vms_bytes=memory.vms if memory else None,
        threads=info["num_threads"],
        started_at=datetime.fromtimestamp(created, UTC),
        age_s=max(0.0, time.time() - created),
        argv=argv,
        flags=parse_flags(argv),
        env=redact.env(selected) if root else {},
        root=root,
    )
    env_readable = not root or environ is not None or row.state == psutil.STATUS_ZOMBIE
    return row, env_readable


def _excluded() -> set[int]:
    """ctxd itself and its ancestors (shell, pytest, harness), whose command lines echo patterns."""
    own = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        own.update(p.pid for p in psutil.Process().parents())
    return own


def _target(spec: ProcessWatch) -> str:
    return f"pid {spec.pid}" if spec.pid is not None else f"/{spec.match}/"


def _reason(exc: BaseException) -> str:
    return redact.text(f"{type(exc).__name__}: {exc}")[:200]


@dataclass
class _State:
    """What one collect() shares across watches."""

    handles: dict[Key, psutil.Process]
    limit: int
    seen: set[Key] = field(default_factory=set)
    fresh: list[tuple[psutil.Process, ProcessInfo]] = field(default_factory=list)


def _collect_watch(
    watch_id: int,
    spec: ProcessWatch,
    rows: list[tuple[int, bool]],
    state: _State,
    section: ProcessesSection,
) -> None:
    target = _target(spec)
    env_patterns = tuple(spec.env) or DEFAULT_ENV
    found = shown = 0
    for pid, root in rows:
        if shown >= state.limit:
            reason = f"showing the first {state.limit} of {len(rows)} processes"
            section.unavailable.append(Unavailable(watch_id=watch_id, target=target, reason=reason))
            break
        try:
            key, proc, new = _handle(pid, state.handles)
            if key in state.seen:
                found += 1
                continue  # an earlier watch already shows it
            row, env_readable = _describe(proc, watch_id, root, env_patterns)
        except psutil.NoSuchProcess:
            continue  # exited while we looked: the next snapshot reports it gone
        state.seen.add(key)
        found += 1
        shown += 1
        section.items.append(row)
        if new:
            row.cpu_percent = None
            state.fresh.append((proc, row))
        if not env_readable:
            section.unavailable.append(
                Unavailable(
                    watch_id=watch_id, target=f"pid {pid} environment", reason="access denied"
                )
            )
    if not found:
        reason = (
            f"no process with pid {spec.pid}"
            if spec.pid is not None
            else f"no process matches /{spec.match}/"
        )
        section.unavailable.append(Unavailable(watch_id=watch_id, target=target, reason=reason))


def collect(watches: list[Watch], ctx: CollectContext) -> ProcessesSection:
    section = ProcessesSection()
    specs = [(w.id, w.spec) for w in watches if isinstance(w.spec, ProcessWatch)]
    handles: dict[Key, psutil.Process] = ctx.memory.setdefault(NAME, {})
    state = _State(handles=handles, limit=ctx.settings.limits.processes_per_watch_max)
    try:
        table = _scan() if specs else {}
        excluded = _excluded()
    except Exception as exc:  # a broken /proc must not cost the whole dump
        section.unavailable.append(Unavailable(target=NAME, reason=_reason(exc)))
        return section
    for watch_id, spec in specs:
        try:
            rows = _candidates(spec, table, excluded)
            _collect_watch(watch_id, spec, rows, state, section)
        except Exception as exc:  # one odd watch must not hide the others
            section.unavailable.append(
                Unavailable(watch_id=watch_id, target=_target(spec), reason=_reason(exc))
            )
    if state.fresh:
        # A first cpu_percent() call only starts the clock: sample all newcomers in one wait.
        time.sleep(ctx.settings.cpu_sample_s)
        for proc, row in state.fresh:
            with contextlib.suppress(psutil.Error):
                row.cpu_percent = proc.cpu_percent(None)
    for key in set(handles) - state.seen:
        del handles[key]
    return section
