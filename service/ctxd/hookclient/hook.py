"""A harness's hook command (`…/hookclient/__main__.py HARNESS`, or `ctxd hook HARNESS`). It
forwards the hook's JSON to ctxd, prints what comes back in the harness's own output format
(`harnesses.py`), and never gets in the agent's way: exit 0 whatever happens.

Standard library only, and nothing of ctxd's server: it runs on every prompt and every tool
call, so its path imports nothing an interpreter does not hold already but `os`, `_json` and
`_socket` (run as an install writes it, `python -S -I …/hookclient/__main__.py HARNESS`, it
costs little more than a bare interpreter's start); what only a waiter, an error or a first
start needs is imported there. The policy (which session, what to record, what to inject, one
dump per turn) is the server's (`UseCases.hook`), so this file only carries messages.
"""

from __future__ import annotations

import os
import sys
import time

from ctxd.hookclient import env, jsontext, request
from ctxd.hookclient.harnesses import COMMAND_HOOKS, HOOKS, CommandHook
from ctxd.hookclient.request import LOOPBACK

TYPE_CHECKING = False  # typing's own flag costs the hook its import
if TYPE_CHECKING:
    from typing import Any, TextIO

MAX_PAYLOAD_CHARS = 1_000_000
OUTPUT_KEPT_CHARS = 8_000  # of each text in a tool's response
QUICK_TIMEOUT_S = 5.0
SHELLS = {"sh", "bash", "dash", "zsh", "fish", "ksh", "busybox"}
WAKE_MAX_S = 7200.0  # a waiter's ceiling: it then exits quietly
WAKE_POLL_S = 290.0  # one long poll; a waiter asks again until its ceiling
WAKE_RETRY_S = 5.0
LOCK_FD = 200  # the waiter lock's descriptor in the shell that waits


class HookError(Exception):
    """Why a hook did nothing: one line for the person, and the hook still exits 0."""


class Down(HookError):
    """Nothing answers at the service's address."""


def hook_main(argv: list[str], stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int | None:
    """`ctxd [--url U] hook HARNESS`: handled here without argparse (a usage error would exit
    2, which Claude Code reads as "block"); None when argv is some other command."""
    args, url = _options(argv)
    if args[:1] != ["hook"] or "--print-config" in args or "-h" in args or "--help" in args:
        return None
    return _hook(args[1:], url, stdin, stdout, stderr)


def main(argv: list[str]) -> int:
    """`python -S -I …/ctxd/hookclient/__main__.py [--url U] [--token-file F] hook HARNESS
    [--wake]`: the hook command an install writes, with no `ctxd` command in between (the
    word `hook` optional: an install writes it, so that its commands end as `ctxd hook`'s)."""
    args, url = _options(argv)
    return _hook(args[1:] if args[:1] == ["hook"] else args, url, sys.stdin, sys.stdout, sys.stderr)


def _options(argv: list[str]) -> tuple[list[str], str]:
    """(the arguments after `--url` and `--token-file`, the service's URL)."""
    args, url = list(argv), env.url()
    while args and args[0].partition("=")[0] in ("--url", "--token-file"):  # before `hook`
        name, given, value = args.pop(0).partition("=")
        if not given and args:
            value = args.pop(0)
        if name == "--url":
            url = env.with_scheme(value)
        else:
            os.environ["CTXD_TOKEN_FILE"] = value  # read by env.token() for each request
    return args, url


def _hook(args: list[str], url: str, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """`HARNESS [--wake]`: one hook event, or a waiter; exit 0 whatever the arguments say."""
    harness = HOOKS.get(args[0] if args else "claude")
    if harness is None:
        known = ", ".join(COMMAND_HOOKS)
        print(f"ctxd hook: no harness {args[0]!r} runs hook commands (known: {known})", file=stderr)
        return 0
    if args[1:] == ["--wake"]:
        return wake(harness, url, stdin, stderr)
    if len(args) > 1:
        import shlex

        print(f"ctxd hook: ignored arguments {shlex.join(args[1:])!r}", file=stderr)
    return run(harness, url, stdin, stdout, stderr)


def wake(harness: CommandHook, url: str, stdin: TextIO, stderr: TextIO) -> int:
    """`ctxd hook H --wake`, run by the harness in the background (Claude Code's async
    rewake hook) after a launch or at the turn's end: waits for the session's attempts' news
    and exits 2 with it on stderr, which wakes the idle agent with that text; exits 0 when
    there is nothing to wait for, another waiter of the conversation waits already, the
    ceiling (CTXD_WAKE_MAX_S, 2 h) passes, CTXD_WAKE=0, or anything goes wrong.

    Python decides and takes the conversation's lock; the wait itself, hours of a blocked
    read, is handed to a shell of some 2 MiB (`WAITER`, bash's /dev/tcp, holding the lock
    across the exec) where ctxd is plain HTTP, else done here."""
    if os.environ.get("CTXD_WAKE", "1").strip().lower() in ("0", "false", "no", "off"):
        return 0
    try:
        payload = parse_payload(harness, stdin.read(MAX_PAYLOAD_CHARS))
        launched = harness.wakes(harness.event_name(payload) or "", payload)
        if launched is None or not _can_be_woken(harness_pid()):
            return 0
        lock = _waiter_lock(url, payload)
        if lock is None:
            return 0  # another waiter of this conversation tells its news
        body: dict[str, Any] = {
            "payload": {**payload, "tool_response": tail(payload.get("tool_response"))},
            "root": git_root(str(payload.get("cwd") or "")),
        }
        if session := env.session():
            body["session"] = session
        if request.split(url)[1] in LOOPBACK and (pid := harness_pid()):
            body["harness_pid"] = pid
        ceiling = env.wake_max_s(WAKE_MAX_S)
        import shutil

        bash = shutil.which("bash")
        if bash and request.split(url)[0] == "http":
            _hand_to_shell(bash, lock, url, harness.name, body, launched, ceiling)
        return _wait(url, harness.name, body, launched, ceiling, stderr)
    except Exception as exc:  # never a traceback; exit 2 would wake the agent with it
        print(f"ctxd hook --wake: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
        return 0


def _can_be_woken(harness: int | None) -> bool:
    """False for a harness run to answer one prompt and exit (`claude -p` without stream-json
    input): it is never woken, and it would wait for the waiter before exiting."""
    try:
        argv = _read(f"/proc/{harness}/cmdline").split(b"\0") if harness else []
    except OSError:
        return True
    claude = any(b"claude" in part for part in argv[:3])  # its binary, or node and its cli.js
    one_shot = claude and (b"-p" in argv or b"--print" in argv)
    return not one_shot or b"stream-json" in argv


def _wait(
    url: str, harness: str, body: dict[str, Any], launched: bool, ceiling: float, stderr: TextIO
) -> int:
    deadline = time.monotonic() + ceiling
    while (left := deadline - time.monotonic()) > 1:
        wait_s = min(WAKE_POLL_S, left)
        asked = jsontext.dumps({**body, "launched": launched, "wait_s": wait_s}).encode()
        try:
            status, said = post(url, f"/api/hooks/{harness}/wake", asked, wait_s + 30)
        except HookError:
            time.sleep(min(WAKE_RETRY_S, max(0.0, left - 1)))  # ctxd restarting: ask again
            continue
        answer = jsontext.loads(said.decode() or "{}") if status == 200 else {}
        if not isinstance(answer, dict) or status != 200:
            return 0
        if answer.get("text"):
            stderr.write(str(answer["text"]) + "\n")
            return 2
        if not answer.get("pending"):
            return 0
        launched = False  # ctxd has seen the launch by now: its word on what is pending
    return 0


# The long wait in a shell: the same loop as `_wait`, over bash's /dev/tcp, with the answer
# asked as plain text ("wake" and the news, "pending", or "done" on its first line).
WAITER = r"""
host=$1 port=$2 path=$3 ceiling=$4 poll=$5 retry=$6
auth=$CTXD_WAKE_AUTH body=$CTXD_WAKE_FIRST next=$CTXD_WAKE_NEXT
unset CTXD_WAKE_AUTH CTXD_WAKE_FIRST CTXD_WAKE_NEXT
deadline=$((SECONDS + ceiling))
while [ "$SECONDS" -lt "$deadline" ]; do
  left=$((deadline - SECONDS)); wait=$((left < poll ? left : poll))
  asked=${body/__WAIT__/$wait}
  answer=""
  if exec 3<>"/dev/tcp/$host/$port"; then
    head='POST %s HTTP/1.0\r\nHost: %s:%s\r\nContent-Type: application/json\r\n'
    printf "$head%sContent-Length: %d\r\n\r\n%s" \
      "$path" "$host" "$port" "$auth" "${#asked}" "$asked" >&3
    answer=$(cat <&3)
    exec 3<&-
  fi
  case $answer in
    "") sleep "$retry"; continue ;;
    "HTTP/1."?" 200 "*) answer=${answer#*$'\r\n\r\n'} ;;
    *) exit 0 ;;
  esac
  case $answer in
    wake$'\n'*) printf '%s\n' "${answer#wake$'\n'}" >&2; exit 2 ;;
    pending*) body=$next ;;
    *) exit 0 ;;
  esac
done
exit 0
"""


def _hand_to_shell(
    bash: str, lock: int, url: str, harness: str, body: dict[str, Any], launched: bool,
    ceiling: float,
) -> None:  # fmt: skip
    """Replace this process with the shell waiter, the conversation's lock still held (a
    flock belongs to the open file, which the exec keeps). Returns only if the exec fails."""
    _, host, port, _ = request.split(url)
    token = env.token()
    auth = f"Authorization: Bearer {token}\r\n" if token else ""

    def asked(launched: bool) -> str:  # ASCII (json.dumps' default): ${#…} counts its bytes
        return jsontext.dumps({**body, "launched": launched, "plain": True, "wait_s": 0}).replace(
            '"wait_s": 0', '"wait_s": __WAIT__'
        )

    os.dup2(lock, LOCK_FD)  # out of the shell's way: it talks to ctxd on descriptor 3
    os.set_inheritable(LOCK_FD, True)
    times = [str(int(t)) for t in (ceiling, WAKE_POLL_S, WAKE_RETRY_S)]
    argv = [bash, "--noprofile", "--norc", "-c", WAITER, "ctxd-wake", host,
            str(port or 80), f"/api/hooks/{harness}/wake", *times]  # fmt: skip
    # what it sends (the token, the agent's command) goes in its environment, which only its
    # own user reads, never on its command line, which every account's `ps` shows
    secrets = {"CTXD_WAKE_AUTH": auth, "CTXD_WAKE_FIRST": asked(launched),
               "CTXD_WAKE_NEXT": asked(False)}  # fmt: skip
    import contextlib

    with contextlib.suppress(OSError):
        os.execve(bash, argv, {**os.environ, **secrets})


def _waiter_lock(url: str, payload: dict[str, Any]) -> int | None:
    """The conversation's waiter lock (a file under ~/.cache/ctxd/wake, per ctxd and
    conversation), taken: its descriptor, held until this process (or the shell it becomes)
    ends; None when another waiter holds it. One waiter per conversation, whatever the
    number of launches."""
    conversation = str(payload.get("session_id") or payload.get("cwd") or "")
    import fcntl
    import hashlib

    name = hashlib.sha256(f"{url}\0{conversation}".encode()).hexdigest()[:24]
    folder = os.path.join(os.path.expanduser("~"), ".cache", "ctxd", "wake")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    lock = os.path.join(folder, f"{name}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def run(harness: CommandHook, url: str, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    event = ""
    try:
        payload = parse_payload(harness, stdin.read(MAX_PAYLOAD_CHARS))
        event = harness.event_name(payload) or ""
        timeout = harness.slow_events.get(event, QUICK_TIMEOUT_S)
        if (ceiling := env.hook_timeout_s()) is not None:
            timeout = min(timeout, ceiling)  # the user's ceiling
        try:
            answer = forward(url, harness.name, payload, timeout)
        except Down:
            from ctxd.hookclient import autostart  # only when nothing answers

            started = autostart.ensure(url, wait=event in harness.tell_events)
            if started is None:
                raise
            answer = forward(url, harness.name, payload, timeout)
            answer["message"] = answer.get("message") or started
        output = harness.output(event, answer)
        harness.remember(event, str(answer.get("session") or ""))
    except HookError as exc:
        print(f"ctxd hook: {exc}", file=stderr)
        output = harness.trouble(event, str(exc))
    except Exception as exc:  # never a traceback, never a non-zero exit
        print(f"ctxd hook: {type(exc).__name__}: {exc}"[:500], file=stderr)
        output = None
    if output:
        stdout.write(jsontext.dumps(output) + "\n")
    return 0


def parse_payload(harness: CommandHook, text: str) -> dict[str, Any]:
    try:
        data = jsontext.loads(text)
    except ValueError as exc:  # json's JSONDecodeError: "Expecting value: line 1 column 1 …"
        raise HookError(f"hook input is not JSON ({exc})") from None
    if not isinstance(data, dict) or harness.event_name(data) is None:
        raise HookError(f"hook input names no hook event; is this a {harness.label} hook?")
    return data


def forward(url: str, harness: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
    """POST the event to ctxd; its answer: {"session", "context", "message"}."""
    cwd = payload.get("cwd")
    body: dict[str, Any] = {
        # a tool's output cut to its end: what ctxd keeps, in a request it accepts
        "payload": {**payload, "tool_response": tail(payload.get("tool_response"))},
        "root": git_root(cwd) if isinstance(cwd, str) else "",
    }
    if session := env.session():
        body["session"] = session
    if (max_chars := env.hook_max_chars()) is not None:
        body["max_chars"] = max_chars
    if request.split(url)[1] in LOOPBACK and (pid := harness_pid()):
        body["harness_pid"] = pid  # only a service on this machine can look it up
    status, said = post(url, f"/api/hooks/{harness}", jsontext.dumps(body).encode(), timeout)
    if status != 200:
        raise HookError(f"ctxd answered HTTP {status}: {_detail(said.decode(errors='replace'))}")
    answer = jsontext.loads(said.decode() or "{}")
    return answer if isinstance(answer, dict) else {}


def post(url: str, path: str, body: bytes, timeout: float) -> tuple[int, bytes]:
    headers = {"content-type": "application/json", **_auth()}
    try:
        return request.request(url, "POST", path, body, headers, timeout)
    except OSError as exc:
        kind_of = Down if isinstance(exc, ConnectionRefusedError) else HookError
        raise kind_of(
            f"ctxd is not reachable at {url} ({exc or type(exc).__name__}); start it with "
            f"`{env.start_command(url)}`; the agent goes on without it"
        ) from None


def git_root(cwd: str) -> str:
    """The checkout holding `cwd` (a `.git` folder or file), found without running git."""
    if not cwd.startswith("/"):
        return ""
    folder = os.path.normpath(cwd)
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        if folder == "/":
            return ""
        folder = os.path.dirname(folder)


def harness_pid() -> int | None:
    """The harness process this hook runs under: the first ancestor that is not a shell
    (Claude Code runs a hook's command through one), read from /proc; None elsewhere."""
    pid = os.getppid()
    for _ in range(4):
        try:
            stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
        except OSError:
            return None
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name not in SHELLS:
            return pid
        pid = int(rest.split()[1])
    return None


def _read(path: str) -> bytes:
    with open(path, "rb") as held:
        return held.read()


def tail(value: Any) -> Any:
    """A tool's output cut to its end: what ctxd keeps, and a request the server accepts
    (the server cuts what a harness posts itself the same way)."""
    if isinstance(value, str):
        return value[-OUTPUT_KEPT_CHARS:]
    if isinstance(value, dict):
        return {k: tail(v) for k, v in value.items()}
    if isinstance(value, list):
        return [tail(v) for v in value[-20:]]
    return value


def _auth() -> dict[str, str]:
    token = env.token()
    return {"Authorization": f"Bearer {token}"} if token else {}


def _detail(said: str) -> str:
    try:
        answer = jsontext.loads(said)
    except ValueError:
        return said[:300]
    return str(answer.get("detail", said) if isinstance(answer, dict) else said)[:300]
