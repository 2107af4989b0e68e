"""A Ray cluster's long and pending tasks as the dump says them: grouped, as a stuck job's
ranks are, by node and by where the job's own code waits (that line's text where the stack
gave it), so the one apart from its alike peers stands out; a task on another node says how
its stack is taken there."""

import re

from ctxd.fmt import human_duration
from ctxd.models import RayTask, StuckStack
from ctxd.signals import ranks

STACK_LINES = 4  # frames that tell two stacks apart when neither has a frame of the job's own


def _where(task: RayTask) -> str:
    """Where the job's own code waits ("`shard.read()` at job.py:22 (io read)"), else ""."""
    if not task.stack:
        return ""
    place = ranks.place(StuckStack(tree=0, lines=task.stack, source=task.source))
    return place.words(function=place.name != task.name) if place else ""  # a task's own: named


def _who(tasks: list[RayTask]) -> str:
    names = ", ".join(f"`{name}`" for name in dict.fromkeys(t.name for t in tasks))
    pids = ", ".join(str(t.pid) for t in tasks if t.pid)
    word = "task" if len(tasks) == 1 else "tasks"
    return f"{word} {names}" + (f" (pid{'s' if ',' in pids else ''} {pids})" if pids else "")


def _code(text: str) -> str:
    """Text as an inline code span, with more backticks around it than it holds in a row."""
    ticks = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{ticks}{text}{ticks}"


def lines(tasks: list[RayTask]) -> list[tuple[str, list[str]]]:
    """(line, stack lines) per group of tasks alike in node, state, where they wait (the
    job's frame, the kernel's wait) and, without a frame of their own, the top of their
    stack; the smaller groups (the odd ones) first, the stack shown once per group."""
    groups: dict[tuple, list[RayTask]] = {}
    for task in tasks:
        where = _where(task)
        key = (task.node_ip or "", task.state, where, task.waits_in, task.blocked_on,
               task.stack_note, () if where else tuple(task.stack[:STACK_LINES]))  # fmt: skip
        groups.setdefault(key, []).append(task)
    out: list[tuple[str, list[str]]] = []
    for (node, state, where, waits_in, blocked_on, note, _), members in sorted(
        groups.items(), key=lambda g: (g[0][0], g[0][1] != "RUNNING", len(g[1]))
    ):
        longest = max((t.running_s for t in members if t.running_s is not None), default=None)
        said = f"{node + ': ' if node else ''}{_who(members)} {state}"
        said += f" for {human_duration(longest)}" if longest is not None else ""
        verb = "waits" if len(members) == 1 else "wait"
        said += f", {verb} in {where}" if where else ""
        if waits_in:
            said += f"; in the kernel, {waits_in}"
            said += f" on {_code(blocked_on)}" if blocked_on else ""
        said += f": {note}" if note else ""
        out.append((said, members[0].stack))
    return out
