"""Plain SQL for the store's hot paths: rows in and out without sqlite-utils' bookkeeping.

sqlite-utils' query() wraps every statement in a savepoint of its own (three statements for a
read), and its insert() asks sqlite_master twice and opens a savepoint: 32 of the 84 statements
of a standard snapshot were that bookkeeping. Its other helpers stay where they cost nothing.
"""

from collections.abc import Iterable
from typing import Any

from sqlite_utils import Database


def select_rows(db: Database, sql: str, params: tuple | list = ()) -> list[dict[str, Any]]:
    """The rows of a select, as dicts, read to the end (no read transaction left open)."""
    was_open = db.conn.in_transaction
    cursor = db.conn.execute(sql, params)
    if cursor.description is None:  # a write, by mistake: undone unless a caller's tx holds it
        if not was_open and db.conn.in_transaction:
            db.conn.rollback()
        raise ValueError(f"not a select: {sql[:60]}")
    keys = [column[0] for column in cursor.description]
    return [dict(zip(keys, row, strict=True)) for row in cursor]


def insert_rows(db: Database, table: str, rows: Iterable[dict[str, Any]]) -> None:
    """Rows of plain values (no dicts or lists to encode), all with the first one's keys, into
    `table`, a name from this code, as one prepared statement."""
    rows = list(rows)
    if not rows:
        return
    columns = list(rows[0])
    names = ", ".join(f'"{c}"' for c in columns)
    marks = ", ".join("?" * len(columns))
    db.conn.executemany(
        f'insert into "{table}" ({names}) values ({marks})', [[r[c] for c in columns] for r in rows]
    )
