"""Secrets learned after they were stored, taken out of everything ctxd keeps.

A value becomes known as a secret when it is seen under a secret name (a variable, a flag, a
header); what ctxd stored before (a log tail, a command's output, a prompt) may hold it in
clear. Each newly learned value is scrubbed from the database (every table, the compressed
sections and dumps, the search index, the WAL) and from the Markdown files: in the background
a moment after it is learned (values learned together, scrubbed together), or at once when
asked (`POST /api/scrub`, `ctxd scrub`).
"""

import logging
import threading
from collections.abc import Sequence
from typing import Annotated

from pydantic import Field, StringConstraints

from ctxd import redact
from ctxd.models import Strict
from ctxd.redact import REDACTED
from ctxd.redact import known as redact_known
from ctxd.render.dump_files import DumpFiles
from ctxd.store.database import Store
from ctxd.store.scrub import Scrubbed

log = logging.getLogger("ctxd.scrub")

SETTLE_S = 1.0  # values learned within this of each other are scrubbed in one pass


class ScrubIn(Strict):
    """Values a person knows leaked, to take out of everything ctxd stored (besides those ctxd
    learned itself): in a request's body, never in a URL a log would keep."""

    values: list[Annotated[str, StringConstraints(min_length=8, max_length=4096)]] = Field(
        default_factory=list, max_length=64
    )


class Scrubber:
    """Scrubs each value learned since its last pass, once."""

    def __init__(self, store: Store, files: DumpFiles) -> None:
        self.store = store
        self.files = files
        self._lock = threading.Lock()  # one pass at a time
        self._done: set[str] = set(redact_known.values())  # known before anything was stored
        self._timer: threading.Timer | None = None

    def request(self) -> None:
        """A pass soon, off the caller's thread, if some value is not scrubbed yet."""
        if not self.pending():
            return
        with self._lock:
            if self._timer is not None and self._timer.is_alive():
                return
            self._timer = threading.Timer(SETTLE_S, self._background)
            self._timer.daemon = True
            self._timer.start()

    def pending(self) -> list[str]:
        return [v for v in redact_known.values() if v not in self._done]

    def now(self, values: Sequence[str] = ()) -> Scrubbed:
        """Learn `values` (a person's own, given to be scrubbed), then scrub every value not
        scrubbed yet; what was rewritten."""
        for value in values:  # learned as any secret is: kept (as a digest) across restarts
            redact.learn(value)
        with self._lock:
            fresh = self.pending()
            if not fresh:
                return Scrubbed()
            forms = sorted({f for v in fresh for f in redact_known.variants(v)}, key=len)
            forms.reverse()  # longest first, as the redactor replaces them

            def replace(text: str) -> str:
                return redact_known.replace(text, REDACTED)

            done = self.store.scrub(forms, replace)
            done.dumps += self.files.scrub(forms, replace)
            done.values = len(fresh)
            self._done.update(fresh)
            return done

    def close(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()

    def _background(self) -> None:
        try:
            done = self.now()
            if done.total:
                log.info("took %d newly learned secret(s) out of %d stored place(s)",
                         done.values, done.total)  # fmt: skip
        except Exception:  # a pass that failed is tried again with the next value learned
            log.exception("could not scrub newly learned secrets from the store")
