"""Regular expressions given by users, run with a time bound so one cannot freeze ctxd."""

import re
import time
from functools import lru_cache

import regex

# `regex` unrolls counted repeats when it compiles: `(?:a{1000}){1000}` is a million nodes,
# ~260 MB. A pattern's size is estimated from its parse tree, which costs nothing to build,
# and one over this bound is refused before it is compiled (~2.6 MB at most each).
MAX_PATTERN_SIZE = 10_000
# Few patterns live at once (one per watch); a bounded cache of bounded patterns is bounded.
CACHE_PATTERNS = 32
# Verdicts are small (a pattern's text and None or a sentence): more are kept than patterns.
CHECKED_PATTERNS = 1024

# Python's own `re` holds the GIL while it backtracks: a pattern like `(.+)+X` would stop
# every thread of the service. The `regex` engine takes a timeout and releases the GIL.
SEARCH_TIMEOUT_S = 0.05
WATCH_BUDGET_S = 0.5
# A pattern that ran out of time is not run again for this long: it is reported slow at
# once, so a bad pattern costs one budget per quarter hour, not one per probe (issue 39: a
# backtracking watch kept the server at 70 % CPU).
QUARANTINE_S = 900.0
_slow: dict[str, float] = {}  # pattern -> until when it is not run (time.monotonic())


class SlowPattern(Exception):
    """A pattern that took too long: reported as unavailable instead of waited for."""

    def __init__(self, pattern: str) -> None:
        super().__init__(
            f"pattern /{pattern}/ is too slow (backtracking?); simplify it (not run again for"
            f" {QUARANTINE_S / 60:.0f} min)"
        )


class PatternTooLarge(ValueError):
    """A pattern whose compiled form would be too large: refused, never compiled."""


def _size(tree: object, depth: int = 0) -> int:
    """Nodes the pattern unrolls to: counted repeats multiply their body (sre parse tree)."""
    if depth > 100:
        raise PatternTooLarge("pattern is nested more than 100 levels deep")
    total = 0
    for op, arg in tree:  # type: ignore[attr-defined]
        name = str(op)
        if name.endswith("REPEAT"):
            low, high, body = arg
            count = low if high == re._constants.MAXREPEAT else high  # type: ignore[attr-defined]
            total += max(1, count) * _size(body, depth + 1)
        elif name in ("SUBPATTERN", "ATOMIC_GROUP") or name.startswith("ASSERT"):
            total += 1 + _size(arg[-1], depth + 1)
        elif name == "BRANCH":
            total += 1 + sum(_size(branch, depth + 1) for branch in arg[1])
        elif name == "GROUPREF_EXISTS":
            total += 1 + sum(_size(b, depth + 1) for b in arg[1:] if b is not None)
        else:
            total += 1
        if total > MAX_PATTERN_SIZE:
            break
    return total


def check(pattern: str) -> None:
    """Raise PatternTooLarge (a ValueError that says why) for a pattern too large to compile."""
    refusal = _refusal(pattern)
    if refusal is not None:
        raise PatternTooLarge(refusal)


# Every snapshot validates its watches again as they are read back, and every collector asks
# for its compiled patterns: the verdict on a pattern is kept, not parsed again each time.
@lru_cache(maxsize=CHECKED_PATTERNS)
def _refusal(pattern: str) -> str | None:
    try:
        tree = re._parser.parse(pattern)  # type: ignore[attr-defined]
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    except RecursionError:
        return "pattern is nested too deeply"
    if _size(tree) > MAX_PATTERN_SIZE:
        return (
            f"pattern would compile to more than {MAX_PATTERN_SIZE} nodes (counted repeats "
            "multiply: (?:a{100}){100} is 10,000); use smaller counts or + and *"
        )
    return None


def check_all(patterns: list[str]) -> None:
    """check() each pattern, and their union: a log watch's `errors` are compiled as one."""
    for pattern in patterns:
        check(pattern)
    if len(patterns) > 1:
        check("|".join(f"(?:{p})" for p in patterns))


def compiled(pattern: str, multiline: bool = False) -> regex.Pattern:
    """The compiled pattern; PatternTooLarge before compiling one that would not fit."""
    check(pattern)
    return _compiled(pattern, multiline)


@lru_cache(maxsize=CACHE_PATTERNS)
def _compiled(pattern: str, multiline: bool) -> regex.Pattern:
    return regex.compile(pattern, regex.M if multiline else 0)


class Budget:
    """All searches of one watch share `WATCH_BUDGET_S`; each is cut at `SEARCH_TIMEOUT_S`."""

    def __init__(self, total_s: float = WATCH_BUDGET_S) -> None:
        self.deadline = time.monotonic() + total_s

    def search(self, pattern: regex.Pattern, text: str) -> regex.Match | None:
        left = min(SEARCH_TIMEOUT_S, self.deadline - time.monotonic())
        try:
            if left <= 0 or _quarantined(pattern.pattern):
                raise TimeoutError
            return pattern.search(text, timeout=left, concurrent=True)
        except TimeoutError:
            raise _slow_now(pattern.pattern) from None

    def finditer(self, pattern: regex.Pattern, text: str) -> list[regex.Match]:
        left = max(0.0, self.deadline - time.monotonic())
        try:
            if _quarantined(pattern.pattern):
                raise TimeoutError
            return list(pattern.finditer(text, timeout=left, concurrent=True))
        except TimeoutError:
            raise _slow_now(pattern.pattern) from None


def _quarantined(pattern: str) -> bool:
    until = _slow.get(pattern)
    return until is not None and time.monotonic() < until


def _slow_now(pattern: str) -> SlowPattern:
    """The pattern ran out of time: not run again for QUARANTINE_S (the table stays bounded)."""
    if len(_slow) >= CHECKED_PATTERNS:
        _slow.clear()
    _slow[pattern] = time.monotonic() + QUARANTINE_S
    return SlowPattern(pattern)
