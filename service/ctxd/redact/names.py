"""Names that say a secret follows: env vars, flags and keys such as PGPASSWORD or --api-key."""

import re
from functools import lru_cache
from itertools import pairwise

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
# A name ending in KEY (MY_SERVICE_KEY) holds a key unless the word before says it is an index.
_NOT_KEY_QUALIFIERS = frozenset(
    {"primary", "foreign", "sort", "partition", "cache", "hash", "dict", "map", "group", "public"}
    | {"routing", "shard", "lookup", "index", "unique", "composite", "natural", "surrogate", "pub"}
    | {"idempotency", "dedup", "row", "column", "field", "s3", "object", "bucket", "hot"}
)


@lru_cache(maxsize=8192)
def is_secret_name(name: str) -> bool:
    if name.strip() in _NOT_SECRET_NAMES:
        return False
    words = [w for w in _NON_ALNUM.split(_CAMEL.sub("_", name).lower()) if w]
    if any(g in w for w in words for g in _GLUED) or _WORDS.intersection(words):
        return True
    if any(w == "key" and p in _KEY_QUALIFIERS for p, w in pairwise(words)):
        return True
    if len(words) >= 2 and words[-1] in ("key", "keys") and words[-2] not in _NOT_KEY_QUALIFIERS:
        return True
    if any(w.endswith("token") for w in words) and not _NOT_TOKEN.intersection(words):
        return True
    authish = any(w in _AUTH or w.endswith("auth") for w in words)
    return authish and not _NOT_AUTH.intersection(words)
