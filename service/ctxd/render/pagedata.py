"""The page view-models: what each HTML page shows, read from the store and the snapshotter."""

from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup

from ctxd import redact
from ctxd.errors import NotFound
from ctxd.models import (
    Diff,
    HistoryItem,
    JournalEntry,
    LogInfo,
    ProcessWatch,
    Said,
    Session,
    Signal,
    Snapshot,
    SnapshotSummary,
    Watch,
)
from ctxd.render import charts, harness_summary
from ctxd.render.charts import Sparkline, Strip
from ctxd.render.harness_summary import HarnessSummary
from ctxd.render.markdown import HtmlDump, markdown_html
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.store.database import Store
from ctxd.usecases import recovery
from ctxd.usecases.search import SearchHit, SearchResult, find, snippet_html

# Parsing a stored version costs its JSON; the session page reads at most this many.
TIMELINE_MAX = 200
# what the timeline, its summaries and the sparklines read: not the big log and tree parts
TIMELINE_PARTS = frozenset({"signals", "changes", "observations.processes"})
# A diff of two dumps with long logs can run to thousands of lines; past this it stops helping.
DIFF_LINES_MAX = 4000
SEARCH_PAGE_HITS = 25
# The dump's sections a snapshot's page states itself, above the dump: Now is its signals.
STATED_BY_THE_PAGE = frozenset({"Now"})
# An attempt's state, in the words of the session page: its process runs, is not seen yet
# (its command was given), or is gone.
STATES = {"running": "running", "started": "waiting", "ended": "dead"}


@dataclass
class SessionRow:
    session: Session
    last: SnapshotSummary | None
    worst: Signal | None


def index(store: Store) -> list[SessionRow]:
    """Every session, newest activity first, with its latest version and worst signal."""
    rows = []
    for session in store.list_sessions():
        versions = store.list_snapshots(session.id)[:1]
        last = versions[0] if versions else None
        worst = None
        if last is not None:
            worst = charts.worst(store.get_snapshot(session.id, last.version).signals)
        rows.append(SessionRow(redact.scrub(session), last, worst))
    return rows


@dataclass
class VersionRow:
    version: int
    taken_at: datetime
    trigger: str
    signals: list[Signal]
    worst: Signal | None
    summary: str


@dataclass
class ProcessSeries:
    watch_id: int
    label: str
    cpu: Sparkline
    rss: Sparkline


@dataclass
class Tried:
    """One line of the dump's Attempts (`attempts.history.history`), with its state's word."""

    item: HistoryItem
    state: str  # running, waiting, dead; "" for a folded line or the agent's own note


@dataclass
class LogNow:
    path: str
    seen: LogInfo | None  # as the log watch read it; None: no watch reads it


@dataclass
class RunsNow:
    """What runs now and what was tried, from a snapshot's Attempts and observations."""

    observed_at: datetime
    current: Tried | None  # the running attempt (the newest, if several), else the newest one
    logs: list[LogNow]  # the current attempt's output files
    tried: list[Tried]  # oldest first, as in the dump
    signals: list[Signal]
    wakes: list[Said]  # the news ctxd sent to wake the agent, oldest first


@dataclass
class JournalRow:
    """An entry the agent wrote, or a launch its command made (an attempt)."""

    at: datetime
    kind: str
    text: str
    status: str | None = None
    outcome: str | None = None
    key: str | None = None


@dataclass
class SessionPage:
    session: Session
    now: RunsNow
    rows: list[VersionRow]
    total: int
    strip: Strip
    series: list[ProcessSeries]
    journal: list[JournalRow]
    watches: list[Watch]


def summarize(snapshot: Snapshot) -> str:
    """One line saying what changed since the previous version."""
    if snapshot.header.previous_version is None:
        return "first version"
    if not snapshot.changes:
        return "nothing changed"
    head = "; ".join(c.text for c in snapshot.changes[:2])
    if len(head) > 160:
        head = head[:157] + "…"
    more = len(snapshot.changes) - 2
    return f"{head} (+{more} more)" if more > 0 else head


def watch_label(watch: Watch | None, watch_id: int) -> str:
    spec = watch.spec if watch else None
    if isinstance(spec, ProcessWatch):
        target = f"pid {spec.pid}" if spec.pid is not None else f"match {spec.match}"
        return f"watch {watch_id}: {target}"
    return f"watch {watch_id} (removed)"


def series(snapshots: list[Snapshot], watches: list[Watch]) -> list[ProcessSeries]:
    """CPU % and RSS of each process watch (its whole tree summed), one point per version."""
    by_id = {w.id: w for w in watches}
    ids = sorted({p.watch_id for s in snapshots for p in s.observations.processes.items})
    out = []
    for wid in ids:
        cpu: list[float | None] = []
        rss: list[float | None] = []
        for snap in snapshots:
            items = [p for p in snap.observations.processes.items if p.watch_id == wid]
            cpu.append(sum(p.cpu_percent or 0.0 for p in items) if items else None)
            rss.append(float(sum(p.rss_bytes or 0 for p in items)) if items else None)
        label = watch_label(by_id.get(wid), wid)
        out.append(ProcessSeries(wid, label, charts.sparkline(cpu), charts.sparkline(rss)))
    return out


def tried(item: HistoryItem) -> Tried:
    state = STATES.get(item.status or "", "") if item.source == "launch" else ""
    return Tried(item, state)


def runs_now(snapshot: Snapshot) -> RunsNow:
    """The attempts of a snapshot as the session page leads with them: the one running (or
    the newest), its ports and logs as observed, and each one tried."""
    history = [tried(item) for item in snapshot.narrative.history]
    attempt_items = [t for t in history if t.item.source == "launch" and t.item.status != "folded"]
    running = [t for t in attempt_items if t.state in ("running", "waiting")]
    current = (running or attempt_items)[-1] if attempt_items else None
    seen = {log.path: log for log in snapshot.observations.logs.items}
    paths = current.item.logs if current else []
    return RunsNow(
        observed_at=snapshot.header.taken_at,
        current=current,
        logs=[LogNow(path, seen.get(path)) for path in paths],
        tried=history,
        signals=snapshot.signals,
        wakes=snapshot.narrative.wakes,
    )


def journal_rows(entries: list[JournalEntry], history: list[HistoryItem]) -> list[JournalRow]:
    """The journal and the session's attempts (the dump's Attempts: what its commands started,
    a process found running), by time."""
    rows = [JournalRow(e.created_at, e.kind, e.text, e.status, e.outcome, e.key) for e in entries]
    for item in history:
        if item.source == "launch":
            said = "; ".join(part for part in (item.ran, item.error) if part) or item.outcome
            outcome = f"{item.label}: {said}" if item.label and said else item.label or said
            text = item.command or item.text
            rows.append(JournalRow(item.at, "launch", text, tried(item).state or None, outcome))
    return sorted(rows, key=lambda row: row.at)


def session_page(snap: Snapshotter, sid: str) -> SessionPage:
    """The session: what runs now (observed live, not stored), then its history."""
    store = snap.store
    session = redact.scrub(store.get_session(sid))
    live, _ = snap.preview(sid)
    summaries = store.list_snapshots(sid)
    shown = [
        store.get_snapshot(sid, s.version, TIMELINE_PARTS)
        for s in reversed(summaries[:TIMELINE_MAX])
    ]
    watches = redact.scrub(store.list_watches(sid))
    rows = [
        VersionRow(
            s.header.version,
            s.header.taken_at,
            s.header.trigger,
            s.signals,
            charts.worst(s.signals),
            summarize(s),
        )
        for s in reversed(shown)
    ]
    strip = charts.strip([(s.header.version, s.header.trigger, s.signals) for s in shown])
    return SessionPage(
        session=session,
        now=runs_now(live),
        rows=rows,
        total=len(summaries),
        strip=strip,
        series=series(shown, watches),
        journal=journal_rows(redact.scrub(store.list_entries(sid)), live.narrative.history),
        watches=watches,
    )


def snapshot_html(markdown: str) -> HtmlDump:
    """A dump as a snapshot's page shows it below its own header and signals: its sections
    but Now, so the title and the signals are said once."""
    return markdown_html(markdown, sections_only=True, leave_out=STATED_BY_THE_PAGE)


@dataclass
class VersionPage:
    snapshot: Snapshot
    dump: HtmlDump
    latest: int
    previous: int | None
    next: int | None
    # the harness's own summary of the conversation it compacted as this version was taken,
    # and what of the dump it leaves out; None for a version with none
    harness_summary: HarnessSummary | None = None


def version_page(store: Store, sid: str, version: int) -> VersionPage:
    snapshot = store.get_snapshot(sid, version)
    latest = store.latest_version(sid)
    markdown = store.get_markdown(sid, version)
    return VersionPage(
        snapshot=snapshot,
        dump=snapshot_html(markdown),
        latest=latest,
        previous=version - 1 if version > 1 else None,
        next=version + 1 if version < latest else None,
        harness_summary=harness_summary.beside(store.harness_summary(sid, version), markdown),
    )


@dataclass
class DiffLine:
    kind: str  # add, del, hunk, file or same: the class that colours the line
    text: str


@dataclass
class DiffPage:
    diff: Diff
    lines: list[DiffLine]
    cut: int
    latest: int


def diff_versions(store: Store, sid: str, start: int | None, end: int | None) -> tuple[int, int]:
    """Missing ends default to the latest version and the one before it."""
    latest = store.latest_version(sid)
    if latest == 0:
        raise NotFound(f"session '{sid}' has no versions yet; take one from its 'now' page")
    end = latest if end is None else end
    start = max(1, end - 1) if start is None else start
    return start, end


def diff_page(snap: Snapshotter, sid: str, start: int | None, end: int | None) -> DiffPage:
    start, end = diff_versions(snap.store, sid, start, end)
    diff = recovery.diff(snap, sid, start, end)
    raw = diff.markdown_diff.splitlines()
    lines = [DiffLine(_line_kind(text), text) for text in raw[:DIFF_LINES_MAX]]
    return DiffPage(diff, lines, max(0, len(raw) - DIFF_LINES_MAX), snap.store.latest_version(sid))


def _line_kind(text: str) -> str:
    if text.startswith(("+++", "---")):
        return "file"
    if text.startswith("@@"):
        return "hunk"
    return {"+": "add", "-": "del"}.get(text[:1], "same")


@dataclass
class NowPage:
    snapshot: Snapshot
    dump: HtmlDump
    latest: int


def now_page(snap: Snapshotter, sid: str) -> NowPage:
    snapshot, markdown = snap.preview(sid)
    return NowPage(snapshot, snapshot_html(markdown), snap.store.latest_version(sid))


@dataclass
class SearchPage:
    query: str
    sid: str | None
    result: SearchResult | None  # None: no query yet
    snippets: list[Markup]  # each hit's snippet as HTML, escaped but for its <mark>s

    @property
    def hits(self) -> list[tuple[SearchHit, Markup]]:
        return list(zip(self.result.hits if self.result else [], self.snippets, strict=True))


def search_page(store: Store, sid: str | None, q: str, offset: int) -> SearchPage:
    """One page of hits of `q` (in one session, or all); an Invalid query is the caller's 400."""
    if not q.strip():
        if sid is not None:
            store.get_session(sid)
        return SearchPage(query="", sid=sid, result=None, snippets=[])
    result = find(store, sid, q, limit=SEARCH_PAGE_HITS, offset=offset)
    snippets = [Markup(snippet_html(h.snippet)) for h in result.hits]
    return SearchPage(query=result.query, sid=sid, result=result, snippets=snippets)
