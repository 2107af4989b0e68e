"""A relaunch block: the shell lines that start a watched root process again as it ran.

`cd` to its working directory, the selected environment variables whose value differs from
what a login shell of ctxd's user sets (or that the process lacks), the argv shell-quoted,
and its stdout/stderr redirections when they go to files. Values come from the redacted
observation, so a secret reads `[REDACTED]` and the block says it must be filled in.
"""

import contextlib
import os
import pwd
import shlex
import signal
import subprocess
import threading
from collections.abc import Mapping
from fnmatch import fnmatchcase

from ctxd import redact
from ctxd.collectors import _holders
from ctxd.redact.rules import REDACTED

LOGIN_SHELL_TIMEOUT_S = 3.0
_MARK = "\0ctxd-login-env\0"
_login: dict[str, str] | None = None
_login_read = False
_login_lock = threading.Lock()


def _read_login_env(
    shell: str | None = None, timeout: float = LOGIN_SHELL_TIMEOUT_S
) -> dict[str, str] | None:
    """What `$SHELL -l` of ctxd's user exports, from a clean start; None when it cannot say.
    The shell runs in a session of its own: past `timeout` the whole group is killed, so
    what a profile started (an agent, a slow command) does not outlive it."""
    try:
        user = pwd.getpwuid(os.getuid())
    except KeyError:
        return None
    if shell is None:
        shell = user.pw_shell if user.pw_shell and os.path.exists(user.pw_shell) else "/bin/sh"
    clean = {"HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name,
             "SHELL": shell, "PATH": "/usr/local/bin:/usr/bin:/bin", "TERM": "dumb"}  # fmt: skip
    try:
        proc = subprocess.Popen(
            [shell, "-l", "-c", f"printf '{_MARK.replace(chr(0), chr(92) + '0')}'; env -0"],
            env=clean,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=user.pw_dir if os.path.isdir(user.pw_dir) else "/",
            start_new_session=True,
        )
    except OSError:
        return None
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=1)
        return None
    out = stdout.decode(errors="replace")
    if proc.returncode != 0 or _MARK not in out:
        return None
    pairs = out.split(_MARK, 1)[1].split("\0")
    return dict(p.split("=", 1) for p in pairs if "=" in p)


def login_env() -> dict[str, str] | None:
    """The login shell's environment, read once per ctxd process (a profile can be slow)."""
    global _login, _login_read
    with _login_lock:
        if not _login_read:
            _login, _login_read = _read_login_env(), True
        return _login


def _redirect(pid: int, fd: int) -> tuple[str, bool] | None:
    """(file, appends) when descriptor `fd` of pid is a regular file, else None."""
    d = _holders.descriptor(pid, fd)
    if d is None or not d.target.startswith("/") or d.target.startswith(("/dev/", "/proc/")):
        return None  # a terminal, pipe or socket: nothing to write in a block
    return d.target, d.appends


def redirections(pid: int) -> str:
    """` > out.log 2>&1`, ` >> a.log 2> b.log` ...: where its stdout and stderr go, or ""."""
    out, err = _redirect(pid, 1), _redirect(pid, 2)
    parts = []
    if out:
        parts.append(f"{'>>' if out[1] else '>'} {shlex.quote(redact.text(out[0]))}")
    if err and out and err[0] == out[0]:
        parts.append("2>&1")
    elif err:
        parts.append(f"2{'>>' if err[1] else '>'} {shlex.quote(redact.text(err[0]))}")
    return (" " + " ".join(parts)) if parts else ""


def block(
    argv: list[str],
    cwd: str | None,
    environ: Mapping[str, str] | None,
    patterns: tuple[str, ...],
    pid: int,
    login: Mapping[str, str] | None,
) -> list[str]:
    """The relaunch lines of one process; `environ` is its raw environment (None: unread),
    `patterns` the variables the watch selects, `login` a login shell's environment."""
    if not argv:
        return []
    lines: list[str] = []
    exports: list[str] = []
    unsets: list[str] = []
    if environ is not None:
        base = login or {}

        def chosen(name: str) -> bool:
            return any(fnmatchcase(name, p) for p in patterns)

        for name, value in sorted(environ.items()):
            if chosen(name) and base.get(name) != value:
                exports.append(f"{name}={shlex.quote(redact.env({name: value})[name])}")
        unsets = sorted(n for n in base if chosen(n) and n not in environ)
    command = shlex.join(argv) + redirections(pid)
    secrets = sum(x.count(REDACTED) for x in [*exports, command])
    if secrets:
        which = "1 value reads" if secrets == 1 else f"{secrets} values read"
        lines.append(f"# {which} {REDACTED}: fill in the real value before running")
    if environ is None:
        lines.append("# its environment could not be read: variables it needs are missing here")
    elif login is None:
        lines.append("# a login shell's environment could not be read: all selected variables")
    if cwd:
        lines.append(f"cd {shlex.quote(redact.text(cwd))}")
    if unsets:
        lines.append("unset " + " ".join(unsets))
    lines += [f"export {assignment}" for assignment in exports]
    lines.append(command)
    return lines
