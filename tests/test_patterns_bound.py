"""User regular expressions: their compiled size is bounded, and so is the cache that holds them."""

import json
import subprocess
import sys
import textwrap

import pytest
from ctxd.collectors import _patterns

# Run in a child so RSS is that of a real process that did nothing else, under an address-space
# limit so a regression fails the test instead of exhausting the machine.
CHILD = textwrap.dedent(
    """
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (3 * 1024**3, 3 * 1024**3))
    import psutil
    from ctxd.collectors import _patterns
    me = psutil.Process()
    before = me.memory_info().rss
    refused = []
    for pattern in json.loads(sys.argv[1]):
        try:
            _patterns.compiled(pattern)
            refused.append(None)
        except ValueError as exc:
            refused.append(str(exc))
    print(json.dumps({"grew_mb": (me.memory_info().rss - before) / 1e6, "refused": refused}))
    """
)


def _run_child(patterns: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(patterns)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_huge_counted_repeats_cost_no_memory() -> None:
    # Each of these compiled by `regex` held ~260 MB for as long as the cache kept it.
    out = _run_child(["(?:a{1000}){1000}", "(?:b{1000}){1000}"])
    assert all(reason and "more than" in reason for reason in out["refused"]), out
    assert out["grew_mb"] < 30, out


def test_nested_repeats_that_would_exhaust_memory_are_refused() -> None:
    out = _run_child(["(?:(?:(?:a{65535}){65535}){65535})"])
    assert out["refused"][0] and "nodes" in out["refused"][0]
    assert out["grew_mb"] < 30, out


@pytest.mark.parametrize("pattern", [r"vllm\.entrypoints", r"\d{1,5}", "(?:x{100}){100}", "a+b*"])
def test_ordinary_patterns_compile(pattern: str) -> None:
    _patterns.check(pattern)
    assert _patterns.compiled(pattern).search("x" * 10_000 + " vllm.entrypoints 123 ab")


def test_the_cache_is_bounded() -> None:
    for i in range(3 * _patterns.CACHE_PATTERNS):
        _patterns.compiled(f"distinct-{i}")
    assert _patterns._compiled.cache_info().currsize <= _patterns.CACHE_PATTERNS


def test_refusal_says_why() -> None:
    with pytest.raises(ValueError, match=r"more than 10000 nodes"):
        _patterns.check("(?:a{1000}){1000}")


def test_a_log_watchs_patterns_are_bounded_together() -> None:
    _patterns.check_all(["a{5000}", "b+"])
    with pytest.raises(ValueError, match="more than"):
        _patterns.check_all(["a{6000}", "b{6000}"])


def test_a_watch_with_a_huge_pattern_is_refused_with_the_reason() -> None:
    from ctxd.models import LogWatch, ProcessWatch
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="more than 10000 nodes"):
        ProcessWatch(match="(?:a{1000}){1000}")
    with pytest.raises(ValidationError, match="more than 10000 nodes"):
        LogWatch(path="/tmp/x.log", errors=["a{6000}", "b{6000}"])


def test_a_verdict_is_kept_and_a_refusal_stays_a_refusal(monkeypatch) -> None:
    # Each snapshot reads its watches back through validation and compiles their patterns:
    # parsing a pattern again every time cost ~0.3 ms a snapshot for one process watch.
    parsed: list[str] = []
    real_parse = _patterns.re._parser.parse

    def counting(pattern: str, *args):  # type: ignore[no-untyped-def]
        parsed.append(pattern)
        return real_parse(pattern, *args)

    monkeypatch.setattr(_patterns.re._parser, "parse", counting)
    for _ in range(3):
        _patterns.check("kept-verdict-(a|b)+")
        with pytest.raises(ValueError, match="more than"):
            _patterns.check("(?:kept{1000}){1000}")
    assert parsed == ["kept-verdict-(a|b)+", "(?:kept{1000}){1000}"]
    for i in range(3 * _patterns.CHECKED_PATTERNS):
        _patterns.check(f"verdict-{i}")
    assert _patterns._refusal.cache_info().currsize <= _patterns.CHECKED_PATTERNS
