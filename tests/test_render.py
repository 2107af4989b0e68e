"""Markdown helpers: fences that cannot be closed early, safe cells, and cutting to a budget."""

from ctxd.render.markdown import cell, fence, fit, human_bytes, inline
from hypothesis import given
from hypothesis import strategies as st


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
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(370 * 1024**3) == "370.0 GiB"


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


def test_code_in_a_table_cell_escapes_pipes_and_line_breaks():
    from ctxd.render.markdown import cell_code

    assert cell_code('{"a":"x|y"}') == '`{"a":"x\\|y"}`'
    assert "\r" not in cell_code("a\rb") and "\n" not in cell_code("a\nb")


def test_agent_text_cannot_fake_a_section_or_leave_a_fence_open():
    from ctxd.render.markdown import block

    text = block("tried it\n## Where this dump lives\n```\nlog line", 2)
    assert "\n  \\## Where this dump lives" in text
    assert text.endswith("\n  ```")  # the open fence is closed inside the item


def test_fit_never_splits_at_a_heading_inside_a_log_fence():
    dump = (
        "# s\n\n## Objective\n\nx\n\n## Logs\n\n```text\n## Summary of build\n"
        + "line\n" * 300
        + "```\n\n## Where this dump lives\n\n- here\n"
    )
    cut = fit(dump, 300)
    assert len(cut) <= 300 and cut.count("```") % 2 == 0
    assert "left out: Logs." in cut and "## Where this dump lives" in cut


def test_the_dump_includes_one_partial_per_collector_in_registry_order() -> None:
    from ctxd.collectors import registry
    from ctxd.render.markdown import TEMPLATES

    for collector in registry():
        assert (TEMPLATES / f"_{collector.NAME}.md.j2").is_file(), collector.NAME
    dump = (TEMPLATES / "dump.md.j2").read_text()
    assert "_processes.md.j2" not in dump  # the registry decides, not a list in the template


def test_empty_sections_fold_into_one_closing_line():
    from datetime import UTC, datetime

    from ctxd.models import (
        GpusSection,
        LogsSection,
        Observations,
        Snapshot,
        SnapshotHeader,
        Unavailable,
    )
    from ctxd.render.markdown import render_dump

    header = SnapshotHeader(session="s", version=1, taken_at=datetime.now(UTC), trigger="t")
    missing = Unavailable(target="/srv/app.log", reason="no such file")
    seen = Observations(
        logs=LogsSection(unavailable=[missing]),
        gpus=GpusSection(reason="no NVIDIA GPU (nvidia-smi not found)"),
    )
    markdown = render_dump(Snapshot(header=header, observations=seen))

    assert "## Ports and health" not in markdown and "## Artifacts" not in markdown
    assert "## GPUs" not in markdown
    assert (
        "_Also: no port watched; no NVIDIA GPU (nvidia-smi not found); no artifact watched._"
        in markdown
    )
    # a section with only an unavailable line keeps its heading, and says nothing false
    assert "## Logs" in markdown and "no such file" in markdown
    assert "no log watched" not in markdown


def test_a_render_asks_the_filesystem_nothing(monkeypatch):
    # Jinja's default auto_reload stat()s each template (the dump and its eight partials) at
    # every render, to see whether it changed; ctxd's templates change only with ctxd.
    import os

    from ctxd.models import Snapshot, SnapshotHeader
    from ctxd.render import html as templating
    from ctxd.render import markdown as render
    from ctxd.store.connection import now

    snapshot = Snapshot(header=SnapshotHeader(session="s", version=1, taken_at=now(), trigger="x"))
    render.render_dump(snapshot)
    templating.ENV.get_template("_style.html").render()
    asked: list[object] = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda *a, **k: asked.append(a[0]) or real_stat(*a, **k))
    assert render.render_dump(snapshot).startswith("# s")
    templating.ENV.get_template("_style.html").render()
    assert asked == []


def test_a_cpu_share_under_the_idle_line_never_reads_as_on_it():
    """0.97 % is idle (under 1 %): the table says 0.9, not 1.0 beside "idle for 16 s"."""
    from ctxd.render.markdown import cpu_text

    assert [cpu_text(x) for x in (0.0, 0.5, 0.97, 1.0, 12.34)] == ["0.0", "0.5", "0.9", "1.0",
                                                                    "12.3"]  # fmt: skip
