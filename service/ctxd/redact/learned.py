"""Learned secret values kept across restarts as keyed hashes, never in clear.

A value learned once (an env var under a secret name, a URL password) is redacted in memory by
redact_known; a restarted ctxd has forgotten it and would store it raw where it reappears
without its name. So each learned value's forms (itself, URL-encoded, base64) are kept as
keyed BLAKE2b digests (a MAC in one C call, cheaper than HMAC) under a random key; both files
live in the data directory, mode 0600. At redaction time, only while some stored digest has not
been seen again since the start, the words of a text whose length matches a stored form are
hashed and compared; a hit is learned again in clear, in memory, and redacted with all its
encodings by redact_known.
"""

import base64
import hashlib
import os
import re
import secrets
import threading
from pathlib import Path
from urllib.parse import quote, quote_plus

KEY_FILE = "learned.key"
DIGESTS_FILE = "learned.digests"
MAX_DIGESTS = 8192
# Word boundaries a value can sit between; every substring between two of them (or a run's
# ends) whose length is that of a stored form is a candidate. Capped per run.
_RUN = re.compile(r"\S{8,}")
_BOUNDARY = re.compile(r"[=:;,&?@/\"'()<>\[\]{}|.!_-]")
_MAX_CUTS = 16

_lock = threading.Lock()
_key: bytes | None = None
_path: Path | None = None
_digests: set[bytes] = set()
# Digests stored but not re-learned since the start: only these need the scan.
_pending: set[bytes] = set()
_lengths: frozenset[int] = frozenset()


def forms(value: str) -> set[str]:
    """The forms a value is recognised in after a restart."""
    raw = value.encode("utf-8", "surrogatepass")
    b64 = base64.b64encode(raw).decode()
    return {value, quote(value, safe=""), quote_plus(value), b64, b64.rstrip("=")} | {
        base64.urlsafe_b64encode(raw).decode().rstrip("=")
    }


def _digest(form: str) -> bytes:
    assert _key is not None
    return hashlib.blake2b(form.encode("utf-8", "surrogatepass"), key=_key, digest_size=16).digest()


def _private_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def load(data_dir: Path) -> int:
    """Read (or create) the key and the digests of `data_dir`; the number of digests loaded."""
    global _key, _path, _lengths
    data_dir.mkdir(parents=True, exist_ok=True)
    key_path, digests_path = data_dir / KEY_FILE, data_dir / DIGESTS_FILE
    if not key_path.exists():
        _private_file(key_path, secrets.token_bytes(32))
    os.chmod(key_path, 0o600)
    with _lock:
        _key = key_path.read_bytes()
        _path = digests_path
        _digests.clear()
        _pending.clear()
        lengths: set[int] = set()
        if digests_path.exists():
            os.chmod(digests_path, 0o600)
            for line in digests_path.read_text().split():
                length, _, digest = line.partition(":")
                if length.isdigit() and len(digest) == 32:
                    _digests.add(bytes.fromhex(digest))
                    lengths.add(int(length))
        _pending.update(_digests)
        _lengths = frozenset(lengths)
        return len(_digests)


def remember(value: str) -> None:
    """Store the digests of a learned value's forms (no-op before `load`)."""
    global _lengths
    if _key is None or _path is None:
        return
    with _lock:
        new = []
        for form in forms(value):
            digest = _digest(form)
            _pending.discard(digest)  # known in clear again: redact_known covers it
            if digest not in _digests and len(_digests) < MAX_DIGESTS:
                _digests.add(digest)
                new.append(f"{len(form)}:{digest.hex()}\n")
        if new:
            if not _path.exists():
                _private_file(_path, b"")
            with open(_path, "a", encoding="ascii") as handle:
                handle.write("".join(new))
            _lengths = _lengths | {int(line.partition(":")[0]) for line in new}


def found(text: str) -> list[str]:
    """Substrings of `text` whose digest is stored and not yet known again in clear."""
    if not _pending or _key is None:
        return []
    lengths, hits = _lengths, []
    shortest = min(lengths, default=0)
    for run in _RUN.finditer(text):
        word = run[0]
        if len(word) < shortest:
            continue  # most words of a log: no stored form is this short
        cuts = [m.start() for m in _BOUNDARY.finditer(word)][:_MAX_CUTS]
        starts = [0, *(c + 1 for c in cuts)]
        ends = [*cuts, len(word)]
        for s in starts:
            for e in ends:
                if e - s in lengths and _digest(word[s:e]) in _pending:
                    hits.append(word[s:e])
    return hits


def forget_all() -> None:
    """Drop the loaded state (tests); the files stay."""
    global _key, _path, _lengths
    with _lock:
        _key, _path, _lengths = None, None, frozenset()
        _digests.clear()
        _pending.clear()
