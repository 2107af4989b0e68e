"""Command watches: allowlisted short commands run without a shell, bounded, timed and redacted."""

import contextlib
import os
import selectors
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ctxd import redact
from ctxd.collectors import CollectContext, per_watch
from ctxd.collectors._logtext import clean_line
from ctxd.collectors.logs import redact_lines
from ctxd.errors import Refused
from ctxd.models import CommandInfo, CommandsSection, CommandWatch, Unavailable, Watch
from ctxd.settings import Settings

T = TypeVar("T")

NAME = "commands"
SECTION = CommandsSection
KIND = "command"
RETIRES = False
READ_BYTES = 65_536
# Past this much output the command is stopped: what is shown is bounded anyway.
HARD_CAP_FACTOR = 4
_QUIET_ENV = {"NO_COLOR": "1", "PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}


def resolve(spec: CommandWatch, settings: Settings) -> tuple[str, list[str]]:
    """The allowlist entry a watch names: (name, argv); Refused when there is none."""
    allowed = settings.commands
    if spec.name is not None:
        if spec.name in allowed:
            return spec.name, list(allowed[spec.name])
        names = ", ".join(sorted(allowed)) or "none"
        raise Refused(f"command '{spec.name}' is not in the server's allowlist ({names})")
    for name, argv in allowed.items():
        if spec.argv == argv:
            return name, list(argv)
    raise Refused(
        "this argv is not in the server's allowlist; commands are configured with CTXD_COMMANDS"
    )


def allowlisted(spec: T, settings: Settings) -> T:
    """Refuse (Refused) a command watch the server's configuration does not allow.

    One given by its argv is kept by its allowlist name: the stored watch then never holds
    the argv (which may carry a secret, and is redacted before storing) and follows the
    server's configuration if that changes.
    """
    if isinstance(spec, CommandWatch):
        name, _ = resolve(spec, settings)
        return spec.model_copy(update={"name": name, "argv": None})
    return spec


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own group: children go too


# Characters past the output cut that redaction still sees: more than any token is long.
CUT_CONTEXT = 1024


def run(argv: list[str], timeout_s: float, max_chars: int, cwd: str | None = None) -> dict:
    """Run `argv` (never a shell); output bounded to `max_chars`, cut off after `timeout_s`."""
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env={**os.environ, **_QUIET_ENV},
        start_new_session=True,
        close_fds=True,
    )
    assert proc.stdout is not None
    chunks: list[bytes] = []
    kept, cap, timed_out, cut = 0, max_chars * HARD_CAP_FACTOR, False, False
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = timeout_s - (time.monotonic() - started)
            if left <= 0:
                timed_out = True
                break
            if not sel.select(timeout=left):
                continue
            data = os.read(proc.stdout.fileno(), READ_BYTES)
            if not data:
                break  # EOF: every writer closed the pipe
            chunks.append(data)
            kept += len(data)
            if kept > cap:
                cut = True
                break
    if cut:  # enough read: stop it now, a chatty command would block on its full pipe
        _kill(proc)
    try:
        code = proc.wait(timeout=max(0.1, timeout_s - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        timed_out, code = True, None
    if timed_out:
        _kill(proc)
        proc.wait()
    proc.stdout.close()
    text = b"".join(chunks).decode("utf-8", errors="replace")
    if len(text) > max_chars:
        # redacted before the cut, with room past it, so a token across the cut is seen whole
        text, cut = redact.cut(text[: max_chars + CUT_CONTEXT], max_chars, marker=""), True
    lines = [clean_line(line, 2000) for line in text.splitlines()]
    return {
        "argv": argv,
        "exit_code": None if timed_out else code,
        "timed_out": timed_out,
        "duration_s": round(time.monotonic() - started, 3),
        "output": redact_lines(lines),
        "output_cut": cut,
    }


def observe(watch: Watch, settings: Settings) -> CommandInfo | Unavailable:
    spec = watch.spec
    assert isinstance(spec, CommandWatch)
    target = spec.name or " ".join(spec.argv or [])
    try:
        name, argv = resolve(spec, settings)
    except Refused as exc:  # the allowlist changed since the watch was added
        return Unavailable(watch_id=watch.id, target=target, reason=str(exc))
    timeout = min(spec.timeout_s, max(0.5, settings.limits.collector_timeout_s - 1))
    try:
        result = run(argv, timeout, settings.limits.command_output_chars_max, spec.cwd)
    except FileNotFoundError:
        reason = f"not found: {argv[0]}" if spec.cwd is None else "not found (command or cwd)"
        return Unavailable(watch_id=watch.id, target=target, reason=reason)
    except OSError as exc:
        reason = f"cannot run: {exc.strerror or exc}"
        return Unavailable(watch_id=watch.id, target=target, reason=reason)
    result["argv"] = redact.argv(argv)  # an allowlisted argv may still carry a token
    return CommandInfo(watch_id=watch.id, label=name, **result)


def collect(watches: list[Watch], ctx: CollectContext) -> CommandsSection:
    """Run every command watch at once, so one slow command does not delay the others."""
    mine = [w for w in watches if isinstance(w.spec, CommandWatch)]
    if not mine:
        return CommandsSection()
    with ThreadPoolExecutor(max_workers=min(8, len(mine))) as pool:
        futures = {w.id: pool.submit(observe, w, ctx.settings) for w in mine}
        items, unavailable = per_watch(mine, CommandWatch, lambda w: [futures[w.id].result()],
                                       lambda _: NAME)  # fmt: skip
    return CommandsSection(items=items, unavailable=unavailable)
