"""HTTP replies for failures of ctxd's own storage and for refusals: never exception text.

A full disk or a read-only data directory is the operator's to fix, not a bug: it gets a
clear 507 or 503 saying nothing was saved. SQLite rolls the transaction back and Markdown is
written through a temp file, so no partial file stays behind. The commit is the truth: a
snapshot's files failing after its commit never reach here (DumpFiles.write logs that and the
answer is the committed version); a data directory read-only at start-up serves what it has
and every write ends here as "read-only". A database file removed or replaced under a running
ctxd (`rm -rf` of the data directory) is refused the same way, as "removed": a commit into a
file nobody finds again would be acknowledged and lost.
"""

import errno
import logging
import os
import sqlite3

from litestar import MediaType, Request, Response

log = logging.getLogger("ctxd")

_FULL = {errno.ENOSPC, errno.EDQUOT}
_UNWRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}
# Only from the store (ctxd.store.connection.StorageFault): its database file is gone.
_GONE = {errno.ENOENT}


def _reply(status: int, detail: str, retry: bool = False) -> Response[dict[str, str | int]]:
    headers = {"Retry-After": "1"} if retry else None
    body: dict[str, str | int] = {"status_code": status, "detail": detail}
    return Response(body, status_code=status, media_type=MediaType.JSON, headers=headers)


# A failed database write was rolled back; a failed file write came after the commit, and the
# file is rebuilt from the database at start-up: the reply says which.
_NOT_SAVED = "the request was not saved"
_FILES_LATER = "its Markdown files are rewritten from the database once it can be written"


def _full(after: str) -> Response[dict[str, str | int]]:
    return _reply(507, f"the data directory is full (no space left); {after}")


def _unwritable(why: str, after: str) -> Response[dict[str, str | int]]:
    return _reply(503, f"the data directory cannot be written ({why}); {after}")


def storage(request: Request, exc: Exception) -> Response[dict[str, str | int]]:
    """OSError and sqlite3.Error: a storage condition when recognised, else a bare 500."""
    code = getattr(exc, "errno", None)
    message = str(exc).lower() if isinstance(exc, sqlite3.Error) else ""
    log.error("storage %s on %s %s: %s", type(exc).__name__, request.method, request.url.path, exc)
    after = _NOT_SAVED if isinstance(exc, sqlite3.Error) else _FILES_LATER
    if code in _FULL or "disk is full" in message:
        return _full(after)
    if code in _UNWRITABLE:
        return _unwritable(os.strerror(code or errno.EACCES).lower(), after)
    if code in _GONE and isinstance(exc, sqlite3.Error):
        return _reply(
            503,
            "the data directory or its database was removed or replaced while ctxd ran; "
            f"{after}; restart ctxd once the data directory is back (or to begin a new one)",
        )
    if "readonly" in message or "read-only" in message:
        return _unwritable("read-only", after)
    if "unable to open" in message or "disk i/o" in message:
        return _unwritable("cannot open or write the database", after)
    if "locked" in message or "busy" in message:
        return _reply(503, "the database is busy; retry", retry=True)
    return _reply(500, "internal error; see the ctxd log")
