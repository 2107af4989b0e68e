"""Pure comparison of two snapshots: what started, exited, grew, changed or was written."""

import hashlib
import math
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import pydantic_core
from pydantic import BaseModel

from ctxd.collectors._artifact_text import describe_change
from ctxd.fmt import human_bytes
from ctxd.models import Change, Narrative, Observations, Signal, Snapshot
from ctxd.models.base import VOLATILE
from ctxd.snapshotter import happened


def compare(before: Snapshot | None, after: Snapshot) -> list[Change]:
    if before is None:
        return []
    return [
        *processes(before.observations, after.observations),
        *logs(before.observations, after.observations),
        *artifacts(before.observations, after.observations),
        *ports(before.observations, after.observations),
        *journal(before.narrative, after.narrative),
        *signals(before.signals, after.signals),
    ]


# A process caught running by one reading and sleeping by the next changed nothing a reader
# acts on: which of the two a reading finds is chance. A zombie, a stop or a disk wait is news.
_SAMPLED = frozenset({"running", "sleeping", "idle"})


def processes(before: Observations, after: Observations) -> list[Change]:
    old = {p.key: p for p in before.processes.items}
    new = {p.key: p for p in after.processes.items}
    changes = [
        Change(kind=happened.PROCESS_EXITED, text=f"exited: {p.pid} {p.name} (was {p.state})")
        for p in happened.exited(before, after)
    ]
    changes += [
        Change(kind="process_started", text=f"started: {p.pid} {p.name}")
        for k, p in new.items()
        if k not in old
    ]
    for k, p in new.items():
        if k in old and old[k].state != p.state and {old[k].state, p.state} - _SAMPLED:
            text = f"state of {p.pid} {p.name}: {old[k].state} -> {p.state}"
            changes.append(Change(kind="process_state", text=text))
    return changes


def logs(before: Observations, after: Observations) -> list[Change]:
    old = {(log.watch_id, log.path): log for log in before.logs.items}
    changes = []
    for log in after.logs.items:
        prev = old.get((log.watch_id, log.path))
        if prev is None:
            changes.append(Change(kind="log_new", text=f"log {log.path}: now watched"))
        elif log.rotated or (prev.inode and log.inode and prev.inode != log.inode):
            where = f"; old file now {log.rotated_from}" if log.rotated_from else ""
            text = f"log {log.path}: replaced (rotated){where}"
            changes.append(Change(kind="log_rotated", text=text))
        elif log.truncated or log.size < prev.size:
            text = f"log {log.path}: truncated {human_bytes(prev.size)} -> {human_bytes(log.size)}"
            changes.append(Change(kind="log_truncated", text=text))
        elif log.size > prev.size:
            text = f"log {log.path}: grew by {human_bytes(log.size - prev.size)}"
            changes.append(Change(kind="log_grew", text=text))
        if log.error_new and log.error_summary:
            text = f"log {log.path}: error: {log.error_summary[:200]}"
            changes.append(Change(kind="log_error", text=text))
    return changes


def artifacts(before: Observations, after: Observations) -> list[Change]:
    old = {(a.watch_id, a.path): a for a in before.artifacts.items}
    new = {(a.watch_id, a.path): a for a in after.artifacts.items}
    changes = []
    for key in sorted(old.keys() | new.keys(), key=lambda k: (k[0], k[1])):
        text = describe_change(old.get(key), new.get(key))
        if text:
            changes.append(Change(kind="artifact", text=f"artifact {key[1]}: {text}"))
    return changes


def ports(before: Observations, after: Observations) -> list[Change]:
    old = {(p.host, p.port): p.listening for p in before.ports.items}
    changes = []
    for p in after.ports.items:
        was = old.get((p.host, p.port))
        if was is not None and was != p.listening:
            state = "now listening" if p.listening else "stopped listening"
            kind = happened.PORT_OPENED if p.listening else happened.PORT_CLOSED
            changes.append(Change(kind=kind, text=f"{p.host}:{p.port} {state}"))
    return changes


def journal(before: Narrative, after: Narrative) -> list[Change]:
    entries = [
        *after.attempts,
        *after.findings,
        *after.decisions,
        *after.next_steps,
        *after.questions,
        *after.notes,
    ]
    fresh = sorted((e for e in entries if e.id > before.last_entry_id), key=lambda e: e.id)
    changes = [Change(kind="journal", text=f"new {e.kind}: {e.text[:200]}") for e in fresh]
    if after.objective != before.objective:
        changes.append(Change(kind="journal", text="objective changed"))
    for key, value in after.facts.items():
        if before.facts.get(key) != value:
            changes.append(Change(kind="journal", text=f"fact {key} = {value[:200]}"))
    return changes


def signals(before: list[Signal], after: list[Signal]) -> list[Change]:
    old = {s.key: s for s in before}
    new = {s.key: s for s in after}
    # an exit is already a change of its own ("exited: …"); its signal would say it twice
    raised = [
        Change(kind="signal_raised", text=f"new signal: {s.text}")
        for k, s in new.items()
        if k not in old and s.code != happened.PROCESS_EXITED
    ]
    # a signal that a stronger one replaced still holds: "all idle" does not end when "stuck" begins
    replaced = {code for s in after for code in _REPLACES.get(s.code, ())}
    cleared = [
        Change(kind="signal_cleared", text=f"cleared: {s.text}")
        for k, s in old.items()
        if k not in new and s.code not in replaced
    ]
    return raised + cleared


# signal code -> the codes it stands in for while it is raised (signals.idle_processes is
# silent while a tree is stuck)
_REPLACES = {"stuck": ("all_idle",)}


# A log's "since the previous read" figures (growth, bytes scanned, whether its error is new)
# are news about a step, not state: the first read of a file reports them, the next does not,
# and what they report shows in its size, inode and error block, which stay in the key.
_LOG_NEWS = (
    "growth_bytes", "scanned_bytes", "skipped_bytes", "rotated", "rotated_from", "truncated",
    "error_new", "error_lines",
)  # fmt: skip


def content_key(snapshot: Snapshot) -> str:
    """What makes two snapshots "the same" for dedup: everything but times, ages and jitter.

    Percentages and byte counts are compared in coarse bands, so a sleeping process whose
    RSS moves by a page does not make a new version, while one that wakes up or doubles its
    memory does.
    """
    # _stable sorts every mapping's keys, so the JSON text is one for one content
    return hashlib.sha256(pydantic_core.to_json(keyed(snapshot))).hexdigest()


def keyed(snapshot: Snapshot) -> dict[str, Any]:
    """What content_key hashes, read from the models themselves (a JSON dump first cost as
    much as the walk)."""
    fields = {name: getattr(snapshot, name) for name in _SNAPSHOT_FIELDS}
    # a signal's wording carries durations ("silent for 4 min"); its identity does not, nor its
    # severity, which follows from the observations already in the key or from news (a new
    # error is critical, the same error read again a warning) that is no state
    fields["signals"] = sorted(s.key for s in snapshot.signals)
    fields["note"] = snapshot.header.note
    data = _stable(fields)
    for log in data["observations"]["logs"]["items"]:
        for name in _LOG_NEWS:
            log.pop(name, None)
    # a running attempt's outcome reads "running for 4 s": its identity and status are state
    for item in data["narrative"]["history"]:
        if item["source"] == "launch":
            item.pop("outcome", None)
    return data


_KEEP, _PERCENT, _BYTES = range(3)
_SNAPSHOT_FIELDS = tuple(
    name for name in Snapshot.model_fields if name not in ("header", "changes")
)
_NUMBERS = frozenset({int, float, bool})


@lru_cache(maxsize=4096)
def _rule(key: str) -> int:
    """How content_key compares a value of this name: percentages and byte counts banded."""
    if key.endswith("_percent"):
        return _PERCENT
    return _BYTES if key.endswith("_bytes") else _KEEP


@lru_cache(maxsize=512)
def _fields_of(model: type[BaseModel]) -> tuple[str, ...]:
    """A model's fields that content_key keeps: all but those its model declares VOLATILE
    (readings that move on their own: ages, rates, temperatures, where a sleeper waits)."""
    fields = model.model_fields
    return tuple(name for name in sorted(fields) if VOLATILE not in fields[name].metadata)


def _mapping(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    out = {}
    for k, v in pairs:
        rule = _rule(k)
        leaf = type(v)  # a row is mostly texts, Nones and kept numbers: no call for them
        if leaf is str or v is None or (rule == _KEEP and leaf in _NUMBERS):
            out[k] = v
        else:
            out[k] = _stable(v, k)
    return out


def _stable(value: Any, key: str = "") -> Any:
    """The value as content_key compares it: mappings and models as dicts sorted by key,
    without volatile fields, percentages and byte counts banded; other leaves as they are
    (pydantic-core writes datetimes, enums and paths)."""
    kind = type(value)  # exact types first: a crowd's snapshot holds tens of thousands
    if kind is dict:
        return _mapping(sorted(value.items()))
    if kind is list:
        return [_stable(v, key) for v in value]
    if kind is str or value is None:
        return value
    if isinstance(value, BaseModel):
        fields = value.__dict__
        out = _mapping((name, fields[name]) for name in _fields_of(type(value)))
        if value.__pydantic_extra__:
            out.update(_mapping(sorted(value.__pydantic_extra__.items())))
        return out
    if isinstance(value, set | frozenset):  # in no model today; unordered: sorted
        value = sorted(value, key=repr)
    if isinstance(value, list | tuple):
        return [_stable(v, key) for v in value]
    if isinstance(value, dict):
        return _mapping(sorted(value.items()))
    if isinstance(value, str):
        return value
    rule = _rule(key)
    if rule == _PERCENT and isinstance(value, int | float):
        return 0 if value < 1 else 1 if value < 25 else 2 if value < 75 else 3
    if rule == _BYTES and isinstance(value, int) and value > 0:
        return round(math.log2(value) * 4)  # about 19 % steps
    return value
