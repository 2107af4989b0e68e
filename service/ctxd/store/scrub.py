"""Stored text rewritten without secrets learned after it was stored: every text column of every
table, the snapshots' compressed sections and dumps, the search index and the WAL.

A secret may be stored before ctxd learns it is one: a log line holding a key is kept with a
snapshot, and the command that names it a key (`--api-key K`) comes later. Once learned, the
value is replaced (in every encoding `redact.known` knows) wherever it was stored. Compressed
blobs are decoded first: one rewritten changes the dictionary its deltas were packed with, so
those are stored whole too; a blob keeps its key (the hash of what was stored before), so the
versions that refer to it are untouched. Deleted bytes are zeroed (`secure_delete`), the full
text index merged (its old segments hold the old words) and the WAL truncated.
"""

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlite_utils import Database

from ctxd.errors import NotFound
from ctxd.store.sections import DELTA
from ctxd.store.versions import markdown_of

# Tables whose text is never a secret's place (migrations) or is rewritten through its own
# table (the full text index's shadow tables follow search_docs through its triggers).
_SKIPPED = ("_sqlite_migrations", "blobs", "sqlite_")


@dataclass
class Scrubbed:
    """What a scrub rewrote: rows by table, compressed blobs and dumps."""

    rows: dict[str, int] = field(default_factory=dict)
    blobs: int = 0
    dumps: int = 0
    values: int = 0  # the learned values scrubbed (set by the caller that knows them)

    @property
    def total(self) -> int:
        return sum(self.rows.values()) + self.blobs + self.dumps


def scrub(db: Database, forms: list[str], replace: Callable[[str], str]) -> Scrubbed:
    """Rewrite, in the caller's transaction, every stored text holding one of `forms` (the
    encodings of the values learned) with `replace` applied."""
    done = Scrubbed()
    if not forms:
        return done
    db.execute("PRAGMA secure_delete = ON")  # freed and overwritten bytes are zeroed
    for table, columns in _text_tables(db).items():
        if count := _rows(db, table, columns, forms, replace):
            done.rows[table] = count
    done.blobs = _blobs(db, forms, replace)
    done.dumps = _dumps(db, forms, replace)
    if done.rows.get("search_docs"):  # its old segments still hold the old words
        db.execute("insert into search_docs_fts(search_docs_fts) values ('optimize')")
    return done


def _text_tables(db: Database) -> dict[str, list[str]]:
    """Each table ctxd keeps text in, with its text columns."""
    tables = {}
    for (name,) in db.execute("select name from sqlite_master where type = 'table'").fetchall():
        if name.startswith(_SKIPPED) or name.startswith("search_docs_fts"):
            continue
        columns = [
            row[1]
            for row in db.execute(f"pragma table_info('{name}')").fetchall()
            if (row[2] or "").upper() in ("TEXT", "")
        ]
        if columns:
            tables[name] = columns
    return tables


def _rows(
    db: Database, table: str, columns: list[str], forms: list[str], replace: Callable[[str], str]
) -> int:
    holds = " or ".join(f"instr({col}, ?) > 0" for col in columns for _ in forms)
    params = [form for _ in columns for form in forms]
    picked = ", ".join(columns)
    found = db.execute(f"select rowid, {picked} from {table} where {holds}", params).fetchall()
    for rowid, *values in found:
        fresh = [replace(v) if isinstance(v, str) else v for v in values]
        sets = ", ".join(f"{col} = ?" for col in columns)
        db.execute(f"update {table} set {sets} where rowid = ?", [*fresh, rowid])
    return len(found)


def _blobs(db: Database, forms: list[str], replace: Callable[[str], str]) -> int:
    """The snapshots' sections: each decoded; those holding a form stored redacted and whole,
    with every delta packed against one of them (its dictionary is no longer what it was)."""
    stored = {h: bytes(d) for h, d in db.execute("select hash, data from blobs").fetchall()}
    raw = {h: _decoded(data, stored) for h, data in stored.items()}
    changed = {}
    for digest, text in raw.items():
        if text is not None and any(form.encode() in text for form in forms):
            changed[digest] = replace(text.decode()).encode()
    leaning = {h for h, data in stored.items() if data[:2] == DELTA and data[3:19].hex() in changed}
    for digest in changed.keys() | leaning:
        whole = changed.get(digest, raw[digest])
        if whole is not None:
            db.execute(
                "update blobs set data = ? where hash = ?", [zlib.compress(whole, 6), digest]
            )
    return len(changed)


def _decoded(data: bytes, stored: dict[str, bytes]) -> bytes | None:
    try:
        if data[:2] != DELTA:
            return zlib.decompress(data)
        key = zlib.decompress(stored[data[3:19].hex()])
        unpacker = zlib.decompressobj(zdict=key[-32768:])
        return unpacker.decompress(data[19:]) + unpacker.flush()
    except (KeyError, zlib.error):
        return None  # not readable now: not rewritten either


def _markdown(db: Database, sid: str, data: bytes) -> str | None:
    try:
        return markdown_of(db, sid, data)
    except (NotFound, zlib.error, UnicodeDecodeError):
        return None  # not readable now: not rewritten either


def _dumps(db: Database, forms: list[str], replace: Callable[[str], str]) -> int:
    """The versions' Markdown dumps (zlib, most as deltas of a session's keyframe version):
    a session holding a form has every version's dump stored whole again, redacted."""
    count = 0
    sessions = [row[0] for row in db.execute("select distinct session from snapshots")]
    for sid in sessions:
        rows = db.execute(
            "select version, markdown_z from snapshots"
            " where session = ? and markdown_z is not null",
            [sid],
        ).fetchall()
        texts = {version: _markdown(db, sid, bytes(data)) for version, data in rows}
        if not any(text is not None and any(f in text for f in forms) for text in texts.values()):
            continue
        for version, text in texts.items():
            if text is None:
                continue
            fresh = replace(text)
            count += fresh != text
            db.execute(
                "update snapshots set markdown_z = ? where session = ? and version = ?",
                [zlib.compress(fresh.encode(), 6), sid, version],
            )
    return count
