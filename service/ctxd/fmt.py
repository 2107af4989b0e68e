"""How numbers and text read in a dump: sizes (1024-based, KB/MB/GB), durations, UTC times,
and the characters a terminal or a bidi-aware viewer would act on, shown escaped."""

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any


def human_bytes(size: int | float | None) -> str:
    """Binary units under their own names (1 MiB = 1024 KiB), as torch, nvidia-smi and `free -h`
    write them: a dump that said GB for GiB read as two sizes beside a CUDA error's GiB."""
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def human_duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def between(earlier: datetime, later: datetime) -> str:
    """The time from one clock reading to another as the two read to the second, so that a
    dump's "launched 07:06:28, 6 s before" agrees with its "taken 07:06:34"."""
    return human_duration(int(later.timestamp()) - int(earlier.timestamp()))


def utc(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "?"


# What a terminal or a viewer acts on instead of showing: C0 controls (tab and newline are
# text), DEL, C1 (0x9b is a CSI), the bidi marks, embeddings, overrides and isolates (they
# reorder what a line reads), the line and paragraph separators, the tag characters
# (invisible text that a model still reads) and the zero-width and invisible ones (`s\u200bleep`
# reads as `sleep` and is not: the soft hyphen, the Mongolian vowel separator, zero-width
# space, joiners, word joiner and invisible operators, the byte order mark).
_UNSEEN = (
    r"\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064"
    r"\u2066-\u2069\ufeff\U000e0000-\U000e007f"
)
_UNSEEN_IN_TEXT = re.compile(rf"\r\n|[{_UNSEEN}]")  # a CRLF line end reads as a newline
_UNSEEN_IN_LINE = re.compile(rf"[\t\n{_UNSEEN}]")
_SHORT = {"\t": r"\t", "\n": r"\n", "\r": r"\r", "\r\n": "\n"}


def _escape(match: re.Match[str]) -> str:
    found = match.group()
    if found in _SHORT:
        return _SHORT[found]
    point = ord(found)
    if point < 0x100:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


def printable(text: str, lines: bool = True) -> str:
    """`text` with what a terminal would act on shown escaped (`\\x1b`, `\\u202e`) and a CRLF
    line end as a newline; `lines=False`: one line, so newline and tab are escaped too.
    Idempotent: what it writes holds none of what it escapes. A backslash stays as it is."""
    if text.isprintable():  # all it escapes is unprintable to Python too (a test holds it)
        return text
    pattern = _UNSEEN_IN_TEXT if lines else _UNSEEN_IN_LINE
    return pattern.sub(_escape, text) if pattern.search(text) else text


def has_unseen(text: str) -> bool:
    """Whether `printable(text)` differs from `text`."""
    return _UNSEEN_IN_TEXT.search(text) is not None


def watch_target(spec: Mapping[str, Any]) -> str:
    """ "log /tmp/x.log": what a watch looks at, from its spec as a dict (or as JSON read)."""
    keys = ("path", "match", "name", "pid", "port", "job", "argv")
    what = next((str(spec[k]) for k in keys if spec.get(k) is not None), "")
    if spec.get("mine"):
        what = f"my jobs under {spec['workdir']}" if spec.get("workdir") else "my jobs"
    return f"{spec.get('kind', '?')} {what}".strip()


def attempts(first: int, last: int) -> str:
    """Which attempts a line is about: "attempt 3", "attempts 1-18" (an en dash)."""
    return f"attempt {first}" if first == last else f"attempts {first}\N{EN DASH}{last}"


VALUES_SHOWN = 6  # of the values a flag took, those named


def flags_said(pairs: Iterable[tuple[str, str]], limit: int) -> tuple[str, int]:
    """(the first `limit` flags by name, each with the values it took in the order tried:
    "--port 50002…50194 (193 values); --run 2, 3", how many flags there were in all)."""
    values: dict[str, dict[str, None]] = {}  # a dict per flag: its values in order, each once
    for name, value in pairs:
        values.setdefault(name, {})[value] = None
    said = "; ".join(f"{name} {values_said(list(values[name]))}" for name in sorted(values)[:limit])
    return said, len(values)


def values_said(seen: list[str]) -> str:
    """The values a flag took, in the order tried: all of a few, the range of many numbers
    ("50002…50194 (193 values)"), else the first ones and how many more."""
    if len(seen) <= VALUES_SHOWN + 1:  # "and 1 more" would take the room the one takes
        return ", ".join(seen)
    if all(v.lstrip("-").isdigit() for v in seen):
        numbers = sorted(int(v) for v in seen)
        return f"{numbers[0]}\N{HORIZONTAL ELLIPSIS}{numbers[-1]} ({len(seen)} values)"
    return f"{', '.join(seen[:VALUES_SHOWN])} and {len(seen) - VALUES_SHOWN} more"


def ranges(numbers: list[int]) -> str:
    """1, 2, 3, 5 -> "1-3, 5" (with an en dash): ranks or GPUs by their runs."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}\N{EN DASH}{b}" for a, b in spans)


def log_name(path: str, cwd: str | None) -> str:
    """A log as the agent's own line names it: relative to the folder it ran in
    (`logs/attempt1.log`), else its file name."""
    if cwd and path.startswith(cwd.rstrip("/") + "/"):
        return path[len(cwd.rstrip("/")) + 1 :]
    return path.rsplit("/", 1)[-1]
