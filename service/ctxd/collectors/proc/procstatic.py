"""What a watched process shows for good: its redacted command line, environment and packages,
described once per exec and kept in the process collector's memory."""

import contextlib
import pwd
import re
from dataclasses import dataclass, field
from fnmatch import translate
from functools import lru_cache
from typing import Any

import psutil

from ctxd import redact
from ctxd.collectors.proc import procpackages, relaunch
from ctxd.collectors.proc.argv import is_python, parse_flags
from ctxd.models import Flag, ProcessWatch
from ctxd.redact import known as redact_known

# What decides how a GPU job behaves, how loudly a program logs (`APP_DEBUG`,
# `TORCH_DISTRIBUTED_DEBUG`), and which Python and libraries it actually loads.
_ML_ENV = ("CUDA_*", "NCCL_*", "TORCH_*", "PYTORCH_*", "HF_*", "SGLANG_*", "VLLM_*", "*_DEBUG")
_PATH_ENV = ("OMP_NUM_THREADS", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX")
# Which rank a process of a distributed job is: read whatever else a watch asks for.
RANK_ENV = ("RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
DEFAULT_ENV = _ML_ENV + _PATH_ENV + RANK_ENV


@dataclass
class Static:
    """What one exec of a process shows for good: its redacted command line and environment,
    and its packages. `signature` says when to describe it again: another exec (command line,
    executable), another watch spec, or a secret learned since (redaction may change)."""

    signature: tuple
    argv: list[str]
    env: dict[str, str]
    packages: dict[str, str] | None
    denied: list[str]
    relaunch: list[str]  # roots: lines that start it again as it ran (_relaunch.py)
    user: str | None = None  # its real uid's name, as psutil's username
    flags: list[Flag] = field(default_factory=list)  # parse_flags(argv)


@lru_cache(maxsize=64)
def env_pattern(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """The globs of a watch's `env` as one regex: one match per variable, not one per glob."""
    return re.compile("|".join(f"(?:{translate(p)})" for p in patterns))


def select(environ: dict[str, str], patterns: tuple[str, ...]) -> dict[str, str]:
    wanted = env_pattern(patterns).match
    return {k: v for k, v in sorted(environ.items()) if wanted(k)}


def describe(
    proc: psutil.Process, info: dict[str, Any], root: bool, spec: ProcessWatch, zombie: bool
) -> Static:
    """Read and redact what a process shows for good."""
    denied: list[str] = []
    environ: dict[str, str] | None = None
    if root:
        try:
            environ = proc.environ()
            redact.learn_env(environ)  # its secrets are then redacted wherever they reappear
        except psutil.ZombieProcess:
            pass  # dead already: nothing left to read
        except psutil.AccessDenied:
            denied.append("environment")
    elif not zombie:
        with contextlib.suppress(psutil.Error):  # a member: only which rank it is (RANK_ENV)
            environ = proc.environ()
    packages = None
    python = is_python(info["exe"])
    if root and (spec.packages or python) and not zombie:
        dirs = procpackages.site_dirs(
            (info["cmdline"] or [""])[0], info["exe"], environ or {}, info["cwd"],
            root=f"/proc/{proc.pid}/root",
        )  # fmt: skip
        asked = procpackages.package_versions(dirs, spec.packages) if spec.packages else {}
        packages = {**(procpackages.stack_versions(dirs) if python else {}), **asked}
    # the generation is read before redacting: a secret learned meanwhile re-describes
    known = signature(info, root, spec, zombie)
    argv = redact.argv(info["cmdline"] or [])
    patterns = DEFAULT_ENV + tuple(spec.env) if root else RANK_ENV  # a watch's names add
    again = []
    if root and not zombie:
        again = relaunch.block(
            info["cmdline"] or [], info["cwd"], environ, patterns, proc.pid, relaunch.login_env()
        )  # as read: the block redacts each word itself, and says which it had to escape
    try:
        user: str | None = user_name(proc.uids().real)
    except (psutil.AccessDenied, psutil.ZombieProcess):
        user = None
    return Static(
        signature=known,
        user=user,
        argv=argv,
        flags=parse_flags(argv),
        env=redact.env(select(environ or {}, patterns)),
        packages=packages,
        denied=denied,
        relaunch=again,
    )


@lru_cache(maxsize=256)
def user_name(uid: int) -> str:
    """The account name of uid (as psutil's username), asked of the password database once."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def signature(info: dict[str, Any], root: bool, spec: ProcessWatch, zombie: bool) -> tuple:
    return (
        tuple(info["cmdline"] or ()), info["exe"], root, zombie, tuple(spec.env),
        tuple(spec.packages), redact_known.generation,
    )  # fmt: skip
