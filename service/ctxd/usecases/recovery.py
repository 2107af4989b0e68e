"""What an agent calls after losing context: resume dumps within a budget, diffs, continue."""

import difflib
from collections.abc import Callable

from ctxd import redact
from ctxd.errors import Invalid
from ctxd.fmt import attempts
from ctxd.models import Diff, HistoryItem, Snapshot, Trigger
from ctxd.render import markdown as render
from ctxd.render.dump_files import version_file
from ctxd.snapshotter import changes
from ctxd.snapshotter.snapshotter import Snapshotter


def _logs_to(lines: int) -> Callable[[Snapshot], str]:
    def cut(s: Snapshot) -> str:
        for log in s.observations.logs.items:
            log.lines = log.lines[-lines:] if lines else []
        return f"log tails beyond {lines} lines" if lines else "log tails"

    return cut


def _changes(s: Snapshot) -> str:
    s.changes = s.changes[:15]
    return "changes beyond 15"


def _tables(s: Snapshot) -> str:
    procs = s.observations.processes.items
    roots = [p for p in procs if p.root]
    rest = sorted((p for p in procs if not p.root), key=lambda p: -(p.cpu_percent or 0))
    s.observations.processes.items = roots + rest[: max(0, 8 - len(roots))]
    s.observations.artifacts.items = s.observations.artifacts.items[:10]
    return "minor process and artifact rows"


def _older_narrative(keep: int) -> Callable[[Snapshot], str]:
    def cut(s: Snapshot) -> str:
        n = s.narrative
        n.findings, n.decisions, n.notes = n.findings[-keep:], n.decisions[-keep:], n.notes[-keep:]
        for entry in (*n.findings, *n.decisions):
            entry.text = redact.cut(entry.text, 400)
        return f"findings, decisions and notes but the newest {keep}"

    return cut


def _environments(s: Snapshot) -> str:
    for p in s.observations.processes.items:
        p.env = {}
    return "process environments"


def _observed(s: Snapshot) -> str:
    """Fewer rows, not empty sections: an emptied section would read "no log watched"."""
    o = s.observations
    o.processes.items = [p for p in o.processes.items if p.root][:3]
    for p in o.processes.items:
        p.relaunch = []
    o.artifacts.items, o.commands.items = o.artifacts.items[:3], o.commands.items[:3]
    o.logs.items = o.logs.items[-3:]
    return "relaunch blocks and observed rows but the first 3"


_LEFT_OUT = "left out to fit; in the full dump"


def _attempts_to(shown: int) -> Callable[[Snapshot], str]:
    """Fewer attempts in full: the folded line, the running ones and the newest failure stay."""

    def cut(s: Snapshot) -> str:
        history = s.narrative.history
        launches = [i for i in history if i.source == "launch" and i.status != "folded"]
        keep = {id(i) for i in launches[-shown:]}
        keep |= {id(i) for i in launches if i.status in ("running", "started")}
        failed = [i for i in launches if i.error]
        keep |= {id(failed[-1])} if failed else set()
        cut_out = [i for i in launches if id(i) not in keep]
        earlier = [i for i in history if i.text == _LEFT_OUT]  # an earlier pass's note
        left = [
            i
            for i in history
            if i.text != _LEFT_OUT
            and (i.source != "launch" or i.status == "folded" or id(i) in keep)
        ]
        numbers = [n for i in [*earlier, *cut_out] for n in (i.first, i.last) if n is not None]
        if numbers:  # in their place, so the numbers read on
            first, last = min(numbers), max(numbers)
            at = min(i.at for i in [*earlier, *cut_out])
            note = HistoryItem(at=at, source="launch", label=attempts(first, last), first=first,
                               last=last, status="folded", text=_LEFT_OUT)  # fmt: skip
            first_kept = next(
                (n for n, i in enumerate(left) if i.first is not None and i.first > first), None
            )
            left.insert(len(left) if first_kept is None else first_kept, note)
        for item in left:
            if item.command and id(item) in keep and item.status not in ("running", "started"):
                item.command = None  # its flags are in the running one's difference
        s.narrative.history = left
        return f"attempts but the running, the newest failure and {shown} more"

    return cut


def _recent_commands(s: Snapshot) -> str:
    s.narrative.recent_commands = s.narrative.recent_commands[-3:]
    return "recent commands but 3"


def _shorter_lines(s: Snapshot) -> str:
    for signal in s.signals:
        signal.text = redact.cut(signal.text, 240)
    for item in s.narrative.history:
        item.outcome = redact.cut(item.outcome, 240) if item.outcome else item.outcome
        item.command = redact.cut(item.command, 240) if item.command else item.command
    return "the end of long lines"


# In reverse order of importance: what goes first is what a reader misses least. The
# objective, Now, the running attempt, the newest failure and the next steps are never cut:
# the last steps shorten them instead.
SHRINK_STEPS = (
    _logs_to(10),
    _changes,
    _logs_to(3),
    _tables,
    _older_narrative(5),
    _environments,
    _logs_to(0),
    _observed,
    _attempts_to(3),
    _recent_commands,
    _older_narrative(1),
    _attempts_to(1),
    _shorter_lines,
)


def fit_to_budget(
    snap: Snapshotter, snapshot: Snapshot, markdown: str, max_chars: int | None
) -> str:
    """The dump cut to `max_chars`, step by step, ending with where the full one lives."""
    if max_chars is None or len(markdown) <= max_chars:
        return markdown
    copy = snapshot.model_copy(deep=True)
    cuts: list[str] = []
    full = snap.session_dir(copy.header.session) / version_file(copy.header.version)
    for step in SHRINK_STEPS:
        said = step(copy)
        # a step that cuts further what an earlier one cut says so in its place
        family = said.split(" but ")[0].split(" beyond ")[0]
        cuts = [c for c in cuts if c.split(" but ")[0].split(" beyond ")[0] != family]
        cuts.append(said)
        note = (
            f"> Cut to fit {max_chars} characters (left out: {', '.join(cuts)}). "
            f"Full dump: `{full.resolve()}`; earlier history: "
            f"`ctxd search {copy.header.session} WORDS`\n\n"
        )
        shorter = _with_note(snap.render(copy), note)
        if len(shorter) <= max_chars:
            return shorter
    return render.fit(shorter, max_chars)


def _with_note(markdown: str, note: str) -> str:
    title, _, rest = markdown.partition("\n")
    return f"{title}\n\n{note}{rest.lstrip()}"


def resume_from_memory(
    snap: Snapshotter, sid: str, *, fresh: bool, max_chars: int | None, since: int | None
) -> str | None:
    """The latest stored dump when it is in memory and nothing needs computing: no I/O, so
    it can answer on the event loop; None means "ask `resume`"."""
    if fresh or since is not None:
        return None
    markdown = snap.latest_in_memory(sid)
    if markdown is None or (max_chars is not None and len(markdown) > max_chars):
        return None
    return markdown


def resume(
    snap: Snapshotter,
    sid: str,
    *,
    fresh: bool = True,
    max_chars: int | None = None,
    since: int | None = None,
) -> str:
    """The dump an agent reads to pick up where it was: fresh (stored as a new version unless
    nothing changed) or the latest stored one, leading with changes since `since`, cut to fit."""
    if fresh or snap.store.latest_version(sid) == 0:
        version = snap.take(sid, Trigger.RESUME).header.version
    else:
        version = snap.store.latest_version(sid)
    markdown = snap.store.get_markdown(sid, version)
    if since is None and max_chars is None:
        return markdown
    snapshot = snap.store.get_snapshot(sid, version)
    lead = _changes_since(snap, sid, since, snapshot) if since and since != version else ""
    budget = max(200, max_chars - len(lead)) if max_chars else None
    markdown = fit_to_budget(snap, snapshot, markdown, budget)
    if lead:
        title, _, rest = markdown.partition("\n\n")
        markdown = f"{title}\n\n{lead}{rest}"
    return render.fit(markdown, max_chars)


def _changes_since(snap: Snapshotter, sid: str, since: int, snapshot: Snapshot) -> str:
    items = changes.compare(snap.store.get_snapshot(sid, since), snapshot)
    lines = [f"## Changes since v{since}", ""]
    lines += [f"- {render.cell(c.text)}" for c in items] or ["- nothing changed"]
    return "\n".join(lines) + "\n\n"


def message(snap: Snapshotter, sid: str, text: str) -> str | None:
    """Any message is activity; an empty or blank one means "continue": returns a fresh dump."""
    if text.strip():
        said = redact.text(text)  # a pasted token never reaches the db
        snap.store.touch(sid, message=said)
        snap.store.add_prompt(sid, said)
        return None
    snap.store.touch(sid)
    snap.store.add_prompt(sid, "")  # "the user's last message was empty: continue"
    version = snap.take(sid, Trigger.CONTINUE).header.version
    return snap.store.get_markdown(sid, version)


def diff(snap: Snapshotter, sid: str, from_version: int, to_version: int) -> Diff:
    """What changed from one version to a later one (or the same one: nothing)."""
    if from_version > to_version:  # a reversed diff reads as undoing: refuse, say the fix
        raise Invalid(f"from must be older than to: ask for from={to_version}&to={from_version}")
    before = snap.store.get_snapshot(sid, from_version)
    after = snap.store.get_snapshot(sid, to_version)
    lines = difflib.unified_diff(
        snap.store.get_markdown(sid, from_version).splitlines(),
        snap.store.get_markdown(sid, to_version).splitlines(),
        fromfile=f"v{from_version}",
        tofile=f"v{to_version}",
        lineterm="",
    )
    return Diff(
        session=sid,
        from_version=from_version,
        to_version=to_version,
        changes=changes.compare(before, after),
        markdown_diff="\n".join(lines),
    )
