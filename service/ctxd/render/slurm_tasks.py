"""A running Slurm job's processes on its nodes, grouped by node and by where they wait, so
that the task apart from its alike peers (a rank blocked where the others poll) stands out."""

from ctxd.fmt import ranges
from ctxd.models import SlurmTask

STACK_LINES = 4  # frames shown of a group's stack: where it waits, and what called that


def _who(tasks: list[SlurmTask]) -> str:
    """ "ranks 0-2 (pids 41, 42, 43)", "rank 3 (pid 44)", or "pid 40 (`bash`)" for what has
    no rank (the batch script, srun)."""
    pids = ", ".join(str(t.pid) for t in tasks)
    ranked = [t.rank for t in tasks if t.rank is not None]
    if len(ranked) == len(tasks):
        word = "rank" if len(tasks) == 1 else "ranks"
        return f"{word} {ranges(sorted(ranked))} (pid{'s' if len(tasks) > 1 else ''} {pids})"
    names = ", ".join(sorted({t.name for t in tasks}))
    return f"pid{'s' if len(tasks) > 1 else ''} {pids} (`{names}`)"


def _where(task: SlurmTask) -> str:
    if task.state == "R" or task.busy_percent >= 1.0:
        return f"running ({task.busy_percent:g}% of a core)"
    where = f"in {task.waits_in}" if task.waits_in else f"asleep ({task.state})"
    return where + (f" on {task.blocked_on}" if task.blocked_on else "")


def lines(tasks: list[SlurmTask]) -> list[tuple[str, list[str]]]:
    """(line, stack lines) per group: a node's tasks alike in where they wait, and in the
    top of their Python stack, are one line; the smaller groups (the odd ones) first."""
    out: list[tuple[str, list[str]]] = []
    for node in sorted({t.node for t in tasks}):
        groups: dict[tuple[str, tuple[str, ...]], list[SlurmTask]] = {}
        for task in sorted(
            (t for t in tasks if t.node == node), key=lambda t: (t.rank or 0, t.pid)
        ):
            key = (_where(task), tuple(task.stack[:STACK_LINES]))
            groups.setdefault(key, []).append(task)
        ranked = sorted(
            groups.items(), key=lambda g: (all(t.rank is None for t in g[1]), len(g[1]))
        )
        for (where, stack), members in ranked:
            verb = (
                ""
                if where.startswith(("running", "asleep"))
                else "wait "
                if len(members) > 1
                else "waits "
            )
            out.append((f"{node}: {_who(members)} {verb}{where}", list(stack)))
    return out
