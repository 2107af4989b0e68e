"""Jinja2 rendering: a Snapshot to its Markdown dump, that dump cut to a budget or made HTML."""

import math
import re
import shlex
from collections.abc import Mapping, Set
from dataclasses import dataclass
from datetime import datetime

import jinja2
from markdown_it import MarkdownIt
from markdown_it.token import Token

# human_bytes and utc are imported from here by the pages too
from ctxd import shipped
from ctxd.attempts.flags import process_name
from ctxd.collectors import registry
from ctxd.collectors.proc.procfs import true_start
from ctxd.fmt import between, human_bytes, human_duration, printable, utc
from ctxd.models import Flag, ProcessInfo, Snapshot
from ctxd.render import attempts as attempt_table
from ctxd.render import gpus as gpu_table
from ctxd.render import handover, ray_tasks, reuse, slurm_tasks, stacks
from ctxd.render import processes as render_processes
from ctxd.render.dump_files import DumpLocation
from ctxd.signals import ranks
from ctxd.thresholds import IDLE_CPU_PERCENT

TEMPLATES = shipped("templates")


def cpu_text(percent: float) -> str:
    """A CPU share to one decimal, rounded down: 0.97 % reads 0.9, under the 1 % that makes a
    process idle, not 1.0 beside "idle for 16 s"."""
    return f"{math.floor(percent * 10) / 10:.1f}"


def fence(lines: list[str], info: str = "text") -> str:
    """A code fence longer than any backtick run inside, so log text cannot close it early."""
    body = "\n".join(lines)
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{body}\n{ticks}"


def cell(value: object) -> str:
    """Text safe inside one Markdown table cell."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def inline(value: object) -> str:
    """Text safe inside an inline code span; of several lines the first and "…": a heredoc's
    body flattened onto its command line would read, and paste, as live shell."""
    text = "" if value is None else str(value).replace("\r\n", "\n").replace("\r", " ")
    first, newline, _ = text.strip("\n").partition("\n")
    text = first + (" …" if newline else "")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def cell_code(value: object) -> str:
    """An inline code span inside a table cell: GFM splits cells at a pipe even in code."""
    return inline(value).replace("|", "\\|")


def flag_text(flag: Flag) -> str:
    if flag.name is None:
        return flag.value or ""
    return flag.name if flag.value is None else f"{flag.name} {flag.value}"


def shown(value: object) -> object:
    """What every `{{ }}` of a dump prints: text with control and bidi characters escaped.
    Observed text arrives so from the redactor; this covers what never passed it."""
    return printable(value) if isinstance(value, str) else value


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=False,  # Markdown, not HTML: unsafe text is fenced or cell-escaped instead
        finalize=shown,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        # templates change with ctxd, not while it runs: no stat of each one at every render
        auto_reload=False,
    )
    env.filters.update(
        bytes=human_bytes,
        duration=human_duration,
        fence=fence,
        cell=cell,
        inline=inline,
        cell_code=cell_code,
        block=block,
        utc=utc,
        flag=flag_text,
        clock=lambda at: f"{at:%H:%M:%S}",
        cpu=cpu_text,
        shell_quote=shlex.quote,
        called=process_name,
        between=between,
        true_start=lambda p: true_start(p.started_at, p.host),
        local_start=true_start,  # a start time of this machine's process, as a clock reads it
    )
    env.globals["idle_cpu_percent"] = IDLE_CPU_PERCENT
    env.globals["process_view"] = render_processes.view
    env.globals["handover"] = handover.lines
    env.globals["told_in_handover"] = handover.told
    env.globals["in_now"] = handover.in_now
    env.globals["attempt_rows"] = attempt_table.rows
    env.globals["gpu_rows"] = gpu_table.rows
    env.globals["stack_threads"] = stacks.threads
    env.globals["rank_of"] = ranks.rank_of
    env.globals["slurm_task_lines"] = slurm_tasks.lines
    env.globals["ray_task_lines"] = ray_tasks.lines
    return env


def roots_first(processes: list[ProcessInfo]) -> list[ProcessInfo]:
    return [p for p in processes if p.root]


def render_dump(
    snapshot: Snapshot,
    where: DumpLocation | None = None,
    *,
    for_model: bool = False,
    left_out: Mapping[str, str] | None = None,
    served_at: datetime | None = None,
    handover: list[str] | None = None,
    reused: reuse.Sections | None = None,
) -> str:
    """The dump's Markdown; `where` fills its footer (none: a dump not stored anywhere).
    `for_model`: what a model is handed, without ctxd's own chatter (where the dump lives,
    what ctxd watches unasked, hints), one footer line naming the full dump instead;
    `left_out`: collector sections not shown, by name, each with the words that say so;
    `served_at`: when a stored version is handed out later, said at its top; `handover`: its
    opening lines as made before a budget cut shortened the snapshot; `reused`: the
    partials' texts of the renders before it in one budget cut (`reuse.Sections`)."""
    template = _ENV.get_template("dump.md.j2")
    token = reuse.rendering(reused)
    try:
        return _render(template, snapshot, where, for_model, left_out, served_at, handover)
    finally:
        reuse.done(token)


def _render(
    template: jinja2.Template,
    snapshot: Snapshot,
    where: DumpLocation | None,
    for_model: bool,
    left_out: Mapping[str, str] | None,
    served_at: datetime | None,
    handover: list[str] | None,
) -> str:
    return template.render(
        for_model=for_model,
        left_out=dict(left_out or {}),
        served_at=served_at,
        handover_lines=handover,
        s=snapshot,
        h=snapshot.header,
        n=snapshot.narrative,
        o=snapshot.observations,
        roots=roots_first(snapshot.observations.processes.items),
        where=where,
        partials=[f"_{collector.NAME}.md.j2" for collector in registry()],
    )


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _fence_states(lines: list[str]) -> list[str | None]:
    """For each line, the fence open before it (None outside code): `## ` in a log is no
    section, and a cut inside a fence must close it."""
    states: list[str | None] = []
    fence: str | None = None
    for line in lines:
        states.append(fence)
        m = _FENCE.match(line)
        if m and fence is None:
            fence = m.group(1)
        elif m and fence and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
            fence = None
    return states


def sections(markdown: str) -> list[str]:
    """The dump split before each `## ` heading that is not inside a code fence."""
    lines = markdown.splitlines(keepends=True)
    parts: list[str] = []
    current: list[str] = []
    for line, fence in zip(lines, _fence_states(lines), strict=True):
        if line.startswith("## ") and fence is None and current:
            parts.append("".join(current))
            current = []
        current.append(line)
    if current:
        parts.append("".join(current))
    return parts


def cut(text: str, max_chars: int) -> str:
    """`text` cut at a line boundary to `max_chars`, an open code fence closed within it."""
    if len(text) <= max_chars:
        return text
    lines = text[:max_chars].splitlines(keepends=True)
    while lines:
        lines.pop()  # the last line may be partial; then drop lines until the closing fits
        fence = _fence_states([*lines, ""])[-1]
        closing = f"\n{fence}\n" if fence else ""
        if sum(map(len, lines)) + len(closing) <= max_chars:
            return "".join(lines) + closing
    return ""


# What a resuming agent cannot do without: never dropped by `fit`, only cut at its end.
KEPT_SECTIONS = ("Handover", "Now", "Attempts", "Next steps")


def fit(markdown: str, max_chars: int | None) -> str:
    """Cut a dump to `max_chars`, leaving out whole sections, the last first, until it fits.

    The title and the KEPT_SECTIONS stay (a last cut shortens them at a line's end); the
    final "Where this dump lives" section is kept so the reader can fetch the rest.
    """
    if max_chars is None or len(markdown) <= max_chars:
        return markdown
    parts = sections(markdown)
    footer = parts.pop() if parts and parts[-1].startswith("## Where") else ""
    budget = max_chars - len(footer) - 200
    kept = list(parts)
    dropped: list[str] = []
    for part in reversed(parts):
        if sum(map(len, kept)) <= budget:
            break
        name = part.splitlines()[0].lstrip("# ").strip()
        if part is parts[0] or any(name.startswith(k) for k in KEPT_SECTIONS):
            continue
        kept.remove(part)
        dropped.insert(0, name)
    if dropped:
        kept.append(f"> Kept under {max_chars} characters; left out: {', '.join(dropped)}.\n\n")
    return cut("".join(kept) + footer, max_chars)


def block(value: object, indent: int = 0) -> str:
    """Agent-written text inside the dump: it may be Markdown, but it cannot open a heading
    (a fake section), leave a code fence open, or break out of its list item."""
    lines = str(value).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    states = _fence_states(lines)
    out = [
        line if fence is not None or _FENCE.match(line) else _HEADING.sub(r"\1\\\2", line)
        for line, fence in zip(lines, states, strict=True)
    ]
    if (tail := _fence_states([*lines, ""])[-1]) is not None:
        out.append(tail)
    return ("\n" + " " * indent).join(out)


_HEADING = re.compile(r"^(\s*)(#{1,6}(?:\s|$))")
_ENV = environment()
for _partial in ("_narrative.md.j2", *(f"_{c.NAME}.md.j2" for c in registry())):
    reuse.reusable(_ENV, _partial)


# --- Markdown -> HTML (the version pages) ----------------------------------------------------


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    anchor: str


@dataclass(frozen=True)
class HtmlDump:
    html: str
    toc: list[Heading]


def _markdown_parser() -> MarkdownIt:
    # Raw HTML off: every observed string renders as text. Images off: a journal or log line
    # must not make the reader's browser fetch anything.
    # A line break in the dump is one on the page too (an attempt's command under its outcome).
    return (
        MarkdownIt("commonmark", {"html": False, "breaks": True}).enable("table").disable("image")
    )


_MD = _markdown_parser()


def slug(text: str) -> str:
    words = re.sub(r"[^\w\s-]", "", text.lower()).split()
    return "-".join(words)[:60].strip("-") or "section"


def markdown_html(
    markdown: str, sections_only: bool = False, leave_out: Set[str] = frozenset()
) -> HtmlDump:
    """A dump as HTML: an id on every heading and a table of contents of levels 2 and 3.
    `sections_only`: without its lines before the first section (its title, trigger and note,
    which a page states in its own header); `leave_out`: sections, by their level-2 heading,
    that a page shows its own way."""
    tokens = _sections(_MD.parse(markdown), sections_only, leave_out)
    toc: list[Heading] = []
    seen: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token.type in ("th_open", "td_open") and token.attrs.get("style"):
            # The pages' CSP allows no inline style; a class carries the column alignment.
            align = str(token.attrs.pop("style")).removeprefix("text-align:")
            token.attrSet("class", f"align-{align}")
        if token.type != "heading_open":
            continue
        text = tokens[i + 1].content if i + 1 < len(tokens) else ""
        base = slug(text)
        seen[base] = seen.get(base, 0) + 1
        anchor = base if seen[base] == 1 else f"{base}-{seen[base]}"
        token.attrSet("id", anchor)
        level = int(token.tag[1])
        if level in (2, 3):
            toc.append(Heading(level, text, anchor))
    return HtmlDump(_MD.renderer.render(tokens, _MD.options, {}), toc)


def _sections(tokens: list[Token], sections_only: bool, leave_out: Set[str]) -> list[Token]:
    """The tokens of the dump's sections but those left out; a section starts at a level-2
    heading of the document itself (not one inside a list item or a quote)."""
    if not sections_only and not leave_out:
        return tokens
    kept: list[Token] = []
    keep = not sections_only
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.tag == "h2" and token.level == 0:
            keep = tokens[i + 1].content not in leave_out
        if keep:
            kept.append(token)
    return kept
