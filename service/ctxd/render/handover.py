"""The dump's opening handover: what a resuming agent reads first, a fact with its time a line.

Written the way an agent hands its own work over before its context goes: the objective, what
the user last asked, each live attempt in a sentence (its phase, its port, its workers against
those its flags ask for, its log's last line), the last failure with its error line, what the
agent itself last said (after the state, dated against what ctxd found since), and what
changed since the version before. Pure: a snapshot in, Markdown list items out; every age in it
is measured at the instant the snapshot was taken.
"""

import re
from datetime import datetime, timedelta

from ctxd.fmt import between, human_duration, log_name, ranges
from ctxd.harness.policy import is_continue
from ctxd.models import Change, GpuInfo, HistoryItem, ProcessInfo, Signal, Snapshot
from ctxd.signals import derive, ranks
from ctxd.signals.attempts import phase

# The user's earlier prompts quoted after the latest, and how much of each.
EARLIER_MESSAGES = 3
MESSAGE_CHARS = 300
AGENT_SAID_CHARS = 700
CHANGES_SHOWN = 4
CHANGE_CHARS = 160
# A dump taken as a conversation resumes comes before the message that resumed it.
RESUMED = (
    "not in this dump: ctxd took it as the conversation resumed, before the message that"
    " resumed it arrived (read that one beside this dump)"
)
# A message this close to the dump's instant is the one that asked for it (a "continue").
ASKED_WITHIN_S = 2.0
RANKS_SAID_CHARS = 40  # a shorter run of words in common is no rank line
# Flags that say how many worker processes a launch makes (tensor parallel, torchrun).
_WORKERS = re.compile(
    r"(?:^|\s)--(?:tp|tp-size|tensor-parallel-size|nproc-per-node|nproc_per_node|num-gpus)"
    r"(?:=|\s+)(\d+)"
)


def lines(s: Snapshot) -> list[str]:
    """The handover's items, in the order a reader needs them."""
    at = s.header.taken_at
    n = s.narrative
    out = [_objective(s)]
    if n.dormant_since is not None:
        out.append(f"**Not watched from {n.dormant_since:%Y-%m-%d %H:%M:%S} UTC to this dump**"
                   " (dormant: no activity, nothing alive): what happened meanwhile was not seen"
                   " as it happened")  # fmt: skip
    out += _user(s)
    attempt_items = [i for i in n.history if i.source == "launch" and i.label]
    for item in attempt_items:
        if item.status in ("running", "started"):
            out.append(_live(item, s, at))
    failed = _newest_failure(s)
    if failed is not None:
        running = any(i.status in ("running", "started") and i.at > failed.at
                      for i in attempt_items)  # fmt: skip
        out.append(_failure(failed, running))
    elif attempt_items and not any(i.status in ("running", "started") for i in attempt_items):
        last = attempt_items[-1]
        out.append(f"**Nothing runs**: the last attempt, {last.label}, {last.ran or 'ended'}.")
    if n.agent_said is not None and n.agent_said.text.strip():
        out.append(_agent_said(s, n.agent_said.at, n.agent_said.text))
    if n.wakes:  # the news it was told unasked: the turn it started may be what was lost
        woke = n.wakes[-1]
        out.append(f"**News ctxd sent to wake you** ({_clock(woke.at)}): {woke.text}")
    if s.header.previous_version and _news(s):  # "nothing changed" would tell nothing
        out.append(_since(s))
    return out


def told(s: Snapshot) -> set[str]:
    """The keys of the signals the handover says already: each live attempt's line, the
    newest failure's, and the idle GPUs when every one of their holders is a live attempt's
    (its line gives them, by size); Now leaves them out."""
    failed = _newest_failure(s)
    newest = {f"attempt_failed:{failed.label}"} if failed is not None else set()
    live = set()
    for item in s.narrative.history:
        if item.source == "launch" and item.label and item.status in ("running", "started"):
            live |= _pids(item, s)
    gpus = {
        sig.key
        for sig in s.signals
        if sig.code == "gpu_held_idle"
        and all(p.pid in live for g in s.observations.gpus.items for p in g.processes)
    }
    return newest | gpus | {sig.key for sig in s.signals if sig.code == "attempt_running"}


def in_now(signal: Signal, told: list[str]) -> str:
    """A signal as Now says it, `told`: the handover's lines. A stuck tree's line leaves out
    where its ranks wait when the handover's line of its attempt says that word for word."""
    if signal.code != "stuck":
        return signal.text
    running = [line for line in told if line.startswith("**Running now**")]
    parts = signal.text.split("; ")
    said = 1  # the parts after the verdict that a running attempt's line has, in a row
    while said < len(parts) and any("; ".join(parts[1 : said + 1]) in line for line in running):
        said += 1
    if said == 1 or len("; ".join(parts[1:said])) < RANKS_SAID_CHARS:
        text = signal.text
    else:
        text = "; ".join([parts[0], "where each waits: as the handover says", *parts[said:]])

    def quoted(last: re.Match[str]) -> str:  # the running attempt's line quotes it already
        return "" if any(last[1].rstrip("…") in line for line in running) else last[0]

    return _LAST_LINE.sub(quoted, text)


_LAST_LINE = re.compile(r", last line: “([^”]*)”")


def _newest_failure(s: Snapshot) -> HistoryItem | None:
    failed = [
        i
        for i in s.narrative.history
        if i.source == "launch" and i.label and i.error and i.status != "running"
    ]
    return failed[-1] if failed else None


def _objective(s: Snapshot) -> str:
    n = s.narrative
    if not n.objective:
        return "**Objective**: none recorded yet."
    asked = next((m.at for m in n.user_messages if m.text == n.objective), None)
    when = [n.objective_source or "", _clock(asked) if asked is not None else ""]
    source = f" ({', '.join(w for w in when if w)})" if any(when) else ""
    return f"**Objective**{source}: {_quote(n.objective, 1200)}"


def _user(s: Snapshot) -> list[str]:
    n = s.narrative
    said = n.user_messages
    if not said:
        if n.latest_message and n.latest_message != n.objective:
            return [f"**The user's latest message**: {_quote(n.latest_message, MESSAGE_CHARS)}"]
        return []
    latest = said[-1]
    if len(said) == 1 and latest.text == n.objective:  # the objective quotes it already
        if s.header.trigger == "resume":
            return [f"**The user's latest message**: {RESUMED}; before it, the user's only"
                    f" message was the objective ({_clock(latest.at)})"]  # fmt: skip
        return [f"**The user's latest message**: the objective ({_clock(latest.at)});"
                " nothing since"]  # fmt: skip
    if not latest.text.strip():
        words = "empty: go on where you left off"
    elif is_continue(latest.text):
        words = f"{_quote(latest.text, MESSAGE_CHARS)}: go on where you left off"
    else:
        words = _quote(latest.text, MESSAGE_CHARS)
    when = _clock(latest.at)
    if abs((s.header.taken_at - latest.at).total_seconds()) <= ASKED_WITHIN_S:
        when += ", the one this dump was taken for"  # not a coincidence of clocks
    out = [f"**The user's latest message** ({when}): {words}"]
    earlier = [m for m in said[:-1] if not is_continue(m.text) and m.text != n.objective]
    if earlier:
        shown = "; ".join(
            f"{_clock(m.at)} {_quote(m.text, MESSAGE_CHARS)}" for m in earlier[-EARLIER_MESSAGES:]
        )
        out.append(f"**Before it, the user said**: {shown}")
    return out


def _live(item: HistoryItem, s: Snapshot, at: datetime) -> str:
    members = tree(item, s)
    ago = f", {between(item.at, at)} before this dump"
    pid = f" (pid {item.pid})" if item.pid else ""
    now = phase(item, s.signals, s.observations, at)
    where = ranks.apart(members, s.observations.processes.stuck_stacks, str(item.pid))
    words = [f"**Running now**: {item.label}, {_program(item)}{pid}, launched "
             f"{_clock(item.at)}{ago}: **{now}**"]  # fmt: skip
    if item.ports:
        ports = ", ".join(map(str, item.ports))
        closed = "not open" if now == "stuck" else "not open yet"
        words.append(f"port {ports} {'open' + _health(item, s) if item.port_open else closed}")
    if now == "serving" and (early := _younger_than_failures(item, s.narrative.history, at)):
        words.append(early)
    expected = _WORKERS.search(" " + (item.command or ""))
    rows = [p for p in members if not p.root and p.state != "zombie"]
    grouped = sum(g.count for g in s.observations.processes.workers if g.tree == item.pid)
    workers = max(len(rows), grouped)
    if expected:
        flag = expected.group(0).strip().replace("=", " ")
        words.append(f"{expected.group(1)} workers expected ({flag}), {workers} alive")
    elif workers:
        words.append(f"{workers} child process{'es' if workers > 1 else ''}")
    pids = _pids(item, s)
    gpus = [g for g in s.observations.gpus.items if any(p.pid in pids for p in g.processes)]
    if gpus:
        busy = "/".join(sorted({f"{g.utilization_percent:.0f}%" for g in gpus
                                if g.utilization_percent is not None})) or "?"  # fmt: skip
        plural = "s" if len(gpus) > 1 else ""
        words.append(f"it holds {len(gpus)}{_gpu_kind(gpus)} GPU{plural} ({_gpu_sizes(gpus)})"
                     f" at {busy} utilisation")  # fmt: skip
    if now == "stuck" and where:
        words.append(where[0])
    last = _log_line(item, s, pids)
    if last:
        words.append(f"{item.label}'s log says last: {last}")  # not the launcher's words
    return "; ".join(words) + "."


def _health(item: HistoryItem, s: Snapshot) -> str:
    """What an open port's "serving" rests on: its health URL's answer, or that none was
    asked (readers took "serving" for a verified server)."""
    asked = [p for p in s.observations.ports.items if p.port in item.ports and p.url]
    if not asked:
        return " (listening; no health URL watched: ctxd sent it no request)"
    said = [f"{p.url} answered HTTP {p.health_status}{_body(p.health_body)}"
            if p.health_status is not None
            else f"{p.url}: {p.health_error or 'no answer'}" for p in asked]  # fmt: skip
    return f" (ctxd asked its health URL as it took this dump: {'; '.join(said)})"


def _body(body: str | None) -> str:
    """The start of a health answer, quoted when it is one short line."""
    text = (body or "").strip()
    return f" “{text}”" if text and len(text) <= 60 and "\n" not in text else ""


def _agent_said(s: Snapshot, at: datetime, text: str) -> str:
    """The agent's own last reply, after the state it describes, dated by how old the live
    attempt was then and by what ctxd found since: where the agent was, not how things are."""
    when = [_clock(at)]
    live = [i for i in s.narrative.history
            if i.source == "launch" and i.label and i.status in ("running", "started")
            and i.at <= at]  # fmt: skip
    if live:  # "loading" said of a launch 3 s old reads as what it was then, not now
        when.append(f"when {live[-1].label} was {between(live[-1].at, at)} old")
    if since := _since_said(s, at):
        when.append(f"before {since}")
    when.append(f"{between(at, s.header.taken_at)} before this dump")
    return f"**Your last words** ({'; '.join(when)}): {_quote(text, AGENT_SAID_CHARS)}"


def _since_said(s: Snapshot, said_at: datetime) -> str:
    """ "attempt 2 was found stuck": what ctxd saw after the agent's last words that those
    words could not know (a reader takes "the server is loading" above a stuck verdict for a
    contradiction, when it is only older); "" when nothing was. Not "found serving": a port
    may have opened before the words, and ctxd knows only when a look found it open."""
    at = s.header.taken_at
    news = []
    for item in s.narrative.history:
        if item.source != "launch" or not item.label:
            continue
        if item.status in ("running", "started"):
            now = phase(item, s.signals, s.observations, at)
            if now == "stuck":
                news.append(f"{item.label} was found stuck")
        elif (
            item.error
            and item.lived_s is not None
            and item.at + timedelta(seconds=item.lived_s) > said_at
        ):
            news.append(f"{item.label} died")
    return " and ".join(news)


def _younger_than_failures(item: HistoryItem, history: list[HistoryItem], at: datetime) -> str:
    """ "not yet as old as attempt 199 was when it died (2 s)": a port open a second after
    the launch, where the failure before it died seconds in, is no proof the run is up."""
    died = [i for i in history if i.error and i.lived_s is not None and i.at < item.at]
    if not died or died[-1].lived_s is None or (at - item.at).total_seconds() > died[-1].lived_s:
        return ""
    return (
        f"not yet as old as {died[-1].label} was when it died ({human_duration(died[-1].lived_s)})"
    )


def _failure(item: HistoryItem, running: bool) -> str:
    where = f" (in {log_name(item.error_log, item.cwd)})" if item.error_log else ""
    ran = item.ran or "ended"
    label = item.label if item.status != "folded" else f"{item.label} (the newest of them)"
    head = "**Last attempt that died, before what runs now**" if running else "**Last failure**"
    return f"{head}: {label}, launched {_clock(item.at)}, {ran}: `{item.error}`{where}."


def _gpu_kind(gpus: list[GpuInfo]) -> str:
    """ " NVIDIA H200": what the GPUs are, when they are all of one kind (a reader judges the
    memory held by the card). Not its size: the driver's total and the one a CUDA error names
    differ by what the driver keeps, and two figures for one card read as a contradiction."""
    names = {g.name for g in gpus}
    return f" {names.pop()}" if len(names) == 1 and None not in names else ""


def _gpu_sizes(gpus: list[GpuInfo]) -> str:
    """ "0-2, 4-7: 118.8 GiB each; 3: 1.1 GiB" (en dashes): the GPUs by the memory each
    holds, as Now's warning folds them, so an odd one (a rank still loading) is not hidden."""
    return "; ".join(
        f"{ranges([g.index for g in group])}: {size}{' each' if len(group) > 1 else ''}"
        for size, group in derive.by_size(gpus)
    )


def _since(s: Snapshot) -> str:
    head = f"**Since v{s.header.previous_version}**"
    if s.header.previous_taken_at:
        head += f" (taken {_clock(s.header.previous_taken_at)})"
    news = _news(s)
    shown = "; ".join(_quote(c.text, CHANGE_CHARS)[1:-1] for c in news[:CHANGES_SHOWN])
    more = len(news) - CHANGES_SHOWN
    return f"{head}: {shown}" + (f"; and {more} more (under Changes)." if more > 0 else ".")


def _news(s: Snapshot) -> list[Change]:
    """The changes that say something happened; signals raised or cleared are Now's to say, and
    a log that grew says nothing its last line (in the running attempt's sentence) does not."""
    return [c for c in s.changes if c.kind not in ("signal_raised", "signal_cleared", "log_grew")]


def _pids(item: HistoryItem, s: Snapshot) -> set[int]:
    """The pids of an attempt's tree, its folded workers' included."""
    workers = s.observations.processes.workers
    return {p.pid for p in tree(item, s)} | {
        pid for g in workers if g.tree == item.pid for pid in g.pids
    }


def tree(item: HistoryItem, s: Snapshot) -> list[ProcessInfo]:
    """The process rows of an attempt's tree: its top and those below it."""
    if not item.pid:
        return []
    return [p for p in s.observations.processes.items if item.pid in (p.pid, p.tree)]


def _log_line(item: HistoryItem, s: Snapshot, pids: set[int]) -> str:
    own = [log for log in s.observations.logs.items if log.writer_pid in pids and log.lines]
    if not own:
        own = [log for log in s.observations.logs.items if log.path in item.logs and log.lines]
    if not own:
        return ""
    log = own[0]
    said = f"{_quote(log.lines[-1].strip(), 200)} ({log.path.rsplit('/', 1)[-1]})"
    warned = [line for line in log.lines[:-1] if _WARNED.search(line)]
    if warned and not _WARNED.search(log.lines[-1]):  # the line a reader looks for, kept whole
        said += f"; its newest warning, earlier in the log: {_quote(warned[-1].strip(), 240)}"
    return said


# A log line that says something went wrong: the one a reader scans a tail for.
_WARNED = re.compile(
    r"\b(?:WARN(?:ING)?|ERROR|FATAL|CRITICAL|Traceback|[A-Z]\w*(?:Error|Exception))\b"
    r"|\b(?:404 Not Found|[Cc]onnection refused|timed out|gave up)\b"
)


def _program(item: HistoryItem) -> str:
    """`python3 serve.py`: the attempt's program as its row names it."""
    program = item.program()
    return f"`{program}`" if program is not None else item.text


def _quote(text: str, limit: int) -> str:
    one = " ".join(text.split())
    if len(one) > 1 and one[0] == one[-1] and one[0] in "\"'":
        one = one[1:-1]  # already quoted where it was typed: one pair of marks is enough
    if len(one) > limit:
        one = one[: limit - 1] + "…"
    return f"“{one}”"


def _clock(at: datetime) -> str:
    return f"{at:%H:%M:%S}"
