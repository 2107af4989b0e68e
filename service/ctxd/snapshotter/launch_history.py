"""Launches as attempts: each new root of a process watch, followed from snapshot to snapshot.

A launch starts when a snapshot first sees a root process of a process watch, and ends when
a later one no longer sees it (or saw it exit). It keeps its argv, cwd and environment (as
observed, so already redacted), whether its expected port ever opened and how long it sat
idle; the dump's Attempts merges launches with the agent's own journal attempts.
"""

import weakref
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from ctxd.discovery.launches import Launch, flag_diff, summary_line
from ctxd.fmt import human_duration
from ctxd.models import HistoryItem, JournalEntry, Observations, ProcessWatch, Watch
from ctxd.store.database import Store

COMMAND_CHARS = 400
LAUNCHES_SHOWN = 20
LAUNCHES_FOLDED = 500


def observed(store: Store, sid: str, watches: list[Watch], seen: Observations) -> list[dict]:
    """The launch rows this observation calls for (read, not written): new roots start one,
    vanished roots end theirs, running ones get their port state and idle time. The snapshot
    saves them once it is stored (`save`); a preview shows them without saving."""
    process_watches = {w.id: w for w in watches if isinstance(w.spec, ProcessWatch)}
    if not process_watches:
        return []
    items = seen.processes.items
    listening = {p.tree: set(p.listening) for p in items if p.listening}
    for p in items:
        if p.tree is not None and p.tree != p.pid:
            listening.setdefault(p.tree, set()).update(p.listening)
    open_ports = {port.port for port in seen.ports.items if port.listening}
    now = datetime.now(UTC)
    running = set()
    saves: list[dict] = []
    for p in items:
        watch = process_watches.get(p.watch_id)
        if not p.root or watch is None:
            continue
        assert isinstance(watch.spec, ProcessWatch)
        running.add(p.key)
        expected = list(watch.spec.expect_ports)
        ports = listening.get(p.pid, set()) | (open_ports & set(expected))
        saves.append(
            {
                "start_key": p.key,
                "watch_id": watch.id,
                "pid": p.pid,
                "started_at": p.started_at,
                "argv": p.argv,
                "cwd": p.cwd,
                "env": p.env,
                "expected_ports": expected,
                "port_opened": int(bool(set(expected) & ports)) if expected else None,
                "idle_s": p.idle_for_s,
            }
        )
    gone = {e.key: e.last_seen_at for e in seen.processes.exited if e.root}
    for launch in store.running_launches(sid):
        if launch["start_key"] in running:
            continue
        if launch["watch_id"] not in process_watches:
            continue  # its watch was removed: it is no longer followed, not "gone"
        ended = gone.get(launch["start_key"]) or now
        saves.append({"start_key": launch["start_key"], "ended_at": ended})
    return saves


def save(store: Store, sid: str, saves: list[dict]) -> None:
    """Write what `observed` found (after the snapshot that found it was stored)."""
    if saves:
        store.save_launches(sid, saves)


def history(
    store: Store, sid: str, attempts: list[JournalEntry], pending: Sequence[dict] = ()
) -> list[HistoryItem]:
    """Launches and journal attempts in one list, oldest first; `pending`: rows from
    `observed` not saved yet, shown as if they were."""
    # a crowd of alike launches folds into one line: fold the newest hundreds, show the 20
    launches = _with_pending(_recent(store, sid), pending)
    now = datetime.now(UTC)
    items: list[HistoryItem] = []
    previous: Launch | None = None
    for run in _runs(launches):
        first = _item(run[0], previous, now)
        items.append(first if len(run) == 1 else _folded(run, first, _item(run[-1], None, now)))
        previous = run[-1]
    return sorted([*map(_journal, attempts), *items[-LAUNCHES_SHOWN:]], key=lambda i: i.at)


# The newest launches of each session as read last, by store, with the stamp they were read at:
# a crowd's hundreds of launches cost a read and three JSON decodes each, every snapshot.
_Stamped = tuple[tuple[int, int], list[tuple[str, Launch]]]
_read: "weakref.WeakKeyDictionary[Store, dict[str, _Stamped]]" = weakref.WeakKeyDictionary()


def _recent(store: Store, sid: str) -> list[tuple[str, Launch]]:
    """The newest LAUNCHES_FOLDED launches by start key, oldest first; read again only once
    they changed."""
    stamp = store.launches_stamp(sid)
    of_store = _read.setdefault(store, {})
    kept = of_store.get(sid)
    if kept is not None and kept[0] == stamp:
        return kept[1]
    rows = store.list_launches(sid, limit=LAUNCHES_FOLDED)
    launches = [(row["start_key"], _launch(row)) for row in rows]
    of_store[sid] = (stamp, launches)
    return launches


def _with_pending(stored: list[tuple[str, Launch]], pending: Sequence[dict]) -> list[Launch]:
    """The stored launches with the unsaved rows of `observed` applied: new ones added, the
    others updated (ended, port opened, idle)."""
    if not pending:
        return [launch for _, launch in stored]
    by_key = dict(stored)
    for row in pending:
        key = row["start_key"]
        if key in by_key:
            current = by_key[key]
            opened = row.get("port_opened", current.port_opened)
            by_key[key] = replace(
                current,
                ended_at=row.get("ended_at", current.ended_at),
                port_opened=None if opened is None else bool(opened),
                idle_s=row.get("idle_s", current.idle_s),
            )
        elif "pid" in row:
            by_key[key] = _launch({**row, "started_at": str(row["started_at"])})
    return sorted(by_key.values(), key=lambda launch: launch.started_at)


def _runs(launches: list[Launch]) -> list[list[Launch]]:
    """Launches of one command line in a row, in one state (a crowd of alike processes, one
    program started again and again), each run a list."""
    runs: list[list[Launch]] = []
    for launch in launches:
        if runs and _alike(runs[-1][0], launch):
            runs[-1].append(launch)
        else:
            runs.append([launch])
    return runs


def _alike(a: Launch, b: Launch) -> bool:
    return (a.argv, a.ended_at is None, a.port_opened, a.expected_ports) == (
        b.argv, b.ended_at is None, b.port_opened, b.expected_ports,
    )  # fmt: skip


def _folded(run: list[Launch], first: HistoryItem, last: HistoryItem) -> HistoryItem:
    """A run as one line: "launched `sleep 60` 20 times (pids …)", with the newest's outcome."""
    pids = [launch.pid for launch in run]
    shown = ", ".join(map(str, pids[:3])) + (f", … {pids[-1]}" if len(pids) > 3 else "")
    program = _program(run[0])
    start, end = (f"{run[i].started_at:%H:%M:%S}" for i in (0, -1))
    when = f"at {start}" if start == end else f"from {start} to {end}"
    text = f"launched `{program}` {len(run)} times (pids {shown}) {when} UTC"
    return first.model_copy(update={"text": text, "outcome": last.outcome})


def _journal(entry: JournalEntry) -> HistoryItem:
    return HistoryItem(
        at=entry.created_at,
        source="journal",
        text=entry.text,
        status=entry.status,
        outcome=entry.outcome,
    )


def _launch(row: dict[str, Any]) -> Launch:
    ended = row.get("ended_at")
    return Launch(
        pid=row["pid"],
        argv=tuple(row["argv"]),
        started_at=datetime.fromisoformat(row["started_at"]),
        cwd=row.get("cwd"),
        env=row["env"],
        expected_ports=tuple(row["expected_ports"]),
        ended_at=datetime.fromisoformat(ended) if ended else None,
        port_opened=None if row.get("port_opened") is None else bool(row["port_opened"]),
        idle_s=row.get("idle_s"),
    )


def _program(launch: Launch) -> str:
    """How Attempts names a launch: its program's file name and first argument."""
    argv = launch.argv
    return " ".join([PurePosixPath(argv[0]).name, *argv[1:2]]) if argv else "?"


def _item(launch: Launch, previous: Launch | None, now: datetime) -> HistoryItem:
    program = _program(launch)
    text = f"launched `{program}` (pid {launch.pid}) at {launch.started_at:%H:%M:%S} UTC"
    notes = [launch.outcome(now)]
    if launch.ended_at is None:
        status = "running"
        if launch.idle_s is not None and launch.idle_s >= 10:
            notes.append(f"idle for {human_duration(launch.idle_s)}")
    else:
        status = "ended"
    ports = ", ".join(str(p) for p in launch.expected_ports)
    if launch.port_opened is False:
        notes.append(f"port {ports} {'never opened' if launch.ended_at else 'not open yet'}")
    elif launch.port_opened:
        notes.append(f"port {ports} opened")
    if previous is not None:
        diff = flag_diff(previous.argv, launch.argv, previous.env, launch.env)
        notes.append(summary_line(diff, program))
    command = " ".join(launch.argv)
    if len(command) > COMMAND_CHARS:
        command = command[:COMMAND_CHARS] + " …"
    return HistoryItem(
        at=launch.started_at,
        source="launch",
        text=text,
        status=status,
        outcome="; ".join(notes),
        command=command,
    )
