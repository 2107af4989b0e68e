"""The one choke point every observed string passes before it is kept, served or logged.

Two kinds of rule: by name (an env var, flag or key that says it holds a secret has its value
replaced whatever the value is) and by content (token shapes, PEM blocks, URL passwords,
auth headers, `name=value` in free text). Everything fails closed: if a rule raises, the
value is withheld. Every regex is linear: starts are pinned by a lookbehind to the start of a
run, and runs that must be followed by something are bounded, so 1 MB of log costs ~1 MB.
"""

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from itertools import pairwise
from typing import Any, TypeVar, cast

from pydantic import BaseModel

REDACTED = "[REDACTED]"
WITHHELD = "[WITHHELD]"
MAX_CHARS = 2_000_000

T = TypeVar("T")

# --- by name ----------------------------------------------------------------------------------

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")
# Substrings that say secret even glued to other words: PGPASSWORD, OPENAI_APIKEY, clientsecret.
_GLUED = (
    "password", "passwd", "passphrase", "secret", "credential", "cookie",
    "apikey", "privatekey", "accesskey", "secretkey", "sessionkey", "signingkey",
)  # fmt: skip
_WORDS = frozenset({"pass", "pwd", "creds", "cred", "passcode"})
_KEY_QUALIFIERS = frozenset(
    {"api", "access", "private", "session", "secret", "signing", "encryption", "master"}
    | {"auth", "client", "license", "account", "shared", "storage"}
)
# "token" and "auth" also name counts and settings: --max-total-tokens, pad_token, --auth-mode.
_NOT_TOKEN = frozenset(
    {"max", "min", "num", "total", "count", "limit", "len", "length", "size", "budget", "per"}
    | {"pad", "eos", "bos", "unk", "sep", "cls", "mask", "special", "id", "ids", "type", "usage"}
)
_AUTH = frozenset({"auth", "authz", "authn", "authorization", "authentication", "oauth", "oauth2"})
_NOT_AUTH = frozenset(
    {"mode", "type", "method", "methods", "enabled", "enable", "disable", "disabled", "required"}
    | {"url", "uri", "host", "port", "endpoint", "provider", "scheme", "domain", "backend"}
    | {"plugin", "server", "sock", "socket", "level", "timeout"}
)
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})  # the shell's working directories


@lru_cache(maxsize=8192)
def is_secret_name(name: str) -> bool:
    if name.strip() in _NOT_SECRET_NAMES:
        return False
    words = [w for w in _NON_ALNUM.split(_CAMEL.sub("_", name).lower()) if w]
    if any(g in w for w in words for g in _GLUED) or _WORDS.intersection(words):
        return True
    if any(w == "key" and p in _KEY_QUALIFIERS for p, w in pairwise(words)):
        return True
    if any(w.endswith("token") for w in words) and not _NOT_TOKEN.intersection(words):
        return True
    authish = any(w in _AUTH or w.endswith("auth") for w in words)
    return authish and not _NOT_AUTH.intersection(words)


# --- by content -------------------------------------------------------------------------------

_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_BLOCK = re.compile(
    rf"(?P<begin>{_PEM_BEGIN.pattern})(?:.*?(?P<end>{_PEM_END.pattern})|.*)", re.DOTALL
)
_TOKENS = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"
    r"|gh[pousr]_[A-Za-z0-9]{30,}+|github_pat_[A-Za-z0-9_]{20,}+|glpat-[A-Za-z0-9_-]{20,}+"
    r"|sk-[A-Za-z0-9_-]{20,}+|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}+"
    r"|hf_[A-Za-z0-9]{30,}+|xox[abposr]-[A-Za-z0-9-]{10,}+|xapp-[A-Za-z0-9-]{10,}+"
    r"|AIza[A-Za-z0-9_-]{35}|npm_[A-Za-z0-9]{36}|pypi-[A-Za-z0-9_-]{50,}+"
    r"|eyJ[A-Za-z0-9_-]{5,}+\.eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]*+"
    r")"
)
_URL_PASSWORD = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<head>[A-Za-z][A-Za-z0-9+.-]{0,31}+://[^\s:/@?#]{0,256}+:)"
    r"[^\s/?#]{1,1024}@"  # greedy to the last '@', so a raw '@' in a password is covered
)
_STANDALONE_AUTH = re.compile(
    r"(?<![\w-])(?P<head>(?:bearer|basic)[ \t]{1,8})(?P<val>[A-Za-z0-9._~+/=-]{8,}+)",
    re.IGNORECASE,
)
_COOKIE = re.compile(
    r"(?<![\w-])(?P<head>(?:set-)?cookie[ \t]{0,4}:[ \t]{0,4})[^\r\n\"']+", re.IGNORECASE
)
_VALUE = (
    r"(?P<val>\[REDACTED\]|\"(?:[^\"\\\n]|\\.){0,4096}+\"?|'(?:[^'\\\n]|\\.){0,4096}+'?"
    r"|\\[\"'][^\\\n\"']{0,4096}+(?:\\[\"'])?|[^\s\"',;&)}\]]++)"  # \"json in json\"
)
_ASSIGNMENT = re.compile(
    r"(?<![\w.-])(?P<q>[\"']?)(?P<name>-{0,2}[A-Za-z_][\w.-]{0,63}+)\\?(?P=q)"
    r"(?P<sep>[ \t]{0,4}[:=][ \t]{0,4})(?P<scheme>(?:bearer|basic|token|digest)[ \t]{1,8})?"
    + _VALUE,
    re.IGNORECASE,
)
_FLAG_SPACE = re.compile(
    r"(?<![\w.-])(?P<name>--?[A-Za-z][\w.-]{0,63}+)(?P<sep>[ \t]{1,8})"
    r"(?=[^\s-])" + _VALUE
)
# Cheap gate: a string none of the rules could touch is returned as is, which is most of them.
_TRIGGER = re.compile(
    r"[=:]|PRIVATE KEY|(?i:bearer|basic)|(?<!\S)--?[A-Za-z][\w.-]{0,63}+[ \t]"
    r"|AKIA|ASIA|A[GIRNB][A-Z]A|ACCA|gh[pousr]_|github_pat_|glpat-|sk-|[sr]k_|hf_|xox|xapp-"
    r"|AIza|npm_|pypi-|eyJ"
)


def _pem(value: str) -> str:
    end = _PEM_END.search(value)
    begin = _PEM_BEGIN.search(value)
    if end and (begin is None or begin.start() > end.start()):
        # A tail window that starts inside a key: everything before END is key material.
        value = REDACTED + value[end.start() :]
    return _PEM_BLOCK.sub(lambda m: m["begin"] + REDACTED + (m["end"] or ""), value)


def _named_value(m: re.Match[str]) -> str:
    if not is_secret_name(m["name"]):
        return m[0]
    val = m["val"]
    quote = next((q for q in ('\\"', "\\'", '"', "'") if val.startswith(q)), "")
    close = quote if quote and len(val) >= 2 * len(quote) and val.endswith(quote) else ""
    return m[0][: m.start("val") - m.start()] + quote + REDACTED + close


def _standalone_auth(m: re.Match[str]) -> str:
    val = m["val"]
    # "Bearer authentication" in prose is not a credential; real ones have digits or length.
    looks_real = len(val) >= 20 or any(not c.isalpha() for c in val)
    return m["head"] + REDACTED if looks_real else m[0]


_RULES: list[Callable[[str], str]] = [
    lambda v: _pem(v) if "PRIVATE KEY" in v else v,
    lambda v: _TOKENS.sub(REDACTED, v),
    lambda v: _URL_PASSWORD.sub(lambda m: m["head"] + REDACTED + "@", v),
    lambda v: _COOKIE.sub(lambda m: m["head"] + REDACTED, v),
    lambda v: _STANDALONE_AUTH.sub(_standalone_auth, v),
    lambda v: _ASSIGNMENT.sub(_named_value, v),
    lambda v: _FLAG_SPACE.sub(_named_value, v),
]


def _apply_rules(value: str) -> str:
    for rule in _RULES:
        value = rule(value)
    return value


def text(value: str) -> str:
    """Redact secrets found by content in free text (log lines, paths, command output)."""
    try:
        return _text_short(value) if len(value) <= 512 else _text(value)
    except Exception:
        return WITHHELD


def _text(value: str) -> str:
    if len(value) > MAX_CHARS:
        return WITHHELD
    if not _TRIGGER.search(value):
        return value
    # Iterate to a fixpoint so text(text(x)) == text(x) holds by construction.
    for _ in range(4):
        out = _apply_rules(value)
        if out == value:
            return out
        value = out
    return WITHHELD


# Snapshots repeat the same argv and env strings every few seconds.
_text_short = lru_cache(maxsize=16384)(_text)


def _by_name(name: str, value: str) -> str:
    try:
        return REDACTED if is_secret_name(name) else text(value)
    except Exception:
        return WITHHELD


def env(variables: Mapping[str, str]) -> dict[str, str]:
    """Redact environment variables: by name, then by content."""
    return {text(k): _by_name(k, v) for k, v in variables.items()}


_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}=")


def _arg(arg: str, previous_was_secret_flag: bool) -> str:
    if previous_was_secret_flag and not arg.startswith("-"):
        return REDACTED
    name, eq, _ = arg.partition("=")
    if eq and (arg.startswith("-") or _ENV_ASSIGNMENT.match(arg)) and is_secret_name(name):
        return name + "=" + REDACTED
    return text(arg)


def argv(args: Sequence[str]) -> list[str]:
    """Redact a command line: values of secret-named flags in every form, then by content."""
    out: list[str] = []
    secret_flag = False
    for arg in args:
        try:
            out.append(_arg(arg, secret_flag))
        except Exception:
            out.append(WITHHELD)
        try:
            secret_flag = arg.startswith("-") and "=" not in arg and is_secret_name(arg)
        except Exception:
            secret_flag = True
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
    return out


def _scrub_model(obj: BaseModel) -> BaseModel:
    fields = obj.__dict__
    update = {name: _scrub(value) for name, value in fields.items()}
    for name_field, value_field in _NAME_VALUE_FIELDS:
        name, value = fields.get(name_field), fields.get(value_field)
        if isinstance(name, str) and isinstance(value, str) and is_secret_name(name):
            update[value_field] = REDACTED
    if obj.__pydantic_extra__:
        update.update(_scrub_dict(obj.__pydantic_extra__))
    return obj.model_copy(update=update)


def _scrub(obj: Any) -> Any:
    if isinstance(obj, str):
        return text(obj)
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
    """A copy of a model, dict, list or str with every string in it redacted."""
    return cast(T, _scrub(obj))


# --- ctxd's own log ---------------------------------------------------------------------------


class RedactingFilter(logging.Filter):
    """Redacts each record's message, traceback and stack before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            message = f"{record.msg!s} {record.args!r}"
        record.msg, record.args = text(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = text(record.exc_text)
        if record.stack_info:
            record.stack_info = text(record.stack_info)
        return True


def install_log_filter(logger: logging.Logger | None = None) -> None:
    """Add a RedactingFilter to the root logger's handlers, and to `logger` and its handlers.

    Call it after logging is configured: handlers added later do not get the filter.
    """
    root = logging.getLogger()
    targets: list[logging.Filterer] = [*root.handlers]
    if logger is not None:
        targets += [logger, *logger.handlers]
    for target in targets:
        if not any(isinstance(f, RedactingFilter) for f in target.filters):
            target.addFilter(RedactingFilter())
