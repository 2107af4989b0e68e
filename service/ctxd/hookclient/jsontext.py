"""JSON read and written through CPython's C accelerator (`_json`) alone: the `json` package
imports `re` (some 8 ms, most of what a hook costs beyond a bare interpreter), for numbers
and whitespace its C scanner never needs. The same values and the same errors: any text the
scanner refuses is read again by `json`, whose error then says why; an interpreter without
`_json` uses `json` throughout.
"""

try:
    import _json
except ImportError:  # another Python: the package, as it is
    _json = None  # type: ignore[assignment]

WHITESPACE = " \t\n\r"
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Reading:
    """What the C scanner reads of a decoder (`json.JSONDecoder`'s defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _unserializable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


if _json is not None:
    _scan = _json.make_scanner(_Reading())  # type: ignore[arg-type]  # it reads attributes
    _encode = _json.make_encoder(
        {}, _unserializable, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )


def loads(text: str) -> object:
    """The value of a JSON document (json.loads'), raising json.JSONDecodeError as it does."""
    if _json is not None:
        start = len(text) - len(text.lstrip(WHITESPACE))
        try:
            value, end = _scan(text, start)
        except (StopIteration, ValueError):
            pass  # read again below, for the package's own error
        else:
            if not text[end:].strip(WHITESPACE):
                return value
    import json

    return json.loads(text)


def dumps(value: object) -> str:
    """`json.dumps(value)`, as ASCII with its separators."""
    if _json is None:
        import json

        return json.dumps(value)
    return "".join(_encode(value, 0))
