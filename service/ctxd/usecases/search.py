"""Search of a session's history: the query's bounds, FTS5's refusals as 400s, hits as models.

The index and its SQL are the store's (`store_search.py`); this module decides what a query
may be (its length, its terms, its NEAR groups, its time) and what a hit says: its kind, the
version it links to, its time and a snippet whose matches are marked `**like this**`.
"""

import html
import re
import sqlite3
from datetime import datetime

from pydantic import BaseModel

from ctxd import redact
from ctxd.errors import Invalid
from ctxd.store.database import Store
from ctxd.store.search_index import MARK_CLOSE, MARK_OPEN

QUERY_MAX_CHARS = 500
TERMS_MAX = 32
NEAR_MAX = 4
LIMIT_MAX = 100
OFFSET_MAX = 10_000
# A query still running after this is stopped and answered "too expensive" (a 400).
BUDGET_S = 2.0
_TERM = re.compile(r"\w+\*?")
_NEAR = re.compile(r"\bNEAR\b")
_SYNTAX_HINT = (
    'quote a term that has punctuation ("NCCL_P2P_DISABLE=1"); '
    "operators are AND, OR, NOT, NEAR(a b, 10), prefix*, and column:term with the columns "
    "kind, text, detail, status"
)


class SearchHit(BaseModel):
    session: str
    source: str  # journal, action, launch or dump
    kind: str  # e.g. "journal attempt", "command", "launch", "dump ## Logs"
    version: int  # the version it links to (0: before the first version)
    last_version: int  # for dump text: the last version that still said it
    at: datetime | None
    snippet: str  # matches marked **like this**
    link: str  # the page of that version (or of the session)


class SearchResult(BaseModel):
    query: str
    session: str | None
    limit: int
    offset: int
    more: bool  # another page follows
    hits: list[SearchHit]


def check_query(q: str) -> str:
    """The query as FTS5 gets it, or Invalid saying which bound it breaks."""
    q = q.replace(MARK_OPEN, " ").replace(MARK_CLOSE, " ").strip()
    if not q:
        raise Invalid("an empty query: give words to search for")
    if len(q) > QUERY_MAX_CHARS:
        raise Invalid(f"the query has {len(q)} characters; at most {QUERY_MAX_CHARS}")
    terms = len(_TERM.findall(q))
    if terms > TERMS_MAX:
        raise Invalid(f"the query has {terms} terms; at most {TERMS_MAX}")
    if len(_NEAR.findall(q)) > NEAR_MAX:
        raise Invalid(f"the query has more than {NEAR_MAX} NEAR groups")
    return q


def find(store: Store, sid: str | None, q: str, limit: int = 20, offset: int = 0) -> SearchResult:
    """Ranked hits (bm25, then the newest) of `q`, one page of at most LIMIT_MAX."""
    if not 1 <= limit <= LIMIT_MAX:
        raise Invalid(f"limit must be between 1 and {LIMIT_MAX}")
    if not 0 <= offset <= OFFSET_MAX:
        raise Invalid(f"offset must be between 0 and {OFFSET_MAX}")
    match = check_query(q)
    try:
        rows = store.search(sid, match, limit + 1, offset, BUDGET_S)
    except sqlite3.OperationalError as exc:
        refusal = _refusal(exc)
        if refusal is None:
            raise  # the storage's own trouble, not the query's
        raise refusal from exc
    hits = [_hit(r) for r in rows[:limit]]
    return SearchResult(
        query=redact.text(match),
        session=sid,
        limit=limit,
        offset=offset,
        more=len(rows) > limit,
        hits=hits,
    )


def _refusal(exc: sqlite3.OperationalError) -> Invalid | None:
    reason = str(exc)
    if reason == "interrupted":
        return Invalid(f"the query took over {BUDGET_S:g} s; make it narrower")
    if reason.startswith(("fts5:", "no such column", "unknown special query", "unterminated")):
        return Invalid(f"not a valid search query ({reason}); {_SYNTAX_HINT}")
    if reason.startswith("no such table"):  # a read-only data dir from before the index
        return Invalid(
            "this data dir has no search index: it opened read-only before one was built"
        )
    return None


def _hit(row: dict) -> SearchHit:
    version = row["version"] or 0
    sid = row["session"]
    link = f"/s/{sid}/v/{version}" if version else f"/s/{sid}"
    snippet = row["snippet"] or ""
    return SearchHit(
        session=sid,
        source=row["source"],
        kind=row["kind"],
        version=version,
        last_version=row["last_version"] or version,
        at=datetime.fromisoformat(row["at"]) if row["at"] else None,
        snippet=snippet.replace(MARK_OPEN, "**").replace(MARK_CLOSE, "**"),
        link=link,
    )


def snippet_html(snippet: str) -> str:
    """A hit's snippet as HTML: everything escaped, then its **marks** as <mark>."""
    parts = html.escape(snippet).split("**")
    out = [p if i % 2 == 0 else f"<mark>{p}</mark>" for i, p in enumerate(parts)]
    if len(parts) % 2 == 0:  # an unpaired mark: keep it as text
        out[-1] = "**" + parts[-1]
    return "".join(out)
