"""The one choke point every observed string passes before it is kept, served or logged.

Three kinds of rule: by name (an env var, flag or key that says it holds a secret has its value
replaced whatever the value is, unless in free text the value only says where the secret comes
from: `$VAR`, `$(cat FILE)`, `$(gcloud auth print-access-token)`), by content (token shapes
from redact_shapes, PEM blocks, URL passwords, auth headers, `name=value` in free text, URL
query parameters, `-p` and `-u`) and known values (a value once seen under a secret name or in
a URL's password, see redact_known; kept across restarts as keyed digests, see
redact_learned). `cut` redacts before it cuts and `lines` withholds PEM body lines of a
window that shows neither BEGIN nor END.
What it returns is printable (fmt.printable): control and bidi characters read escaped
(`\\x1b`, `\\u202e`) in every dump, page, answer and log line, and a variable name is one line.
Everything fails closed: if a rule raises or the time budget runs out, the value is withheld.
Every regex is linear: starts are pinned by a lookbehind to the start of a run, and runs that
must be followed by something are bounded, so 1 MB of log costs ~1 MB.
"""

import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import BaseModel

from ctxd.fmt import printable
from ctxd.redact import known as redact_known
from ctxd.redact import learned as redact_learned
from ctxd.redact import shapes as redact_shapes
from ctxd.redact.names import is_secret_name
from ctxd.redact.rules import (
    _P_NOT_A_PASSWORD,
    _PASSWORD_PROGRAMS,
    _RULES,
    _TRIGGER,
    _USER_FLAGS,
    REDACTED,
    WITHHELD,
    _flag_value,
    learn,
)

MAX_CHARS = 2_000_000
# Rules are linear, so this is never reached by honest input; it bounds a regression.
TIME_BUDGET_S = 2.0

T = TypeVar("T")
log = logging.getLogger(__name__)


def text(value: str) -> str:
    """Redact secrets found by content or known value in free text (logs, paths, output);
    control and bidi characters come back escaped, newlines and tabs as they are."""
    try:
        if len(value) <= 512:
            return _text_short(value, redact_known.generation)
        return _text(value)
    except Exception:
        return WITHHELD


def _text(value: str, _generation: int = 0) -> str:
    if len(value) > MAX_CHARS:
        return WITHHELD
    deadline = time.monotonic() + TIME_BUDGET_S
    # Iterate to a fixpoint so text(text(x)) == text(x) holds by construction.
    for _ in range(4):
        for hit in redact_learned.found(value):  # learned before a restart: known again now
            redact_known.learn(hit)
        # Known values are matched as they were seen; the rules then see the text as it is
        # shown, so a control character cannot split a secret in two for them.
        out = printable(redact_known.replace(value, REDACTED))
        if _TRIGGER.search(out):
            for rule in _RULES:
                out = rule(out)
                if time.monotonic() > deadline:
                    return WITHHELD
        if out == value:
            return out
        value = out
    return WITHHELD


# Snapshots repeat the same argv and env strings every few seconds. The known-values
# generation is part of the key: a value learned later must not be served from the cache.
_text_short = lru_cache(maxsize=16384)(_text)


def load_learned(data_dir: Path) -> None:
    """Call at start-up: values learned before a restart are recognised again (by digest)."""
    try:
        count = redact_learned.load(data_dir)
        log.info("recognising %d digest(s) of secret values learned before", count)
    except OSError as exc:
        log.warning("learned secret values not loaded (%s); only what is seen now is known", exc)


def learn_env(variables: Mapping[str, str]) -> None:
    """Remember the values of every secret-named variable of a whole environment."""
    for name, value in variables.items():
        if value and is_secret_name(name):
            learn(value)


def learn_own_env() -> None:
    """ctxd's own environment often holds the same tokens as the processes it watches."""
    learn_env(os.environ)


def _by_name(name: str, value: str) -> str:
    try:
        if is_secret_name(name):
            learn(value)
            return REDACTED
        return text(value)
    except Exception:
        return WITHHELD


def env(variables: Mapping[str, str]) -> dict[str, str]:
    """Redact environment variables: by name, then by content. A name is one line: its
    newlines and tabs are escaped too, so it cannot show as lines of a shell block."""
    return {printable(text(k), lines=False): _by_name(k, v) for k, v in variables.items()}


_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}=")


def _arg(arg: str, flag: str | None, password_program: bool) -> str:
    """`flag`: the argument before, when it is a flag that takes this one as its value."""
    if flag is not None and not arg.startswith("-"):
        if is_secret_name(flag):
            learn(arg)
            return REDACTED
        by_flag = _flag_value(flag, arg, password_program)
        if by_flag is not None:
            return by_flag
    name, eq, value = arg.partition("=")
    if eq and (arg.startswith("-") or _ENV_ASSIGNMENT.match(arg)) and is_secret_name(name):
        learn(value)
        return name + "=" + REDACTED
    if eq and name in _USER_FLAGS:
        by_flag = _flag_value(name, value)
        if by_flag is not None:
            return name + "=" + by_flag
    if password_program and arg.startswith("-p") and len(arg) > 2 and "=" not in arg:
        learn(arg[2:])
        return "-p" + REDACTED
    return text(arg)


# A header that carries a credential, as `curl -H` or `--header` gives it: its value is one.
_CREDENTIAL_HEADER = re.compile(
    r"(?i)^\s*(?:(?:proxy-)?authorization\s*:\s*(?:bearer|basic|token|digest)?"
    r"|(?:x-api-key|api-key|x-auth-token|x-access-token|private-token|cookie)\s*:)"
    r"\s*(?P<value>\S.*?)\s*$"
)


def learn_command(line: str) -> None:
    """Learn the secrets a shell command the agent ran gives by flag or header (`--api-key K`,
    `--password=P`, `--hf-token K`, `-H 'Authorization: Bearer B'`), as values under secret
    variables are: each is then redacted wherever it shows up alone (a log, an output, a later
    prompt). Words as the shell splits them; a line it cannot split, by spaces."""
    import shlex  # commands only, not the hook path

    try:  # `;`, `&&`, `|` and redirections are words of their own, never part of a value
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        words = line.split()
    argv(words)  # a secret-named flag's value, in every form, is learned there
    for word in words:
        if found := _CREDENTIAL_HEADER.match(word):
            learn(found["value"])


def argv(args: Sequence[str]) -> list[str]:
    """Redact a command line: values of secret-named flags in every form, then by content."""
    out: list[str] = []
    flag: str | None = None
    program = os.path.basename(args[0]) if args else ""
    password_program = bool(_PASSWORD_PROGRAMS.fullmatch(program))
    p_not_a_password = program in _P_NOT_A_PASSWORD  # `claude -p PROMPT`, `ssh -p 2222`
    for arg in args:
        try:
            out.append(printable(_arg(arg, flag, password_program)))  # a flag's name too
        except Exception:
            out.append(WITHHELD)
        flag = arg if arg.startswith("-") and "=" not in arg else None
        if flag == "-p" and p_not_a_password:
            flag = None
    return out


# --- cuts and line windows -------------------------------------------------------------------

# The last word of a cut text that starts like a known token: a fragment the shapes no longer
# match (20 of 36 characters) but which is still most of a secret.
_SHAPE_FRAGMENT = re.compile(r"(?<![A-Za-z0-9])(?:" + redact_shapes.PREFIXES + r")[\w.+/=-]*\Z")
# A PEM body line: exactly 64 (PEM), 70 (OpenSSH) or 76 (MIME) base64 characters with upper,
# lower and digits, and not hex. A window that starts inside a key has no BEGIN to go by; a
# sha256 digest, a UUID, a log line or base64 of another width does not look like this.
_KEY_LINE = re.compile(
    r"(?=[^a-z]*[a-z])(?=[^A-Z]*[A-Z])(?=\D*\d)(?:[A-Za-z0-9+/]{64}|[A-Za-z0-9+/]{70}|[A-Za-z0-9+/]{76})"
)
_KEY_TAIL = re.compile(r"[A-Za-z0-9+/]{1,76}={0,2}")
_HEX = re.compile(r"[0-9a-fA-F]+")


def cut(value: str, limit: int, marker: str = " …") -> str:
    """`value` redacted, then cut to `limit` characters (plus `marker`): redaction sees every
    token whole, and a fragment of a known shape left at the edge is withheld."""
    out = text(value)
    if len(out) <= limit:
        return out
    head = out[:limit]
    fragment = _SHAPE_FRAGMENT.search(head)
    if fragment:
        head = head[: fragment.start()] + WITHHELD
    return head + marker


def _is_key_line(line: str) -> bool:
    return bool(_KEY_LINE.fullmatch(line)) and not _HEX.fullmatch(line)


def lines(rows: Sequence[str]) -> list[str]:
    """Redact a window of lines as one text (a PEM block spread over lines is seen whole), and
    withhold PEM body lines even when the window holds neither BEGIN nor END."""
    if not rows:
        return []
    out = text("\n".join(rows)).split("\n")
    previous_was_key = False
    for i, row in enumerate(out):
        line = row.strip()
        is_key = _is_key_line(line) or (previous_was_key and bool(_KEY_TAIL.fullmatch(line)))
        if is_key:
            out[i] = REDACTED
        previous_was_key = is_key and len(line) >= 64
    return out


# --- deep redaction ---------------------------------------------------------------------------

# A model holding a name and its value (Flag, a fact) is redacted by name like a dict entry.
_NAME_VALUE_FIELDS = (("name", "value"), ("key", "value"), ("key", "text"))


def _scrub_dict(d: Mapping[Any, Any]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for k, v in d.items():
        if isinstance(k, str) and isinstance(v, str):
            out[text(k)] = _by_name(k, v)
        else:
            out[_scrub(k)] = _scrub(v)
    # A dumped fact ({"key": "api_key", "text": V}) is a name and its value, like the model.
    for name_field, value_field in _NAME_VALUE_FIELDS:
        name, value = d.get(name_field), d.get(value_field)
        if isinstance(name, str) and isinstance(value, str) and is_secret_name(name):
            learn(value)
            out[value_field] = REDACTED
    return out


def _scrub_model(obj: BaseModel) -> BaseModel:
    """The model itself when redaction changes nothing in it (most rows), else a copy with
    what changed."""
    fields = obj.__dict__
    # what holds no text is not looked at: a process row is mostly numbers and Nones
    update = {}
    for field, v in fields.items():
        if type(v) not in _NO_TEXT_TYPES and (new := _scrub(v)) is not v and new != v:
            update[field] = new
    for name_field, value_field in _NAME_VALUE_FIELDS:
        name, value = fields.get(name_field), fields.get(value_field)
        if isinstance(name, str) and isinstance(value, str) and is_secret_name(name):
            learn(value)
            update[value_field] = REDACTED
    if obj.__pydantic_extra__:
        update.update(_scrub_dict(obj.__pydantic_extra__))
    return obj.model_copy(update=update) if update else obj


# Leaves that hold no text, answered before the (slow) abstract Mapping check: a snapshot
# walks thousands of numbers, times and Nones.
_NO_TEXT = (int, float, bool, type(None), datetime)
_NO_TEXT_TYPES = frozenset(_NO_TEXT)  # exact types: a str subclass is never among them


def _scrub(obj: Any) -> Any:
    kind = type(obj)  # the exact types a snapshot is made of first: one lookup each
    if kind is str:
        return text(obj)
    if kind in _NO_TEXT_TYPES:
        return obj
    if kind is list:  # the list itself when nothing in it changed (one C comparison)
        out = [_scrub(x) for x in obj]
        return obj if out == obj else out
    if kind is dict:
        scrubbed = _scrub_dict(obj)
        return obj if scrubbed == obj else scrubbed
    if isinstance(obj, str):
        return text(obj)
    if isinstance(obj, _NO_TEXT):
        return obj
    if isinstance(obj, BaseModel):
        return _scrub_model(obj)
    if isinstance(obj, Mapping):
        return _scrub_dict(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_scrub(x) for x in obj))
    if isinstance(obj, list | tuple | set | frozenset):
        return type(obj)(_scrub(x) for x in obj)
    return obj


def scrub(obj: T) -> T:
    """A model, dict, list or str with every string in it redacted: a copy where redaction
    changed something, the value itself (or its part) where it changed nothing."""
    return cast(T, _scrub(obj))
