"""Which session is this agent's: the one policy the hooks and the opencode plugin ask for.

An explicit session (CTXD_SESSION) wins; else the session scoped to the working directory
(deepest first); else one made for the checkout (`root`, e.g. the git top-level, else the
cwd), named after its folder; without an absolute cwd, one named after the harness's own
session id.
"""

import hashlib
import re
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import Field

from ctxd.errors import Invalid
from ctxd.harness.adapter import HarnessName
from ctxd.harness.policy import HOOK_MAX_CHARS
from ctxd.harness.registry import adapter
from ctxd.models import SESSION_ID_PATTERN, Session, SessionIn, Strict

Text = Annotated[str, Field(max_length=4096)]


class ResolveIn(Strict):
    """What a hook knows about where it runs; every field may be empty."""

    harness: HarnessName = "claude"
    session: Annotated[str, Field(pattern=SESSION_ID_PATTERN, max_length=64)] | None = None
    cwd: Text = ""
    root: Text = ""
    harness_session: Text = ""


class Resolved(Session):
    """The agent's session, and the dump budget its hooks inject (unless the user set one)."""

    hook_max_chars: int = HOOK_MAX_CHARS


class PromptIn(Strict):
    """A user's prompt as a hook saw it; a bare "continue" asks for the dump instead."""

    text: Annotated[str, Field(max_length=100_000)]
    max_chars: Annotated[int, Field(ge=200, le=10_000_000)] = HOOK_MAX_CHARS


def slug(name: str) -> str:
    """A session id (`[a-z0-9][a-z0-9._-]*`, at most 64) made from a folder name."""
    text = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._")
    return text[:48].rstrip("-._")


def harness_session(ask: ResolveIn) -> tuple[str, SessionIn]:
    """The session named after the harness's session id, for a hook without a cwd."""
    if not ask.harness_session:
        raise Invalid("give an absolute 'cwd' or the harness's 'harness_session' id")
    sid = f"{ask.harness}-" + (slug(ask.harness_session)[:40] or "session")
    return sid, SessionIn(title=f"{adapter(ask.harness).label} session")


def checkout_session(root: str, taken_by: str | None, exists: bool) -> tuple[str, SessionIn]:
    """The session for a checkout at `root`, named after its folder.

    `taken_by` is the cwd scope of the session already holding that name (None: unscoped):
    one made by hand without a scope is adopted; one scoped elsewhere (another checkout with
    the same folder name) is left alone and this one gets a suffix.
    """
    name = PurePosixPath(root).name or "root"
    sid = slug(name) or "session"
    if exists and taken_by not in (None, root):
        sid = f"{sid}-{hashlib.sha1(root.encode()).hexdigest()[:6]}"
    return sid, SessionIn(cwd=root, title=None if exists else name)
