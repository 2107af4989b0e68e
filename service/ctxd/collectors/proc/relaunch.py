"""A relaunch block: the shell lines that start a watched root process again as it ran.

`cd` to its working directory, the selected environment variables whose value differs from
what a login shell of ctxd's user sets (or that the process lacks), the argv shell-quoted,
and its stdout/stderr redirections when they go to files, then under `nohup … &` as it ran
detached. Every word is redacted, then
shell-quoted; a variable whose name is no shell name is left out (a name is never quoted, so
`RX_;touch x;X` would run), and the block says how many. Redaction writes control characters
escaped (`\\x1b`), so a secret reads `[REDACTED]` and such a value `\\x1b`: the block says both
must be put back. Each line is one the redactor leaves as it is (the runner redacts it again):
a word a rule would rewrite reads `[REDACTED]`. Comments hold only counts and fixed words.
"""

import contextlib
import os
import pwd
import re
import shlex
import signal
import subprocess
import threading
from collections.abc import Mapping
from fnmatch import fnmatchcase

from ctxd import fmt, redact
from ctxd.collectors import _holders
from ctxd.redact.rules import REDACTED

# A line as pieces joined by spaces: each shell text, and what it reads when a redaction rule
# would rewrite it (None: a fixed word, never rewritten).
Pieces = list[tuple[str, str | None]]

LOGIN_SHELL_TIMEOUT_S = 3.0
_MARK = "\0ctxd-login-env\0"
_login: dict[str, str] | None = None
_login_read = False
_login_lock = threading.Lock()
_QUOTED_REDACTED = shlex.quote(REDACTED)
# What bash takes as a variable name; anything else in an `export` or `unset` is code.
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words that are not the program when they come first in a command line.
_RESERVED = frozenset(
    {"case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for", "function", "if"}
    | {"in", "select", "then", "time", "until", "while"}
)


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


ANONYMOUS = re.compile(r"/#\d+$")


def _redirect(pid: int, fd: int) -> tuple[str, bool] | None:
    """(file, appends) when descriptor `fd` of pid is a regular file, else None."""
    d = _holders.descriptor(pid, fd)
    if d is None or not d.target.startswith("/") or d.target.startswith(("/dev/", "/proc/")):
        return None  # a terminal, pipe or socket: nothing to write in a block
    if ANONYMOUS.search(d.target) and not os.path.exists(d.target):
        return None  # a file without a name (O_TMPFILE, shown as DIR/#INODE): none to give
    return d.target, d.appends


def redirections(pid: int) -> Pieces:
    """`> out.log 2>&1`, `>> a.log 2> b.log` ...: where its stdout and stderr go, or nothing."""
    out, err = _redirect(pid, 1), _redirect(pid, 2)
    pieces: Pieces = []
    if out:
        pieces += [(">>" if out[1] else ">", None), (_word(out[0]), _QUOTED_REDACTED)]
    if err and out and err[0] == out[0]:
        pieces.append(("2>&1", None))
    elif err:
        pieces += [("2>>" if err[1] else "2>", None), (_word(err[0]), _QUOTED_REDACTED)]
    return pieces


def _word(raw: str) -> str:
    return shlex.quote(redact.text(raw))


def _first_word(word: str) -> str:
    """The program's word: quoted even when shlex would not, when bare it would be an
    assignment (`X=1 touch y` runs touch) or a reserved word rather than the program."""
    quoted = shlex.quote(word)
    return f"'{word}'" if quoted == word and ("=" in word or word in _RESERVED) else quoted


def _same(line: str, redacted: str) -> bool:
    """Whether redacting `line` changed nothing but the quotes around a `'[REDACTED]'` (the
    `-p` rule takes them with the value): no other word changes its quoting by that."""
    return redacted.replace(_QUOTED_REDACTED, REDACTED) == line.replace(_QUOTED_REDACTED, REDACTED)


def _settled(pieces: Pieces) -> str | None:
    """The pieces as a line the redactor leaves as it is, or None. The runner redacts each
    line again, and a rule that rewrote part of a quoted word (`cd '/x/PASSWORD='"'"'…'`)
    would unbalance its quotes: the piece where the line would first change reads
    [REDACTED] instead, until nothing changes; a fixed piece there leaves the line out."""
    words = [text for text, _ in pieces]
    for _ in range(len(words) + 1):
        line = " ".join(words)
        redacted = redact.text(line)
        if _same(line, redacted):
            return line
        pairs = enumerate(zip(line, redacted, strict=False))
        at = next((i for i, (a, b) in pairs if a != b), len(line))  # where it first changes
        index, start = 0, 0
        for index, word in enumerate(words):  # the piece at `at`; a space goes with the next
            if at < start + len(word) or index == len(words) - 1:
                break
            start += len(word) + 1
        instead = pieces[index][1]
        if instead is None or words[index] == instead:
            return None
        words[index] = instead
    return None


def block(
    argv: list[str],
    cwd: str | None,
    environ: Mapping[str, str] | None,
    patterns: tuple[str, ...],
    pid: int,
    login: Mapping[str, str] | None,
) -> list[str]:
    """The relaunch lines of one process, everything in them redacted here: `argv` and `cwd`
    as read, `environ` its raw environment (None: unread), `patterns` the variables the watch
    selects, `login` a login shell's environment."""
    if not argv:
        return []
    exports: list[Pieces] = []
    unsets: list[str] = []
    refused = 0
    escaped = sum(fmt.has_unseen(word) for word in [*argv, cwd or ""])
    if environ is not None:
        base = login or {}

        def chosen(name: str) -> bool:
            return any(fnmatchcase(name, p) for p in patterns)

        for name, value in sorted(environ.items()):
            if not chosen(name) or base.get(name) == value:
                continue
            if not _SHELL_NAME.fullmatch(name):
                refused += 1
                continue
            escaped += fmt.has_unseen(value)
            # by its value, not by name: a name holding a known secret is redacted as a key
            (shown,) = map(shlex.quote, redact.env({name: value}).values())
            exports.append([("export", None), (f"{name}={shown}", f"{name}={_QUOTED_REDACTED}")])
        for name in sorted(n for n in base if chosen(n) and n not in environ):
            if _SHELL_NAME.fullmatch(name):
                unsets.append(name)
            else:
                refused += 1
    words = redact.argv(argv)
    command: Pieces = [(_first_word(words[0]), _QUOTED_REDACTED)]
    command += [(shlex.quote(word), _QUOTED_REDACTED) for word in words[1:]]
    wanted: list[Pieces] = []
    if cwd:
        wanted.append([("cd", None), (_word(cwd), _QUOTED_REDACTED)])
    if unsets:
        wanted.append([("unset", None), *((name, None) for name in unsets)])
    redirected = redirections(pid)
    if redirected:  # its output went to files: it ran detached, and so would the line
        command = [("nohup", None), *command, *redirected, ("&", None)]
    wanted += [*exports, command]
    body = [line for line in map(_settled, wanted) if line is not None]
    lines: list[str] = []
    secrets = sum(x.count(REDACTED) for x in body)
    if secrets:
        which = "1 value reads" if secrets == 1 else f"{secrets} values read"
        lines.append(f"# {which} {REDACTED}: fill in the real value before running")
    if refused:
        which = (
            "1 selected variable left out: its name is not a valid shell name"
            if refused == 1
            else f"{refused} selected variables left out: their names are not valid shell names"
        )
        lines.append(f"# {which}")
    if escaped:
        which = "1 value holds" if escaped == 1 else f"{escaped} values hold"
        it = "it" if escaped == 1 else "them"
        lines.append(
            f"# {which} control characters, written here escaped (\\x1b): put {it} back "
            "before running"
        )
    if len(body) < len(wanted):
        dropped = len(wanted) - len(body)
        which = "1 line" if dropped == 1 else f"{dropped} lines"
        lines.append(f"# {which} left out: redaction would change how a shell reads it")
    if environ is None:
        lines.append("# its environment could not be read: variables it needs are missing here")
    elif login is None:
        lines.append("# a login shell's environment could not be read: all selected variables")
    return lines + body
