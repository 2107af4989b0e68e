"""Regular expressions given by users, run with a time bound so one cannot freeze ctxd."""

import time
from functools import lru_cache

import regex

# Python's own `re` holds the GIL while it backtracks: a pattern like `(.+)+X` would stop
# every thread of the service. The `regex` engine takes a timeout and releases the GIL.
SEARCH_TIMEOUT_S = 0.05
WATCH_BUDGET_S = 0.5


class SlowPattern(Exception):
    """A pattern that took too long: reported as unavailable instead of waited for."""

    def __init__(self, pattern: str) -> None:
        super().__init__(f"pattern /{pattern}/ is too slow (backtracking?); simplify it")


@lru_cache(maxsize=512)
def compiled(pattern: str, multiline: bool = False) -> regex.Pattern:
    return regex.compile(pattern, regex.M if multiline else 0)


class Budget:
    """All searches of one watch share `WATCH_BUDGET_S`; each is cut at `SEARCH_TIMEOUT_S`."""

    def __init__(self, total_s: float = WATCH_BUDGET_S) -> None:
        self.deadline = time.monotonic() + total_s

    def search(self, pattern: regex.Pattern, text: str) -> regex.Match | None:
        left = min(SEARCH_TIMEOUT_S, self.deadline - time.monotonic())
        try:
            if left <= 0:
                raise TimeoutError
            return pattern.search(text, timeout=left, concurrent=True)
        except TimeoutError:
            raise SlowPattern(pattern.pattern) from None

    def finditer(self, pattern: regex.Pattern, text: str) -> list[regex.Match]:
        left = max(0.0, self.deadline - time.monotonic())
        try:
            return list(pattern.finditer(text, timeout=left, concurrent=True))
        except TimeoutError:
            raise SlowPattern(pattern.pattern) from None
