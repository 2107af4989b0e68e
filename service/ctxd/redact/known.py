"""Known secret values: a value seen once under a secret name is redacted wherever it reappears.

A token read from a process's environment (HF_TOKEN=...) says nothing about its shape, so the
content rules cannot find it when the same value turns up in a log line, a command's output
or a file name. The redactor remembers such values and replaces them, and their common
encodings (URL-encoded, base64 at any alignment, JSON-escaped), in every string it sees.
"""

import base64
import json
import re
import threading
from collections import OrderedDict
from functools import lru_cache
from urllib.parse import quote, quote_plus

# Shorter values are too likely to be ordinary words or numbers ("postgres", "8000").
MIN_CHARS = 8
# Most recent values are kept; an environment has a handful, not thousands.
MAX_VALUES = 512
# A base64 fragment shorter than this could occur by chance in any base64 text.
_MIN_B64 = 12

_lock = threading.Lock()
_values: OrderedDict[str, None] = OrderedDict()
# Every form of every value, longest first, so a value is replaced whole before a shorter one.
_forms: tuple[str, ...] = ()
generation = 0


def _b64_fragments(raw: bytes) -> set[str]:
    """The characters of base64 that encode only `raw`, at each of the 3 byte alignments.

    A password inside `user:password` is base64-encoded at an offset; the characters fully
    determined by its bytes are the same whatever surrounds it.
    """
    whole = base64.b64encode(raw).decode()
    out = {whole, whole.rstrip("="), base64.urlsafe_b64encode(raw).decode().rstrip("=")}
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        first = -(-offset * 8 // 6)  # ceil: the first character with no prefix bits
        last = (offset + len(raw)) * 8 // 6  # exclusive: characters holding no tail bits
        fragment = encoded[first:last]
        if len(fragment) >= _MIN_B64:
            out.add(fragment)
            out.add(fragment.replace("+", "-").replace("/", "_"))
    return out


def variants(value: str) -> set[str]:
    """The value and the forms it takes when encoded for a URL, base64 or a JSON string."""
    forms = {value, quote(value, safe=""), quote_plus(value), json.dumps(value)[1:-1]}
    forms.add(json.dumps(value, ensure_ascii=False)[1:-1])
    forms |= _b64_fragments(value.encode("utf-8", "surrogatepass"))
    return {f for f in forms if len(f) >= MIN_CHARS}


def learn(value: str) -> bool:
    """Remember a secret value; True when it is new (cached redactions are then stale)."""
    global _forms, generation
    value = value.strip()
    if len(value) < MIN_CHARS or len(set(value)) < 3 or "[REDACTED]" in value:
        return False
    with _lock:
        if value in _values:
            _values.move_to_end(value)
            return False
        _values[value] = None
        while len(_values) > MAX_VALUES:
            _values.popitem(last=False)
        forms = set().union(*(variants(v) for v in _values))
        _forms = tuple(sorted(forms, key=len, reverse=True))
        generation += 1
        return True


def values() -> tuple[str, ...]:
    """The values known now, the least recently seen first."""
    with _lock:
        return tuple(_values)


def forget_all() -> None:
    """Drop every known value (tests, and a process that wants a clean slate)."""
    global _forms, generation
    with _lock:
        _values.clear()
        _forms = ()
        generation += 1


def count() -> int:
    return len(_values)


def replace(text: str, replacement: str) -> str:
    """`text` with every known value, in any of its encodings, replaced."""
    # A substring test per form is a fast C scan; a regex alternation of thousands of
    # literals is not. The regex is built only from the few forms actually present.
    present = tuple(form for form in _forms if form in text)
    if not present:
        return text
    return _alternation(present).sub(replacement, text)


@lru_cache(maxsize=256)
def _alternation(forms: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(f) for f in forms))
