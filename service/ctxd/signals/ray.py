"""The signals read from Ray clusters: an actor dead or restarting, one pending on resources the
cluster does not have free, a node lost, a task running past the stuck threshold."""

from ctxd.fmt import human_duration
from ctxd.models import Observations, RayActor, RayInfo, Signal


def _amounts(resources: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in resources.items() if k != "memory") or "nothing"


def _pending(actor: RayActor, cluster: RayInfo) -> str:
    short = {k: v for k, v in actor.asks.items() if k != "memory" and v > cluster.free.get(k, 0.0)}
    lacks = f"; the cluster has free {_amounts({k: cluster.free.get(k, 0.0) for k in short})}"
    return f"ray actor `{actor.name}` ({actor.class_name}) pending: asks {_amounts(actor.asks)}" + (
        lacks if short else ""
    )


def ray_clusters(current: Observations) -> list[Signal]:
    signals = []
    for cluster in current.ray.items:
        for node in cluster.nodes:
            if node.state == "DEAD":
                which = f"{node.ip} ({node.node_id}{', the head' if node.head else ''})"
                text = f"ray node {which if node.ip else node.node_id} is DEAD ({cluster.url})"
                signals.append(Signal(severity="critical", code="ray_node_dead",
                                      subject=node.node_id, text=text))  # fmt: skip
        for actor in cluster.actors:
            subject = f"{cluster.url} {actor.name}"
            if actor.state == "DEAD":
                why = f": {actor.died_of}" if actor.died_of else ""
                text = f"ray actor `{actor.name}` ({actor.class_name}) died{why}"
                signals.append(Signal(severity="critical", code="ray_actor_dead",
                                      subject=subject, text=text))  # fmt: skip
            elif actor.state == "RESTARTING":
                # Ray counts the restart under way in num_restarts already
                which = f" (restart {actor.restarts})" if actor.restarts else ""
                text = f"ray actor `{actor.name}` is restarting{which}"
                signals.append(Signal(severity="warning", code="ray_actor_restarting",
                                      subject=subject, text=text))  # fmt: skip
            elif actor.state == "PENDING_CREATION":
                signals.append(Signal(severity="warning", code="ray_actor_pending",
                                      subject=subject, text=_pending(actor, cluster)))  # fmt: skip
        for task in cluster.tasks:
            if task.state == "RUNNING" and task.running_s is not None:
                where = f" (pid {task.pid})" if task.pid else ""
                text = (f"ray task `{task.name}`{where} running for "
                        f"{human_duration(task.running_s)}")  # fmt: skip
                signals.append(Signal(severity="warning", code="ray_task_long",
                                      subject=f"{cluster.url} {task.name}", text=text))  # fmt: skip
    return signals
