"""Which watches belong to which host, and a peer's observations merged into this host's.

Pure: no I/O. A remote item keeps its fields and gains `host`; what the dump and the signals
print of it (process name, log or artifact path, command label, port address, GPU name) reads
`node2:…`, so every line about it names its host without a change to any template or signal.
"""

from pydantic import BaseModel

from ctxd import fmt
from ctxd.collectors import kinds
from ctxd.models import Observations, PortWatch, Unavailable, Watch

# the section each kind of watch is observed in (its collector's NAME)
SECTION_OF_KIND = {kind: collector.NAME for kind, collector in kinds().items()}


def host_of(watch: Watch, peers: set[str]) -> str | None:
    """The peer a watch is collected on, None for this host.

    A port watch's `host` is an address unless it names a peer (then the port is probed on
    that peer's loopback); any other kind's `host` is always a peer's name.
    """
    host = getattr(watch.spec, "host", None)
    if isinstance(watch.spec, PortWatch):
        return host if host in peers else None
    return host


def split(watches: list[Watch], peers: set[str]) -> tuple[list[Watch], dict[str, list[Watch]]]:
    """(this host's watches, each peer's watches as the peer must see them)."""
    local: list[Watch] = []
    remote: dict[str, list[Watch]] = {}
    for watch in watches:
        host = host_of(watch, peers)
        if host is None:
            local.append(watch)
        else:
            remote.setdefault(host, []).append(for_peer(watch))
    return local, remote


def for_peer(watch: Watch) -> Watch:
    """The watch as its peer collects it: on its own host (a port on its loopback)."""
    host = "127.0.0.1" if isinstance(watch.spec, PortWatch) else None
    spec = watch.spec.model_copy(update={"host": host})
    return watch.model_copy(update={"spec": spec})


def describe(watch: Watch) -> str:
    """ "log /tmp/x.log": what a watch looks at, for an unavailable line."""
    return fmt.watch_target(watch.spec.model_dump())


def add_unavailable(into: Observations, watch: Watch, line: Unavailable) -> None:
    """`line` in the section `watch` is observed in."""
    section = getattr(into, SECTION_OF_KIND.get(watch.spec.kind, ""), None)
    if section is not None and hasattr(section, "unavailable"):
        section.unavailable.append(line)


def merge_failure(
    into: Observations, host: str, watches: list[Watch], reason: str, gpus: bool = True
) -> None:
    """A peer without an answer: one unavailable line per watch, in that watch's section, and,
    when its GPUs were asked for (`gpus`), one for them, which are otherwise silently missing."""
    target = f"host {host}"
    for watch in watches:
        line = Unavailable(watch_id=watch.id, target=target, reason=f"{describe(watch)}: {reason}")
        add_unavailable(into, watch, line)
    if gpus:
        into.gpus.unavailable.append(Unavailable(target=target, reason=f"GPUs: {reason}"))


def merge_answer(into: Observations, host: str, answer: Observations) -> None:
    """A peer's observations added to this host's, each item marked with its host."""
    for name in type(into).model_fields:
        if name == "host":
            continue  # one machine's facts (load, disks) stay its own: see below
        mine, theirs = getattr(into, name), getattr(answer, name)
        for item in getattr(theirs, "items", []):
            _mark(item, host)
            mine.items.append(item)
        for line in getattr(theirs, "unavailable", []):
            mine.unavailable.append(
                Unavailable(watch_id=line.watch_id, target=f"host {host}", reason=_joined(line))
            )
    _merge_processes(into, answer, host)
    if answer.host.hostname:
        into.host.peers.append(answer.host.model_copy(update={"peer": host, "peers": []}))
    if into.gpus.source == "none" and answer.gpus.items:
        into.gpus.source, into.gpus.reason = answer.gpus.source, ""
        into.gpus.driver_version = answer.gpus.driver_version
        into.gpus.cuda_version = answer.gpus.cuda_version


def _joined(line: Unavailable) -> str:
    return f"{line.target}: {line.reason}" if line.target else line.reason


def _merge_processes(into: Observations, answer: Observations, host: str) -> None:
    """Pids stay numbers; what groups them (workers, stuck stacks) gains the host, and trees
    are told apart by it (`ProcessInfo.tree_ref`)."""
    mine, theirs = into.processes, answer.processes
    mine.matched += theirs.matched
    if mine.featured or theirs.featured:
        # no list: every row of that host; the table picks rows by pid, so a pid that both
        # hosts have can show one row more, never another host's data
        here = mine.featured or [p.pid for p in mine.items if p.host != host]
        mine.featured = here + (theirs.featured or [p.pid for p in theirs.items])
    mine.workers += [w.model_copy(update={"host": host}) for w in theirs.workers]
    mine.stuck_stacks += [s.model_copy(update={"host": host}) for s in theirs.stuck_stacks]
    for gone in theirs.exited:
        mine.exited.append(gone.model_copy(update={"name": f"{host}:{gone.name}"}))


# the field that names an item in the dump and in signals, per item type
_LABEL = {
    "ProcessInfo": "name",
    "LogInfo": "path",
    "ArtifactInfo": "path",
    "CommandInfo": "label",
    "GpuInfo": "name",
    "SlurmJobInfo": "label",
}


def _mark(item: BaseModel, host: str) -> None:
    kind = type(item).__name__
    if kind == "PortInfo":
        item.host = host  # type: ignore[attr-defined]  # the table prints host:port
        return
    if hasattr(item, "host"):
        item.host = host
    label = _LABEL.get(kind)
    if label and isinstance(getattr(item, label, None), str):
        setattr(item, label, f"{host}:{getattr(item, label)}")
