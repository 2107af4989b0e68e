"""What an agent calls after losing context: resume dumps within a budget, diffs, continue."""

import difflib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ctxd import redact
from ctxd.errors import Invalid
from ctxd.models import Diff, LogInfo, Snapshot, StuckStack, Trigger
from ctxd.render import handover, reuse, stacks
from ctxd.render import markdown as render
from ctxd.signals import ranks
from ctxd.snapshotter import changes
from ctxd.snapshotter.snapshotter import Snapshotter

# A stored version handed out this long after it was taken (or last found still true) says so
# at its top: its ages are of the moment it was taken.
SERVED_LATE = timedelta(seconds=10)


# A step cuts the copy of a snapshot a model is handed; it may name collector sections to
# leave out (`left`, section name -> its words) and says in a few words what it cut.
Step = Callable[[Snapshot, dict[str, str]], str]

# The fields of the snapshot each step may change (none: only `left`), so that telling
# whether it cut anything reads those alone (`reuse.Sections.follow`); a step not listed
# here is compared whole.
TOUCHES: dict[Step, tuple[str, ...]] = {}


def _touches(*fields: str) -> Callable[[Step], Step]:
    def mark(step: Step) -> Step:
        TOUCHES[step] = fields
        return step

    return mark


@_touches()
def _host(s: Snapshot, left: dict[str, str]) -> str:
    left["host"] = "the host"
    return "the host"


@_touches("observations.gpus", "signals")
def _idle_gpus(s: Snapshot, left: dict[str, str]) -> str:
    """GPUs no watched process holds tell a resuming agent nothing about its attempt."""
    gpus = s.observations.gpus
    had = bool(gpus.items)
    gpus.items = [g for g in gpus.items if any(p.watched for p in g.processes)]
    if had and not gpus.items:
        s.signals = [sig for sig in s.signals if sig.code != "gpu_held_idle"]
        left["gpus"] = "the GPUs (none holds a watched process)"
    return "idle GPUs"


@_touches("observations.logs")
def _ended_logs(s: Snapshot, left: dict[str, str]) -> str:
    """The logs of attempts that ended, and any no process writes that stopped before the
    newest run started: each one's error is in its attempt's row under Attempts."""
    history = s.narrative.history
    live = {p for i in history if i.status in ("running", "started") for p in i.logs}
    ended = {p for i in history if i.status in ("ended", "folded") for p in i.logs}
    ended |= {i.error_log for i in history if i.error_log}
    logs = s.observations.logs
    logs.items = [
        log for log in logs.items if log.path in live or (log.path not in ended and not _stale(log))
    ]
    if not logs.items:
        left["logs"] = "logs"
    return "ended attempts' logs"


def _stale(log: LogInfo) -> bool:
    """Written by no running process, and last before the newest watched root started."""
    newest = log.newest_root_started_at
    return log.writer_pid is None and newest is not None and log.modified_at < newest


@_touches()
def _said_in_handover(s: Snapshot, left: dict[str, str]) -> str:
    """The ports and GPUs of the running attempts, when that is all there is: the handover's
    line for each attempt says its port and the GPUs it holds."""
    live = [i for i in s.narrative.history if i.status in ("running", "started") and i.pid]
    if not live:
        return "nothing"
    trees = _live_trees(s)
    watched = {w for p in s.observations.processes.items if p.pid in trees for w in [p.watch_id]}
    ports = s.observations.ports.items
    dropped = []
    if ports and all(p.expected_by in watched for p in ports):
        left["ports"] = "ports"
        dropped.append(("Ports", "port"))
    gpus = s.observations.gpus.items
    if gpus and all(proc.pid in trees for g in gpus for proc in g.processes):
        left["gpus"] = "GPUs"
        dropped.append(("GPUs", "GPUs"))
    if not dropped:
        return "nothing"
    sections = " and ".join(name for name, _ in dropped)
    said = " and ".join(what for _, what in dropped)
    plural = "sections" if len(dropped) > 1 else "section"
    return f"the {sections} {plural} (the handover gives the running attempt's {said})"


def _logs_to(lines: int) -> Step:
    """Shorter log tails; what runs keeps its own log's last 3 lines."""

    @_touches("observations.logs")
    def cut(s: Snapshot, left: dict[str, str]) -> str:
        live = {i.pid for i in s.narrative.history if i.status in ("running", "started")}
        trees = _live_trees(s)
        for log in s.observations.logs.items:
            keep = max(lines, 3) if log.writer_pid in trees | live else lines
            log.lines = log.lines[-keep:] if keep else []
        return f"log tails beyond {lines} lines" if lines else "log tails but what runs writes"

    return cut


@_touches("changes")
def _changes(s: Snapshot, left: dict[str, str]) -> str:
    """The list of changes since the version before: the handover says what happened since,
    Now the signals raised; the list itself is the full dump's."""
    s.changes = []
    return "the changes since the version before"


def _recent_commands(keep: int) -> Step:
    @_touches("narrative.recent_commands")
    def cut(s: Snapshot, left: dict[str, str]) -> str:
        s.narrative.recent_commands = s.narrative.recent_commands[-keep:]
        return f"recent commands but {keep}"

    return cut


@_touches("narrative.read_before")
def _read_before(s: Snapshot, left: dict[str, str]) -> str:
    """The look before the newest: the agent can look again."""
    s.narrative.read_before = None
    return "what your look before the newest showed"


def _last_read_to(lines: int) -> Step:
    """What the agent's newest look at a file showed, its last `lines` lines (none: the agent
    can look again)."""

    @_touches("narrative.last_read")
    def cut(s: Snapshot, left: dict[str, str]) -> str:
        read = s.narrative.last_read
        if read is None or not lines:
            s.narrative.last_read = None
            return "what your newest look at a file showed"
        read.above += max(0, len(read.lines) - lines)
        read.lines = read.lines[-lines:]
        return f"what your newest look at a file showed but its last {lines} lines"

    return cut


@_touches("observations.artifacts")
def _artifacts(s: Snapshot, left: dict[str, str]) -> str:
    s.observations.artifacts.items = s.observations.artifacts.items[:3]
    return "artifacts but 3"


def _live_trees(s: Snapshot) -> set[int]:
    """The pids of what the running attempts started: their rows stay (alike workers fold
    into one row anyway)."""
    live = {i.pid for i in s.narrative.history if i.status in ("running", "started") and i.pid}
    return {p.pid for p in s.observations.processes.items if {p.pid, p.tree} & live}


@_touches("observations.processes")
def _tables(s: Snapshot, left: dict[str, str]) -> str:
    procs = s.observations.processes.items
    kept = _live_trees(s)
    roots = [p for p in procs if p.root or p.pid in kept]
    rest = sorted((p for p in procs if p not in roots), key=lambda p: -(p.cpu_percent or 0))
    s.observations.processes.items = roots + rest[: max(0, 8 - len(roots))]
    return "minor process rows"


def _older_narrative(keep: int) -> Step:
    @_touches("narrative.findings", "narrative.decisions", "narrative.notes")
    def cut(s: Snapshot, left: dict[str, str]) -> str:
        n = s.narrative
        n.findings, n.decisions, n.notes = n.findings[-keep:], n.decisions[-keep:], n.notes[-keep:]
        for entry in (*n.findings, *n.decisions):
            entry.text = redact.cut(entry.text, 400 if keep > 1 else 200)
        return f"findings, decisions and notes but the newest {keep}"

    return cut


@_touches("observations.processes")
def _workers_environments(s: Snapshot, left: dict[str, str]) -> str:
    """The environment of each tree's top stays: it is what the agent relaunches with."""
    for p in s.observations.processes.items:
        if not p.root:
            p.env = {}
    return "workers' environments"


@_touches(
    "observations.processes", "observations.artifacts", "observations.commands", "observations.logs"
)
def _observed(s: Snapshot, left: dict[str, str]) -> str:
    """Fewer rows, not empty sections: an emptied section would read "no log watched"."""
    o = s.observations
    kept = _live_trees(s)
    relaunched = any(p.relaunch for p in o.processes.items)
    o.processes.items = [p for p in o.processes.items if p.pid in kept] or [
        p for p in o.processes.items if p.root
    ][:3]
    for p in o.processes.items:
        p.relaunch = []
    o.artifacts.items, o.commands.items = o.artifacts.items[:1], o.commands.items[:3]
    o.logs.items = o.logs.items[-3:]
    return "relaunch blocks and minor rows" if relaunched else "minor rows"


@_touches("narrative.history")
def _shorter_rows(s: Snapshot, left: dict[str, str]) -> str:
    """An attempt's row keeps what it changed and its error, shortened."""
    for item in s.narrative.history:
        item.changed = redact.cut(item.changed, 240) if item.changed else item.changed
        item.error = redact.cut(item.error, 200) if item.error else item.error
    return "long attempt cells"


@_touches("observations.processes")
def _stack_frames(s: Snapshot, left: dict[str, str]) -> str:
    """A stuck tree's py-spy frames go; the job's own lines, with their text, stay."""
    for stack in s.observations.processes.stuck_stacks:
        if _shows_own_line(stack):
            stack.lines = []
    return "py-spy frames of stacks whose job's own lines are kept"


def _shows_own_line(stack: StuckStack) -> bool:
    """Whether the dump shows a line of the job's own code for this stack: a frame of it whose
    text could not be read (torchrun's own `<module> (torchrun:8)`) shows nothing."""
    return any(stack.source.values())


@_touches("observations.processes")
def _launcher_frames(s: Snapshot, left: dict[str, str]) -> str:
    """A stuck tree's top waiting in its library's own loop (torchrun's agent, a launcher's
    `Popen.wait`) keeps its innermost frame: the handover says where it waits, and the rest of
    its stack (its other threads, the frames that called the loop) says nothing of the hang."""
    for stack in s.observations.processes.stuck_stacks:
        if stack.tree in stack.pids and not _shows_own_line(stack) and len(stack.lines) > 2:
            stack.lines = stacks.threads(stack.lines)[:2]  # py-spy may list another first
    return "the launcher's stack below its innermost frame"


@_touches("observations.processes")
def _stacks_said(s: Snapshot, left: dict[str, str]) -> str:
    """A running attempt's stuck stacks go whole when the handover's line already says where
    each of its groups waits, the line's text and its function ("`time.sleep(0.5)` in
    wait_for_all_ranks at launch.py:23"): the callers below say less than a log line."""
    stacks = s.observations.processes.stuck_stacks
    said = set()
    for item in s.narrative.history:
        if item.status not in ("running", "started") or not item.pid:
            continue
        if ranks.apart(handover.tree(item, s), stacks, str(item.pid)):
            said.add(str(item.pid))
    s.observations.processes.stuck_stacks = [st for st in stacks if st.tree_ref not in said]
    return "the stuck stacks the handover's line gives"


@_touches("observations.processes")
def _kernel_stacks(s: Snapshot, left: dict[str, str]) -> str:
    """A stuck tree's kernel stacks go where its job's own lines stay, before any log line or
    command: each process row still says the kernel function it waits in, and a reader acts on
    a log line, never on the callers of that function."""
    for stack in s.observations.processes.stuck_stacks:
        if _shows_own_line(stack):
            stack.kernel = []
    return "kernel stacks below the function each process waits in"


@_touches("narrative.history")
def _failed_command(s: Snapshot, left: dict[str, str]) -> str:
    """The newest failure's whole line goes last: the running row says what it changed."""
    running = any(i.status in ("running", "started") for i in s.narrative.history)
    for item in s.narrative.history:
        if running and item.status not in ("running", "started"):
            item.command = None
    return "the newest failure's line"


@_touches("signals", "narrative.history")
def _shorter_lines(s: Snapshot, left: dict[str, str]) -> str:
    for signal in s.signals:  # a stuck tree's line says where its ranks wait: it stays whole
        signal.text = redact.cut(signal.text, 240) if signal.code != "stuck" else signal.text
    for item in s.narrative.history:
        item.outcome = redact.cut(item.outcome, 240) if item.outcome else item.outcome
    return "long lines"


# By value: what goes first is what a resuming agent misses least. The handover, every
# attempt's row, the running and the newest failed attempt's own command lines, what runs
# now with the environment of its top process and its stuck ranks, and the next steps are
# never cut.
SHRINK_STEPS: tuple[Step, ...] = (
    _host,
    _idle_gpus,
    _ended_logs,
    _said_in_handover,
    _changes,
    _launcher_frames,
    _kernel_stacks,
    _stacks_said,
    _stack_frames,
    _logs_to(10),
    _recent_commands(5),
    _read_before,
    _last_read_to(8),
    _artifacts,
    _logs_to(6),
    _logs_to(3),
    _tables,
    _older_narrative(5),
    _workers_environments,
    _logs_to(0),
    _last_read_to(0),
    _observed,
    _recent_commands(2),
    _older_narrative(1),
    _shorter_rows,
    _shorter_lines,
    _failed_command,
)


def for_model(
    snap: Snapshotter,
    snapshot: Snapshot,
    max_chars: int | None,
    served_at: datetime | None = None,
    *,
    in_place: bool = False,
) -> str:
    """The dump a model is handed: without ctxd's own chatter, cut by value, step by step,
    to `max_chars`, saying what it left out and the command that shows it all. `in_place`:
    the steps cut `snapshot` itself, one the caller read for this alone, instead of a copy."""
    # else a copy the steps cut, through its JSON as stored: a deep copy of the models cost twice
    copy = snapshot if in_place else Snapshot.model_validate_json(snapshot.model_dump_json())
    left: dict[str, str] = {}
    cuts: list[str] = []
    sid = copy.header.session
    reused = reuse.Sections()  # each cut renders again only the sections it changed
    markdown = snap.render(copy, for_model=True, served_at=served_at, reused=reused)
    if max_chars is None or len(markdown) <= max_chars:
        return markdown
    # the copy's JSON part by part: what tells a step that cut nothing, and what the
    # sections of each render are keyed by
    state = (reused.follow(copy), len(left))
    reused.keep()  # before any step cuts what its sections read
    told = handover.lines(snapshot)  # of the whole snapshot, no step ran: the cuts never shorten it
    shown = markdown
    for step in SHRINK_STEPS:
        said = step(copy, left)
        now = (reused.follow(copy, TOUCHES.get(step)), len(left))
        if now == state:  # a step that found nothing to cut is not named, nor rendered for
            continue
        state = now
        cut = snap.render(
            copy, for_model=True, left_out=left, served_at=served_at, handover=told, reused=reused
        )
        if cut == shown:  # it cut what the dump does not show (a worker's environment): unnamed
            continue
        shown = cut
        # a step that cuts further what an earlier one cut says so in its place
        family = said.split(" but ")[0].split(" beyond ")[0]
        cuts = [c for c in cuts if c.split(" but ")[0].split(" beyond ")[0] != family]
        cuts.append(said)
        whole = f"(all: `ctxd resume {sid}`)"
        note = f"> Kept under {max_chars} characters; left out: {', '.join(cuts)} {whole}.\n\n"
        # the note names the full dump: the footer line that does too goes
        markdown = _with_note(cut.rsplit(_FOOTER, 1)[0] + "\n", note)
        if len(markdown) <= max_chars:
            return markdown
    return render.fit(markdown, max_chars)


_FOOTER = "\n---\n_The full dump"


def _with_note(markdown: str, note: str) -> str:
    title, _, rest = markdown.partition("\n")
    return f"{title}\n\n{note}{rest.lstrip()}"


def unsaved(snap: Snapshotter, sid: str, max_chars: int | None) -> str:
    """The dump as a model is handed it, built now and not stored: what a continue gets while
    the data directory cannot be written (read-only at start), instead of nothing."""
    snapshot, _ = snap.preview(sid)
    budget = max_chars - len(_UNSAVED) if max_chars else None
    markdown = for_model(snap, snapshot, budget, in_place=True)  # a preview of its own
    return _with_note(markdown, _UNSAVED)


_UNSAVED = (
    "> Built now and not saved: ctxd's data directory cannot be written (read-only), so this"
    " dump is no version and the session's history stops at its last saved one.\n\n"
)


def resume_from_memory(
    snap: Snapshotter, sid: str, *, fresh: bool, max_chars: int | None, since: int | None
) -> str | None:
    """The latest stored dump when it is in memory and nothing needs computing: no I/O, so
    it can answer on the event loop; None means "ask `resume`". A budget asks for the dump as
    a model is handed it (`for_model`), which is computed."""
    if fresh or since is not None or max_chars is not None:
        return None
    return snap.latest_in_memory(sid)


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
    if since is None and max_chars is None:
        return snap.store.get_markdown(sid, version)
    snapshot = snap.store.get_snapshot(sid, version)
    lead = _changes_since(snap, sid, since, snapshot) if since and since != version else ""
    if max_chars is None:
        markdown = snap.store.get_markdown(sid, version)
    else:  # a budget is a model's: the dump as it is handed to one, rendered for it
        served = datetime.now(UTC)
        late = served - (snapshot.header.confirmed_at or snapshot.header.taken_at)
        budget = max(200, max_chars - len(lead))
        at = served if late > SERVED_LATE else None
        markdown = for_model(snap, snapshot, budget, at, in_place=True)  # read for this alone
    if lead:
        title, _, rest = markdown.partition("\n\n")
        markdown = f"{title}\n\n{lead}{rest}"
    return render.fit(markdown, max_chars)


def _changes_since(snap: Snapshotter, sid: str, since: int, snapshot: Snapshot) -> str:
    items = changes.compare(snap.store.get_snapshot(sid, since), snapshot)
    lines = [f"## Changes since v{since}", ""]
    lines += [f"- {render.cell(c.text)}" for c in items] or ["- nothing changed"]
    return "\n".join(lines) + "\n\n"


def message(snap: Snapshotter, sid: str, text: str, typed: str = "") -> str | None:
    """Any message is activity; an empty or blank one means "continue": returns a fresh dump.
    `typed`: the word a harness's prompt said it with ("continue"), kept as the message."""
    if text.strip():
        said = redact.text(text)  # a pasted token never reaches the db
        snap.store.touch(sid, message=said)
        snap.store.add_prompt(sid, said)
        return None
    snap.store.touch(sid)
    snap.store.add_prompt(sid, typed.strip())  # as typed ("continue"), or empty
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
