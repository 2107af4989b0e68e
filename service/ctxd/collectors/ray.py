"""A Ray cluster as its dashboard's state API tells it: nodes, actors by state, long tasks.

One GET each of `/api/v0/nodes`, `/api/v0/actors`, `/api/v0/tasks` and
`/api/v0/placement_groups` (`detail=1`), on the dashboard the watch names, or, for the address
"auto", the one found as Ray finds its cluster (`_ray_address`: RAY_ADDRESS, the current
cluster file, the default), found again at each look; a loopback URL unless
CTXD_ALLOW_REMOTE_HEALTH allows others, as for health URLs. An actor that died keeps
the last line of its death cause (the exception); one pending says what it asked for, and the
cluster's free resources are beside it; a task running past the stuck threshold is listed
with its worker's pid and node and, when that worker runs on this machine, its Python stack
(py-spy) with the text of its own frames' lines, taken at snapshots, not at the watcher's
probes.
"""

import time
from datetime import UTC, datetime
from typing import Any

import httpx
import psutil

from ctxd import confine, redact
from ctxd.collectors import CollectContext, _ray_address, per_watch
from ctxd.collectors.ports import is_loopback
from ctxd.collectors.proc import procfs, pystacks
from ctxd.models import (
    RayActor,
    RayInfo,
    RayNode,
    RaySection,
    RayTask,
    RayWatch,
    Watch,
)

NAME = "ray"
SECTION = RaySection
KIND = "ray"
RETIRES = False
TIMEOUT_S = 3.0
LIMIT = 1000  # rows asked of each list
ACTORS_MAX = 200  # actors kept per watch (the odd ones first)
TASKS_MAX = 20
# The states an actor is in when something is wrong or not yet right: shown first.
ODD_FIRST = {"DEAD": 0, "RESTARTING": 1, "PENDING_CREATION": 2, "DEPENDENCIES_UNREADY": 3}
SHOWN_RESOURCES = ("CPU", "GPU", "memory")


def collect(watches: list[Watch], ctx: CollectContext) -> RaySection:
    def observe(watch: Watch) -> list[RayInfo]:
        assert isinstance(watch.spec, RayWatch)
        return [describe(watch.id, watch.spec, ctx)]

    items, unavailable = per_watch(watches, RayWatch, observe, target)
    return RaySection(items=items, unavailable=unavailable)


class Unreachable(Exception):
    """The dashboard "auto" found did not answer: what was looked at, and what failed."""


def target(watch: Watch) -> str:
    spec = watch.spec
    if not isinstance(spec, RayWatch):
        return NAME
    return f"ray cluster at {f'address {spec.address}' if spec.address else spec.url}"


def _listed(client: httpx.Client, what: str, job: str | None = None) -> list[dict[str, Any]]:
    params = {"detail": "1", "limit": str(LIMIT)}
    if job:
        params |= {"filter_keys": "job_id", "filter_predicates": "=", "filter_values": job}
    answer = client.get(f"/api/v0/{what}", params=params)
    answer.raise_for_status()
    result = answer.json().get("data", {}).get("result", {}).get("result", [])
    return [row for row in result if isinstance(row, dict)]


def describe(watch_id: int, spec: RayWatch, ctx: CollectContext) -> RayInfo:
    found = _ray_address.find() if spec.address == "auto" else None
    url = found.url if found else spec.url
    if not ctx.settings.allow_remote_health and not is_loopback(url):
        why = f" ({found.how})" if found else ""
        allow = "set CTXD_ALLOW_REMOTE_HEALTH=true"
        raise PermissionError(f"{url} is not a loopback URL{why} ({allow})")
    try:
        # trust_env=False: an HTTP(S)_PROXY meant for the internet must not intercept the cluster
        with httpx.Client(base_url=url, timeout=TIMEOUT_S, trust_env=False) as client:
            nodes = _listed(client, "nodes")
            actors = _listed(client, "actors", spec.job)
            tasks = [] if ctx.probe else _listed(client, "tasks", spec.job)
            groups = [] if ctx.probe else _listed(client, "placement_groups")
    except httpx.HTTPError as exc:
        if found is None:
            raise
        raise Unreachable(f"{found.how}: {type(exc).__name__}: {exc}") from exc
    ips = {n.get("node_id"): n.get("node_ip") for n in nodes}
    shown = [a for a in actors if not spec.actors or spec.actors in (a.get("name") or "")]
    kept = sorted(shown, key=lambda a: (ODD_FIRST.get(a.get("state", ""), 9), a.get("name") or ""))
    return RayInfo(
        watch_id=watch_id,
        url=url,
        address=spec.address,
        found=found.how if found else None,
        job=spec.job,
        nodes=[_node(n) for n in nodes],
        actors=[_actor(a, ips) for a in kept[:ACTORS_MAX]],
        actors_total=len(shown),
        tasks=_long_tasks(tasks, ips, ctx),
        free=_free(nodes, actors),
        placement_groups_pending=[
            g.get("name") or str(g.get("placement_group_id", ""))[:8]
            for g in groups
            if g.get("state") in ("PENDING", "RESCHEDULING")
        ],
    )


def _resources(raw: Any) -> dict[str, float]:
    """CPU, GPU and memory of a resource map, in that order (Ray's own order varies)."""
    if not isinstance(raw, dict):
        return {}
    return {
        k: float(raw[k])
        for k in SHOWN_RESOURCES
        if isinstance(raw.get(k), int | float) and not isinstance(raw.get(k), bool)
    }


def _node(raw: dict[str, Any]) -> RayNode:
    return RayNode(
        node_id=str(raw.get("node_id", ""))[:8],
        ip=str(raw.get("node_ip") or ""),
        state=str(raw.get("state") or ""),
        head=raw.get("is_head_node") is True,
        resources=_resources(raw.get("resources_total")),
    )


def _died_of(cause: Any) -> str | None:
    """The last line of an actor's death cause: the exception it died of, or Ray's reason."""
    if not isinstance(cause, dict):
        return None
    for context in cause.values():
        if not isinstance(context, dict):
            continue
        text = context.get("formatted_exception_string") or context.get("error_message") or ""
        lines = [x.strip() for x in str(text).splitlines() if x.strip()]
        if lines:
            return redact.cut(lines[-1], 300, "…")
    return None


def _actor(raw: dict[str, Any], ips: dict[Any, Any]) -> RayActor:
    pid = raw.get("pid")
    return RayActor(
        name=str(raw.get("name") or raw.get("class_name") or ""),
        class_name=str(raw.get("class_name") or ""),
        state=str(raw.get("state") or ""),
        pid=pid if isinstance(pid, int) and pid > 0 else None,
        node_ip=ips.get(raw.get("node_id")),
        asks=_resources(raw.get("required_resources")),
        died_of=_died_of(raw.get("death_cause")),
        restarts=int(raw.get("num_restarts") or 0),
    )


def _free(nodes: list[dict[str, Any]], actors: list[dict[str, Any]]) -> dict[str, float]:
    """What the ALIVE nodes hold, less what ALIVE actors asked for: beside a pending actor's
    ask, the reason it waits."""
    free: dict[str, float] = {}
    for node in nodes:
        if node.get("state") == "ALIVE":
            for key, value in _resources(node.get("resources_total")).items():
                free[key] = free.get(key, 0.0) + value
    for actor in actors:
        if actor.get("state") == "ALIVE":
            for key, value in _resources(actor.get("required_resources")).items():
                free[key] = free.get(key, 0.0) - value
    return {k: max(0.0, v) for k, v in free.items() if k != "memory"}


def _local_ips() -> set[str]:
    """This machine's addresses: a worker on a node with one of them runs here."""
    found = {"127.0.0.1", "::1"}
    for addresses in psutil.net_if_addrs().values():
        found.update(a.address for a in addresses)
    return found


def _long_tasks(
    tasks: list[dict[str, Any]], ips: dict[Any, Any], ctx: CollectContext
) -> list[RayTask]:
    """Tasks running past the stuck threshold (with the stack of a worker on this machine),
    then pending ones."""
    now = time.time()
    found: list[tuple[RayTask, Any]] = []
    for raw in tasks:
        state = str(raw.get("state") or "")
        started = raw.get("start_time_ms")
        running = now - started / 1000 if isinstance(started, int | float) and started else None
        long = state == "RUNNING" and running is not None and running >= ctx.settings.stuck_after_s
        if not long and not state.startswith("PENDING"):
            continue
        pid = raw.get("worker_pid")
        task = RayTask(
            name=str(raw.get("name") or raw.get("func_or_class_name") or ""),
            state=state,
            pid=pid if isinstance(pid, int) and pid > 0 else None,
            started_at=datetime.fromtimestamp(now - running, UTC) if long and running else None,
            running_s=running if long else None,
            node_ip=ips.get(raw.get("node_id")),
        )
        found.append((task, task.node_ip))
    found.sort(key=lambda pair: (pair[0].state != "RUNNING", -(pair[0].running_s or 0)))
    found = found[:TASKS_MAX]
    here = _local_ips()
    local = [t.pid for t, ip in found if t.pid and t.state == "RUNNING" and ip in here]
    for task, ip in found:
        if task.pid and task.running_s is not None and ip and ip not in here:
            task.stack_note = (f"stacks on node {ip} are taken there: `py-spy dump --pid PID` "
                               "(ctxd takes them on this machine only)")  # fmt: skip
    if local and not ctx.probe:
        taken = pystacks.take(local, pystacks.BUDGET_S, pystacks.py_spy())
        budget = [pystacks.SOURCE_FILES_MAX]
        for task, _ in found:
            if task.pid in taken:
                got = taken[task.pid]
                task.stack, task.stack_note = list(got.lines), got.note
                task.waits_in, task.blocked_on = procfs.waiting(task.pid)
                roots = confine.roots_of_run(ctx)
                task.source = pystacks.source_lines(got.own, _cwd(task.pid), roots, budget)
    return [task for task, _ in found]


def _cwd(pid: int) -> str | None:
    try:
        return psutil.Process(pid).cwd()
    except psutil.Error:
        return None
