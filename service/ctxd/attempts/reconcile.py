"""Attempts reconciled with a harness's own word on the shells it runs in the background:
Claude Code's `Stop` and `SubagentStop` list its background tasks still in flight
(`background_tasks`: id, type, status "running" or "pending", command), and a background
call missing from that list has ended. ctxd binds an attempt to its process by what it sees
(`binding.py`); where it saw none, the harness knows better:

- a call the harness says is in flight, whose attempt ctxd ended unseen ("died within 1 s,
  its process gone before ctxd first scanned for it": never bound), runs: it is reopened and
  followed by the harness's word (seen, no process, no process watch, so no snapshot ends it)
  until that word changes;
- a background call no longer in flight, whose attempt has no process (not bound yet, or
  followed by the harness's word), has ended, at the moment the harness said so, with the
  error its log ended with. A call whose line sends something off itself (`nohup … &`) is not
  judged by its task: the shell's end is not its launch's;
- an attempt bound to a process is the kernel's to judge (its pidfd, its exit status), never
  the harness's.

The calls are the agent's background commands the harness reported (`background` and a tool
call id, in the session's actions); a task is matched to its call by its command line, as the
harness cuts it (1000 characters and a "… [+N chars]" marker). Claude Code lists no task that
ended, so an ended one's exit status stays unknown here.
"""

import re
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ctxd import redact
from ctxd.attempts.binding import LogFiles
from ctxd.attempts.model import Attempt, AttemptUpdate
from ctxd.collectors.logs import last_error
from ctxd.discovery.shellparse import parse_command
from ctxd.store.database import Store

LOOKED = 200  # the newest background calls and attempts compared (the actions' ring's size)
_CUT = re.compile(r"… \[\+\d+ chars\]\Z")  # how Claude Code marks a command it cut


def told(
    store: Store, sid: str, harness: str, in_flight: Sequence[str], at: datetime, files: LogFiles
) -> list[AttemptUpdate]:
    """What the harness's list of its background shells still in flight (`in_flight`: their
    command lines, as it sent them at `at`) changes of the session's attempts (read, not
    written: `save` writes them)."""
    calls = [
        call
        for call in store.list_actions(sid, "command", limit=LOOKED)
        if call.get("harness") == harness and call.get("background") and call.get("tool_id")
    ]
    if not calls:
        return []
    flying = calls_in_flight(calls, in_flight)
    ended = {str(call["tool_id"]) for call in calls} - flying
    updates = []
    for attempt in store.list_attempts(sid, limit=LOOKED):
        if attempt.tool_id is None or attempt.pid is not None:
            continue  # not a background call's, or bound to a process: the kernel's to judge
        if attempt.tool_id in flying and attempt.ended_at is not None and not attempt.seen:
            updates.append(_running(attempt))
        elif attempt.tool_id in ended and attempt.ended_at is None and _task_is_launch(attempt):
            updates.append(_ended(attempt, at, files))
    return updates


def save(store: Store, sid: str, updates: list[AttemptUpdate]) -> None:
    """Write what `told` found, holding the store as a snapshot's attempts are written."""
    if updates:
        with store.held():
            store.save_attempts(sid, updates)


def calls_in_flight(calls: list[dict[str, Any]], in_flight: Sequence[str]) -> set[str]:
    """The tool call ids of the calls in flight (`calls`: command actions as stored, oldest
    first): for each command line the harness lists n times, the newest n calls of that line."""
    wanted = Counter(redact.text(line) for line in in_flight if line)
    flying: set[str] = set()
    for call in reversed(calls):  # newest first
        command = str(call.get("command") or "")
        line = next((line for line, n in wanted.items() if n and _same(command, line)), None)
        if line is not None:
            wanted[line] -= 1
            flying.add(str(call["tool_id"]))
    return flying


def _same(command: str, told_line: str) -> bool:
    """Whether the harness's line is this command (its start, where the harness cut it)."""
    if command == told_line:
        return True
    cut = _CUT.search(told_line)
    return cut is not None and cut.start() > 0 and command.startswith(told_line[: cut.start()])


def _task_is_launch(attempt: Attempt) -> bool:
    """Whether the harness's task ends with the attempt's program: a line that sends nothing
    off itself (no `&`, `nohup`, `setsid`), run in the background by the harness."""
    return bool(attempt.command) and not parse_command(attempt.command or "").launches


def _running(attempt: Attempt) -> AttemptUpdate:
    """An attempt ctxd ended unseen that the harness says runs: open again, no error, seen by
    the harness (no process watch: a snapshot leaves it be; the harness's next word ends it)."""
    return AttemptUpdate(
        start_key=attempt.start_key,
        bound_from=attempt.start_key,  # written whole: `seen` is not a followed field
        seen=True,
        watch_id=None,
        ended_at=None,
        error=None,
        error_log=None,
        exit_status=None,
    )


def _ended(attempt: Attempt, at: datetime, files: LogFiles) -> AttemptUpdate:
    """An attempt whose background task ended, at `at` at the latest, with its log's error."""
    since = (attempt.started_at - timedelta(seconds=1)).timestamp()
    for path in attempt.logs:
        if error := last_error(path, files.roots, since, files.limits):
            return AttemptUpdate(start_key=attempt.start_key, ended_at=at, error=error,
                                 error_log=path)  # fmt: skip
    return AttemptUpdate(start_key=attempt.start_key, ended_at=at)
