"""By-content rules: the regexes that find secrets in free text, and what replaces them.

Kept apart from redact.py (the choke point: text, argv, env, scrub, cut, lines, the log
filter) so each stays readable. A rule that redacts a value also learns it (see `learn`), so
the same value is redacted wherever it reappears without its context.
"""

import logging
import re
from collections.abc import Callable
from urllib.parse import unquote

from ctxd.redact import known as redact_known
from ctxd.redact import learned as redact_learned
from ctxd.redact import shapes as redact_shapes
from ctxd.redact.names import is_secret_name

REDACTED = "[REDACTED]"
WITHHELD = "[WITHHELD]"

log = logging.getLogger("ctxd.redact")


def learn(value: str) -> None:
    """Remember a secret value so it is redacted wherever it reappears, in any encoding."""
    try:
        if redact_known.learn(value):
            redact_learned.remember(value.strip())
    except Exception:
        log.warning("could not remember a secret value; it is still redacted where seen")


# --- by content -------------------------------------------------------------------------------

_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_BLOCK = re.compile(
    rf"(?P<begin>{_PEM_BEGIN.pattern})(?:.*?(?P<end>{_PEM_END.pattern})|.*)", re.DOTALL
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
# A value the shell expands: `$(cmd …)` (quoted or not), `` `cmd` `` or `${NAME}`, read whole:
# it holds spaces, quotes or braces.
_EXPANSION = r"\"?\$\([^()\n]{0,512}+\)\"?|`[^`\n]{0,512}+`|\$\{[^{}\n]{0,128}+\}|"
_VALUE = (
    r"(?P<val>\[REDACTED\]|"
    + _EXPANSION
    + r"\"(?:[^\"\\\n]|\\.){0,4096}+\"?|'(?:[^'\\\n]|\\.){0,4096}+'?"
    r"|\\[\"'][^\\\n\"']{0,4096}+(?:\\[\"'])?|[^\s\"',;&)}\]]++)"  # \"json in json\"
)
_ASSIGNMENT = re.compile(
    r"(?<![\w.-])(?P<q>[\"']?)(?P<name>-{0,2}[A-Za-z_][\w.-]{0,63}+)\\?(?P=q)"
    r"(?P<sep>[ \t]{0,4}[:=][ \t]{0,4})(?P<scheme>(?:bearer|basic|token|digest)[ \t]{1,8})?"
    + _VALUE,
    re.IGNORECASE,
)
# A query parameter after a scheme and host: `_ASSIGNMENT` reads `https:` as the name and the
# whole URL as its value, so the parameters are matched on their own.
_QUERY = re.compile(r"(?<=[?&;])(?P<name>[A-Za-z_][\w.-]{0,63}+)=(?P<val>[^\s&#?\"'<>]{1,4096}+)")
# Signatures that make a URL a credential (Azure SAS, S3 and GCS signed URLs): secret as query
# parameters only, since `sig=9` elsewhere is a signal number.
_SIGNATURE_PARAMS = frozenset({"sig", "signature", "x-amz-signature", "x-goog-signature"})
_FLAG_SPACE = re.compile(
    r"(?<![\w.-])(?P<name>--?[A-Za-z][\w.-]{0,63}+)(?P<sep>[ \t]{1,8})"
    r"(?=[^\s-])" + _VALUE
)
# `-p VALUE` is a password for the MySQL and MariaDB clients and tools (mysql, mysqldump,
# mysqladmin, mariadb-dump...), mydumper, the MongoDB shells and tools, and sshpass; a port,
# pid or directory switch elsewhere: redacted unless the value reads as a port mapping, a
# number or a path. Glued (`-pVALUE`, also quoted) only where one of these programs is named.
_PASSWORD_PROGRAMS = re.compile(
    r"(?<![\w-])(?:mysql\w*|mariadb[\w-]*|mydumper|myloader|sshpass"
    r"|mongo(?:sh|dump|restore|export|import|stat|top|files)?)(?![\w-])"
)
_NOT_A_PASSWORD = re.compile(r"[\d.:\[\]-]+(?:/(?:tcp|udp|sctp))?|\S*/\S*|~\S*|no:[\w.-]+")
_GLUED_P = re.compile(
    r"(?<!\S)-p(?P<val>\"(?:[^\"\\\n]|\\.){1,4096}+\"|'[^'\n]{1,4096}+'|[^\s'\"-][^\s'\"]{0,4096}+)"
)
_USER_FLAGS = frozenset({"-u", "--user", "--proxy-user", "-U"})
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
# Cheap gate: a string none of the rules could touch is returned as is, which is most of them.
_TRIGGER = re.compile(
    r"[=:]|PRIVATE KEY|(?i:bearer|basic)|(?<!\S)--?[A-Za-z][\w.-]{0,63}+[ \t]|(?<!\S)-p[^\s-]"
    r"|" + redact_shapes.PREFIXES
)


def _pem(value: str) -> str:
    end = _PEM_END.search(value)
    begin = _PEM_BEGIN.search(value)
    if end and (begin is None or begin.start() > end.start()):
        # A tail window that starts inside a key: everything before END is key material.
        value = REDACTED + value[end.start() :]
    return _PEM_BLOCK.sub(lambda m: m["begin"] + REDACTED + (m["end"] or ""), value)


def _learn_quoted(value: str) -> None:
    learn(value)
    if "%" in value or "+" in value:
        learn(unquote(value))


def _url_password(m: re.Match[str]) -> str:
    _learn_quoted(m[0][len(m["head"]) : -1])
    return m["head"] + REDACTED + "@"


def _flag_value(name: str, val: str, program_sets_p: bool = False) -> str | None:
    """The redacted value of a flag whose name alone does not say secret, else None."""
    if val == REDACTED:  # `[REDACTED]2` (a known value inside a longer one) is redacted whole
        return None
    if name == "-p" and (program_sets_p or not _NOT_A_PASSWORD.fullmatch(val)):
        learn(val)
        return REDACTED
    user, colon, password = val.partition(":")
    if name in _USER_FLAGS and colon and password and not password.startswith(REDACTED[:-1]):
        learn(password)
        return user + ":" + REDACTED
    return None


# Programs whose `-p VALUE` is a port, pid, parent switch, plugin, package or an agent
# harness's prompt, never a password: in free text, `mkdir -p logs` keeps its folder, and on a
# command line `claude -p "why does it hang?"` keeps the user's words.
_P_NOT_A_PASSWORD = frozenset({
    "mkdir", "cp", "mv", "ln", "install", "rsync", "scp", "sftp", "ssh", "docker", "podman",
    "kubectl", "ps", "pgrep", "pkill", "kill", "pidstat", "top", "htop", "strace", "gdb",
    "perf", "py-spy", "lsof", "taskset", "nc", "ncat", "ping", "iperf3", "pytest", "patch",
    "git", "tar", "xargs", "read", "uvicorn", "gunicorn", "ip", "ss", "netstat", "nvidia-smi",
    "claude", "codex", "gemini", "opencode", "npm", "npx", "pnpm", "yarn", "bunx",
})  # fmt: skip
_COMMAND_START = re.compile(r"(?:^|[;&|\n(`]|\$\()\s*(?:sudo\s+)?([^\s;&|()]+)[^;&|\n(`]*$")


def _program_before(text: str) -> str:
    """The program of the simple command that ends `text` (the words before a flag)."""
    found = _COMMAND_START.search(text[-512:])
    return found[1].rsplit("/", 1)[-1] if found else ""


# A secret-named value that only says where the secret comes from: a variable (`$HF_TOKEN`,
# `${HF_TOKEN}`) or a command that reads or fetches it (`$(cat ~/.hf-token)`, `$(< f)`,
# `$(pass show hf)`, `$(gcloud auth print-access-token)`): kept, so the line stays one the
# agent can run again. Fail closed: quotes, `=`, a nested expansion, a here-string or a
# program that prints its own arguments make the value redacted whole.
_REFERENCE = re.compile(
    r"\$(?:[A-Za-z_]\w{0,127}|\{[A-Za-z_]\w{0,127}\})"
    r"|(?:\$\(|`)[ \t]*(?:<[ \t]*[\w./~@%+,:-]{1,256}"
    r"|(?!(?:\S*/)?(?:echo|printf|base64|xxd|openssl|python\d?[\d.]*|perl|ruby|node|sh|bash|zsh)\b)"
    r"[\w./~-]{1,64}(?:[ \t]+[\w./~@%+,:-]{1,256}){0,16})[ \t]*(?:\)|`)"
)


def _named_value(m: re.Match[str]) -> str:
    head = m[0][: m.start("val") - m.start()]
    if not is_secret_name(m["name"]):
        if m["name"] == "-p" and _program_before(m.string[: m.start()]) in _P_NOT_A_PASSWORD:
            return m[0]
        by_flag = _flag_value(m["name"], m["val"]) if m["name"].startswith("-") else None
        return m[0] if by_flag is None else head + by_flag
    val = m["val"]
    quote = next((q for q in ('\\"', "\\'", '"', "'") if val.startswith(q)), "")
    close = quote if quote and len(val) >= 2 * len(quote) and val.endswith(quote) else ""
    if quote in ("", '"') and _REFERENCE.fullmatch(val[len(quote) : len(val) - len(close)]):
        return m[0]
    if m["sep"] == "=" and _ENV_NAME.fullmatch(m["name"]):
        # `PGPASSWORD=v psql` in a command: v is redacted in its output and later lines too.
        # Only for environment names: learning is costly, and `token=` in every line of a
        # request log would learn a value per line.
        learn(val[len(quote) : len(val) - len(close)])
    return head + quote + REDACTED + close


def _query_value(m: re.Match[str]) -> str:
    secret = is_secret_name(m["name"]) or m["name"].lower() in _SIGNATURE_PARAMS
    if not secret or m["val"] == REDACTED:
        return m[0]
    _learn_quoted(m["val"])
    return m[0][: m.start("val") - m.start()] + REDACTED


def _glued_p_value(val: str) -> str:
    quote = val[0] if val[0] in "'\"" else ""
    inner = val[1:-1] if quote else val
    redacted = _flag_value("-p", inner, True)
    return val if redacted is None else quote + redacted + quote


def _glued_p(value: str) -> str:
    if not _PASSWORD_PROGRAMS.search(value):
        return value
    return _GLUED_P.sub(lambda m: "-p" + _glued_p_value(m["val"]), value)


def _standalone_auth(m: re.Match[str]) -> str:
    val = m["val"]
    # "Bearer authentication" in prose is not a credential; real ones have digits or length.
    looks_real = len(val) >= 20 or any(not c.isalpha() for c in val)
    return m["head"] + REDACTED if looks_real else m[0]


_RULES: list[Callable[[str], str]] = [
    lambda v: _pem(v) if "PRIVATE KEY" in v else v,
    lambda v: redact_shapes.TOKENS.sub(REDACTED, v),
    lambda v: _URL_PASSWORD.sub(_url_password, v),
    lambda v: _QUERY.sub(_query_value, v) if "=" in v else v,
    lambda v: _glued_p(v) if "-p" in v else v,
    lambda v: _COOKIE.sub(lambda m: m["head"] + REDACTED, v),
    lambda v: _STANDALONE_AUTH.sub(_standalone_auth, v),
    lambda v: _ASSIGNMENT.sub(_named_value, v),
    lambda v: _FLAG_SPACE.sub(_named_value, v),
]
