"""A snapshot's sections in the database: content-keyed blobs, most stored as deltas.

Each section (the header, the signals, `observations.processes`, ...) is a JSON blob keyed by
the hash of its text: a section that did not change since an earlier version is not stored
again, its version refers to the earlier copy. A section that changed is stored as zlib with
the section's keyframe (a blob stored whole, at most KEYFRAME_EVERY changes back) as preset
dictionary: a process table whose only change is an age costs a few hundred bytes, not a
compressed table, and reads back with two decompressions.

A version's list of references (its `sections` column) is itself a delta: the references that
differ from a keyframe version's, with that version under "@"; every KEYFRAME_EVERY versions
the list is stored whole. Every function takes the `Database` and runs inside the caller's
transaction.
"""

import hashlib
import json
import zlib
from typing import Any

from pydantic import BaseModel, TypeAdapter
from sqlite_utils import Database

KEYFRAME_EVERY = 32
DELTA = b"\x00d"  # never the start of a zlib stream (0x78 ...)
BASE = "@"  # in a delta list of references: the version whose whole list it changes


def parts_of(snapshot: BaseModel) -> dict[str, bytes]:
    """A snapshot cut into its sections, each as JSON bytes written by pydantic-core in one
    call (a Python dump and json.dumps cost three times as much for a crowd's process table).
    The same content gives the same bytes: fields in their declared order, dicts as built."""
    parts = {}
    for name, value in _fields(snapshot):
        if name == "observations":
            for section, part in _fields(value):
                parts[f"observations.{section}"] = _adapter(type(value), section).dump_json(part)
        else:
            parts[name] = _adapter(type(snapshot), name).dump_json(value)
    return parts


def _fields(model: BaseModel) -> list[tuple[str, Any]]:
    return [(name, getattr(model, name)) for name in type(model).model_fields]


_adapters: dict[tuple[type[BaseModel], str], TypeAdapter] = {}


def _adapter(model: type[BaseModel], name: str) -> TypeAdapter:
    """The serializer of one field's type, made once (a TypeAdapter costs a schema build)."""
    adapter = _adapters.get((model, name))
    if adapter is None:
        adapter = _adapters[model, name] = TypeAdapter(model.model_fields[name].annotation or Any)
    return adapter


def put(db: Database, parts: dict[str, bytes], previous: dict[str, str]) -> dict[str, str]:
    """Store the sections not stored yet; `previous` (the last version's references) names
    the blob each new one is a delta of. Returns the references: section name -> hash."""
    refs = {}
    for name, raw in parts.items():
        digest = hashlib.sha256(raw).hexdigest()[:32]
        refs[name] = digest
        if db.execute("select 1 from blobs where hash = ?", [digest]).fetchone():
            continue  # unchanged since an earlier version: refer to that copy
        data = _encode(db, raw, previous.get(name))
        db.execute("insert into blobs (hash, data) values (?, ?)", [digest, data])
    return refs


def _encode(db: Database, raw: bytes, previous: str | None) -> bytes:
    """A delta of the previous blob's keyframe while that is fewer than KEYFRAME_EVERY
    changes back; whole otherwise. A delta's header: its depth and its keyframe's hash."""
    stored = _blob(db, previous) if previous else None
    if stored is None:
        return zlib.compress(raw, 6)
    if stored[:2] == DELTA:
        depth, base = stored[2] + 1, stored[3:19].hex()
        key_z = _blob(db, base)
    else:
        depth, base, key_z = 1, str(previous), stored
    if depth >= KEYFRAME_EVERY or key_z is None:
        return zlib.compress(raw, 6)
    packer = zlib.compressobj(6, zdict=zlib.decompress(key_z)[-32768:])
    return DELTA + bytes([depth]) + bytes.fromhex(base) + packer.compress(raw) + packer.flush()


def _blob(db: Database, digest: str) -> bytes | None:
    row = db.execute("select data from blobs where hash = ?", [digest]).fetchone()
    return None if row is None else bytes(row[0])


def load(db: Database, refs: dict[str, str]) -> dict[str, Any]:
    """The sections `refs` names, decoded, as the nested dict a Snapshot validates."""
    stored = _blobs(db, set(refs.values()))
    bases = {data[3:19].hex() for data in stored.values() if data[:2] == DELTA}
    stored.update(_blobs(db, bases - stored.keys()))
    data: dict = {"observations": {}}
    for name, digest in refs.items():
        blob = stored[digest]
        if blob[:2] == DELTA:
            key = zlib.decompress(stored[blob[3:19].hex()])
            unpacker = zlib.decompressobj(zdict=key[-32768:])
            raw = unpacker.decompress(blob[19:]) + unpacker.flush()
        else:
            raw = zlib.decompress(blob)
        if name.startswith("observations."):
            data["observations"][name.split(".", 1)[1]] = json.loads(raw)
        else:
            data[name] = json.loads(raw)
    return data


def _blobs(db: Database, hashes: set[str]) -> dict[str, bytes]:
    if not hashes:
        return {}
    ordered = sorted(hashes)
    marks = ",".join("?" * len(ordered))
    rows = db.execute(f"select hash, data from blobs where hash in ({marks})", ordered)
    return {digest: bytes(data) for digest, data in rows.fetchall()}


# --- a version's list of references ---------------------------------------------------------


def pack(db: Database, sid: str, version: int, refs: dict[str, str]) -> str:
    """The `sections` column of a new version: whole, or what changed since a keyframe list."""
    previous = _row(db, sid, version - 1)
    if previous is None:
        return _dumps(refs)
    base = previous.get(BASE, version - 1)
    whole = _row(db, sid, base) if base != version - 1 else previous
    if whole is None or BASE in whole or version - base >= KEYFRAME_EVERY:
        return _dumps(refs)
    if set(whole) - set(refs):  # a section went: the delta could not say so
        return _dumps(refs)
    return _dumps({BASE: base, **{k: v for k, v in refs.items() if whole.get(k) != v}})


def unpack(db: Database, sid: str, packed: dict[str, Any]) -> dict[str, str]:
    """A version's references, whole, from its `sections` column as parsed."""
    if BASE not in packed:
        return packed
    base = _row(db, sid, int(packed[BASE])) or {}
    return {**base, **{k: v for k, v in packed.items() if k != BASE}}


def references(db: Database, sid: str, version: int) -> dict[str, str]:
    """A stored version's references, whole; empty when it has none (or is not there)."""
    row = _row(db, sid, version)
    return {} if row is None else unpack(db, sid, row)


def _row(db: Database, sid: str, version: int) -> dict[str, Any] | None:
    row = db.execute(
        "select sections from snapshots where session = ? and version = ?", [sid, version]
    ).fetchone()
    return None if row is None or row[0] is None else json.loads(row[0])


def _dumps(refs: dict[str, Any]) -> str:
    return json.dumps(refs, separators=(",", ":"))


def rekey(db: Database, doomed: set[tuple[str, int]]) -> None:
    """Versions that stay but whose list leans on a version about to go are stored whole."""
    for sid in {sid for sid, _ in doomed}:
        rows = db.execute(
            "select version, sections from snapshots where session = ? and sections like ?",
            [sid, f'{{"{BASE}":%'],
        ).fetchall()
        for version, text in rows:
            packed = json.loads(text)
            if (sid, version) not in doomed and (sid, packed[BASE]) in doomed:
                db.execute(
                    "update snapshots set sections = ? where session = ? and version = ?",
                    [_dumps(unpack(db, sid, packed)), sid, version],
                )


def collect_garbage(db: Database) -> None:
    """Blobs no version refers to go, unless a blob that stays is a delta of them."""
    db.execute(
        "with live(hash) as (select value from snapshots, json_each(snapshots.sections)"
        " where snapshots.sections is not null)"
        " delete from blobs where hash not in (select hash from live) and hash not in"
        " (select lower(hex(substr(data, 4, 16))) from blobs"
        "  where substr(data, 1, 2) = ? and hash in (select hash from live))",
        [DELTA],
    )
