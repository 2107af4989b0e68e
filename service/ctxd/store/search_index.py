"""The store's search index: one FTS5 table over journal, actions, attempts and dump text.

`search_docs` holds one row per searchable thing (its session, where it came from, the
version it links to, its time and its text); `search_docs_fts` is sqlite-utils' FTS5 index
over it, kept in step by sqlite-utils' triggers. Every function here takes the `Database`
and runs inside the caller's write transaction, so a row and its index entry commit together
(the migration uses the same functions to backfill). What arrives is already redacted.

Dump text is indexed by block (a heading and what follows it), once per session and block
content: a block unchanged since an earlier version costs an update of `last_version`, not a
new index entry. Digits are left out of the block's key, so a block whose only change is a
number (a CPU %, a time, a version) is not indexed again: the first version that said it is
the one a hit links to.
"""

import hashlib
import json
import re
import sqlite3
from typing import Any

from sqlite_utils import Database

from ctxd.store.sql import insert_rows, select_rows

FTS_COLUMNS = ["kind", "text", "detail", "status"]
# The most actions a session keeps in the index: more than the ring (history is the point),
# but bounded.
ACTIONS_INDEXED = 5000
_HEADING = re.compile(r"^#{1,6} ", re.M)
# ASCII digits only: a Unicode \d made the key of a 17 KB dump cost 0.6 ms, this 0.3.
_DIGITS = re.compile(r"[0-9]+")
# An attempt's source and kind in the index: "launch", the word it was stored under before
# attempts had their one name, kept so that stored rows and `kind:launch` searches still match.
ATTEMPT = "launch"


def create(db: Database) -> None:
    db.execute(
        "create table search_docs (id integer primary key, session text not null,"
        " source text not null, ref text not null, version integer default 0,"
        " last_version integer default 0, at text not null default '',"
        " kind text not null default '', text text not null default '',"
        " detail text not null default '', status text not null default '')"
    )
    db.execute("create index search_docs_ref on search_docs (session, source, ref)")
    db.execute("create index search_docs_recent on search_docs (session, source, id)")
    db.table("search_docs").enable_fts(FTS_COLUMNS, fts_version="FTS5", create_triggers=True)


def reindex_on_text_change_only(db: Database) -> None:
    """sqlite-utils' update trigger re-indexes a row on any update: a dump block seen again
    (its `last_version` moved) was taken out of the FTS index and put back in, every version.
    This one fires only when an indexed column changes."""
    cols = ", ".join(f'"{c}"' for c in FTS_COLUMNS)
    old = ", ".join(f'old."{c}"' for c in FTS_COLUMNS)
    new = ", ".join(f'new."{c}"' for c in FTS_COLUMNS)
    db.execute("drop trigger if exists search_docs_au")
    db.execute(
        f"create trigger search_docs_au after update of {cols} on search_docs begin"
        f" insert into search_docs_fts (search_docs_fts, rowid, {cols})"
        f" values ('delete', old.rowid, {old});"
        f" insert into search_docs_fts (rowid, {cols}) values (new.rowid, {new}); end"
    )


def _latest_version(db: Database, sid: str) -> int:
    row = db.execute("select max(version) from snapshots where session = ?", [sid]).fetchone()
    return int(row[0] or 0)


def _put(db: Database, sid: str, source: str, ref: str, doc: dict[str, Any]) -> None:
    """Replace the one row of (session, source, ref), unless its text is unchanged."""
    row = {
        "kind": "",
        "text": "",
        "detail": "",
        "status": "",
        **{k: (v if v is not None else "") for k, v in doc.items()},
    }
    old = db.execute(
        "select id, kind, text, detail, status from search_docs"
        " where session = ? and source = ? and ref = ?",
        [sid, source, ref],
    ).fetchall()
    if old and tuple(old[0][1:]) == (row["kind"], row["text"], row["detail"], row["status"]):
        return
    for rowid, *_rest in old:
        db.execute("delete from search_docs where id = ?", [rowid])
    if "version" not in row:
        row["version"] = _latest_version(db, sid)
    row.setdefault("last_version", row["version"])
    insert_rows(db, "search_docs", [{"session": sid, "source": source, "ref": ref, **row}])


def unindex(db: Database, sid: str, source: str, ref: str) -> None:
    """Drop the row of (session, source, ref): its thing is now known by another ref."""
    db.execute(
        "delete from search_docs where session = ? and source = ? and ref = ?", [sid, source, ref]
    )


def index_entry(db: Database, sid: str, entry: dict[str, Any]) -> None:
    """A journal entry: its text and outcome, its kind and status."""
    doc = {
        "at": entry.get("updated_at") or entry.get("created_at") or "",
        "kind": f"journal {entry.get('kind') or ''}".strip(),
        "text": entry.get("text"),
        "detail": entry.get("outcome"),
        "status": entry.get("status"),
    }
    _put(db, sid, "journal", str(entry["id"]), doc)


def index_action(db: Database, sid: str, action_id: int, kind: str, at: str, body: dict) -> None:
    """An agent action: a command with its output tail and exit, a file edit, a prompt."""
    text = body.get("command") or body.get("path") or body.get("text") or ""
    exit_status = body.get("exit_status")
    status = "" if exit_status is None else f"exit {exit_status}"
    detail = body.get("output_tail") or body.get("tool") or ""
    doc = {"at": at, "kind": kind, "text": text, "detail": detail, "status": status}
    _put(db, sid, "action", str(action_id), doc)
    db.execute(
        "delete from search_docs where session = ? and source = 'action' and id <= (select id"
        " from search_docs where session = ? and source = 'action' order by id desc"
        " limit 1 offset ?)",
        [sid, sid, ACTIONS_INDEXED],
    )


def index_attempt(db: Database, sid: str, attempt: dict[str, Any]) -> None:
    """An attempt: its command line and how it ended (a row as stored, argv as JSON text)."""
    argv = json.loads(attempt.get("argv") or "[]")
    ended = attempt.get("ended_at")
    status = f"ended {ended}" if ended else "running" if attempt.get("seen", 1) else "started"
    opened = attempt.get("port_opened")
    detail = "" if opened is None else ("port opened" if opened else "port never opened")
    doc = {
        "at": attempt.get("started_at") or "",
        "kind": ATTEMPT,
        "text": attempt.get("command") or " ".join(str(a) for a in argv),
        "detail": " ".join(filter(None, [attempt.get("cwd") or "", detail, attempt.get("error")])),
        "status": status,
    }
    _put(db, sid, ATTEMPT, str(attempt["start_key"]), doc)


def blocks(markdown: str) -> list[str]:
    """The dump cut at its headings: each block a heading and its text."""
    starts = [m.start() for m in _HEADING.finditer(markdown)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    ends = [*starts[1:], len(markdown)]
    return [b for b in (markdown[s:e].strip() for s, e in zip(starts, ends, strict=True)) if b]


def index_dump(db: Database, sid: str, version: int, at: str, markdown: str) -> None:
    """A version's dump, only its blocks this session has not said before (those it has said
    are marked as said again): three statements a dump, whatever its number of blocks."""
    keyed: dict[str, str] = {}
    for block in blocks(markdown):
        keyed.setdefault(hashlib.sha256(_DIGITS.sub("0", block).encode()).hexdigest()[:32], block)
    if not keyed:
        return
    refs = f"({', '.join('?' * len(keyed))})"
    db.execute(
        "update search_docs set last_version = max(last_version, ?)"
        f" where session = ? and source = 'dump' and ref in {refs}",
        [version, sid, *keyed],
    )
    said = {
        ref
        for (ref,) in db.execute(
            f"select ref from search_docs where session = ? and source = 'dump' and ref in {refs}",
            [sid, *keyed],
        )
    }
    new = [(key, block) for key, block in keyed.items() if key not in said]
    if new:
        rows = (
            {
                "session": sid,
                "source": "dump",
                "ref": key,
                "version": version,
                "last_version": version,
                "at": at,
                "kind": "dump " + (_heading(block)[:80]),
                "text": block,
            }
            for key, block in new
        )
        insert_rows(db, "search_docs", rows)


def _heading(block: str) -> str:
    return block.splitlines()[0].lstrip("# ") if block.startswith("#") else "dump"


def after_prune(db: Database) -> None:
    """Dump blocks follow their versions: a block whose versions are all gone goes; one whose
    first version went links to the first version of its span that is left."""
    db.execute(
        "update search_docs set version = (select min(s.version) from snapshots s"
        " where s.session = search_docs.session and s.version between search_docs.version"
        " and search_docs.last_version)"
        " where source = 'dump' and not exists (select 1 from snapshots s"
        " where s.session = search_docs.session and s.version = search_docs.version)"
    )
    db.execute("delete from search_docs where source = 'dump' and version is null")


def backfill(db: Database, markdown_of: Any, attempts_table: str = "attempts") -> None:
    """Index what an older database already holds (the migration's one pass); its attempts are
    in `attempts_table` (`launches` before migration m013 renamed it)."""
    for entry in select_rows(db, "select * from journal order by id"):
        index_entry(db, entry["session"], entry)
    for a in select_rows(db, "select id, session, kind, at, body from actions order by id"):
        index_action(db, a["session"], a["id"], a["kind"], a["at"], json.loads(a["body"]))
    for attempt in select_rows(db, f"select * from [{attempts_table}] order by id"):
        index_attempt(db, attempt["session"], attempt)
    rows = select_rows(
        db,
        "select session, version, taken_at, markdown, markdown_z from snapshots"
        " order by session, version",
    )
    for s in rows:
        index_dump(db, s["session"], s["version"], s["taken_at"], markdown_of(s))


# snippet() marks: control characters that redacted, printable text does not contain
MARK_OPEN, MARK_CLOSE = "\x02", "\x03"
_MARKS = f"'{MARK_OPEN}', '{MARK_CLOSE}', '…', 24"
# bm25 weights, in FTS_COLUMNS order: what was said or run counts most
_WEIGHTS = "0.5, 1.0, 0.75, 0.5"


def query(db: Database, sid: str | None, match: str, limit: int, offset: int) -> list[dict]:
    """Hits of an FTS5 `match`, best first: bm25 (rounded, so near-equal scores tie) and then
    the newest. Raises sqlite3.OperationalError for a query FTS5 refuses."""
    where = "search_docs_fts match ?" + (" and d.session = ?" if sid is not None else "")
    sql = (
        "select d.session, d.source, d.version, d.last_version, d.at, d.kind,"
        # a hit on its kind alone shows its text: "command" says nothing about which
        f" case when snippet(search_docs_fts, -1, {_MARKS}) = highlight(search_docs_fts, 0,"
        f" '{MARK_OPEN}', '{MARK_CLOSE}') then snippet(search_docs_fts, 1, {_MARKS})"
        f" else snippet(search_docs_fts, -1, {_MARKS}) end snippet,"
        f" bm25(search_docs_fts, {_WEIGHTS}) score"
        " from search_docs_fts join search_docs d on d.id = search_docs_fts.rowid"
        f" where {where} order by round(score, 1), d.at desc, d.id desc limit ? offset ?"
    )
    params: list[Any] = [match, *([sid] if sid is not None else []), limit, offset]
    return select_rows(db, sql, params)


def size(db: Database) -> dict[str, int]:
    """Rows indexed, and the pages the index and its documents take (bytes)."""
    rows = db.execute("select count(*) from search_docs").fetchone()[0]
    try:
        used = db.execute(
            "select sum(pgsize) from dbstat where name like 'search_docs%'"
        ).fetchone()[0]
    except sqlite3.OperationalError:  # dbstat is a compile-time option of SQLite
        used = -1
    return {"rows": int(rows), "bytes": int(used or 0)}
