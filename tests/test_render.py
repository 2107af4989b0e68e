"""Markdown helpers: fences that cannot be closed early, safe cells, and cutting to a budget."""

from hypothesis import given
from hypothesis import strategies as st

from service.render import cell, fence, fit, human_bytes, inline


def test_fence_is_longer_than_any_backtick_run_inside():
    text = fence(["```", "a ````` b"])
    assert text.startswith("``````text\n") and text.endswith("\n``````")


@given(st.lists(st.text(alphabet="`ab\n ", max_size=30), max_size=5))
def test_fence_body_never_contains_the_fence(lines):
    text = fence(lines)
    ticks = text.split("text\n", 1)[0]
    body = text[len(ticks) + len("text\n") : -len(ticks) - 1]
    assert ticks not in body


def test_cell_escapes_pipes_and_newlines():
    assert cell("a|b\nc") == "a\\|b c"
    assert cell(None) == ""


def test_inline_code_survives_backticks():
    assert inline("a`b") == "``a`b``"
    assert inline("`x`") == "`` `x` ``"


def test_human_bytes():
    assert human_bytes(0) == "0 B"
    assert human_bytes(1536) == "1.5 KB"
    assert human_bytes(370 * 1024**3) == "370.0 GB"


DUMP = (
    "# s · v3\n\n## Objective\n\nfind the hang\n\n## Now\n\n- port closed\n\n"
    "## Logs\n\n" + "log line\n" * 500 + "\n## Where this dump lives\n\n- here\n"
)


def test_fit_keeps_the_head_drops_the_biggest_tail_and_names_the_full_dump():
    cut = fit(DUMP, 400)
    assert len(cut) <= 400
    assert "find the hang" in cut and "port closed" in cut
    assert "log line" not in cut
    assert "left out: Logs" in cut and "## Where this dump lives" in cut


def test_fit_returns_a_dump_that_already_fits_unchanged():
    assert fit(DUMP, None) == DUMP
    assert fit(DUMP, len(DUMP)) == DUMP
