"""What a dump says about the agent's own work, learned without asking: attempts merged with
the journal's own, its recent commands, its workspace (git), the watches ctxd added."""

from datetime import datetime
from pathlib import PurePosixPath

from ctxd import redact
from ctxd.attempts import history
from ctxd.attempts.model import AttemptUpdate
from ctxd.discovery.actions import CommandAction
from ctxd.discovery.recent import last_reads, recent_commands
from ctxd.discovery.workspace import GitSection, git_section
from ctxd.models import Narrative, Said, Session, Watch
from ctxd.store.database import Store

RECENT_COMMANDS = 8
RECENT_EDITS = 8
WAKES_SHOWN = 3
GIT_TIMEOUT_S = 1.0


def workspace_git(session: Session) -> GitSection | None:
    """The git state of the session's workspace: two `git` processes, which the snapshot runs
    beside its collectors, not after them (they cost several milliseconds)."""
    return git_section(session.cwd, timeout=GIT_TIMEOUT_S) if session.cwd else None


def enrich(
    narrative: Narrative,
    store: Store,
    session: Session,
    watches: list[Watch],
    git: GitSection | None,
    pending: list[AttemptUpdate],
    commands: list[dict] | None = None,
) -> None:
    """Fill in what ctxd learned itself; `git` is `workspace_git(session)`, `pending` the
    attempt updates `binding.observed` found and the snapshot has not saved yet, `commands`
    the newest command actions as `store.list_actions` gives them (read here when None)."""
    sid = session.id
    if session.objective_source and narrative.objective == session.objective:
        narrative.objective_source = session.objective_source
    narrative.history = history.history(store, sid, narrative.attempts, pending)
    if commands is None:
        commands = store.list_actions(sid, "command")
    recorded = [CommandAction.model_validate(a) for a in commands]
    launches = [
        (item.command, item)
        for item in narrative.history
        if item.source == "launch" and item.command and item.status != "folded"
    ]
    made = {line: (f"{i.label}" + (f" (pid {i.pid})" if i.pid else ""), i.at)
            for line, i in launches}  # fmt: skip
    recent = recent_commands(recorded, RECENT_COMMANDS, made)
    narrative.recent_commands = [c.line() for c in recent]
    *before, narrative.last_read = [None, None, *last_reads(recorded)][-2:]
    narrative.read_before = before[0]
    narrative.workspace = _workspace(store, session, git)
    slept = store.list_actions(sid, "dormant", 1)
    if slept and (since := datetime.fromisoformat(slept[-1]["at"])) > store.last_snapshot_at(sid):
        narrative.dormant_since = since  # it slept after the version before this one
    narrative.wakes = [
        Said(at=datetime.fromisoformat(w["at"]), text=_woken_with(w))
        for w in store.list_actions(sid, "wake", WAKES_SHOWN)
    ]
    narrative.auto_watches = [_describe(w) for w in watches if w.auto]


def _workspace(store: Store, session: Session, git: GitSection | None) -> str | None:
    """`main` at 1a2b3c4 (subject); 2 files changed: …; edited lately: …"""
    edits = [a["path"] for a in store.list_actions(session.id, "file_edit", RECENT_EDITS * 4)]
    recent = list(dict.fromkeys(reversed(edits)))[:RECENT_EDITS]
    parts = []
    if git is not None:
        where = f"`{git.branch or 'detached HEAD'}`"
        if git.head:
            where += f" at {git.head} ({git.subject})" if git.subject else f" at {git.head}"
        parts.append(where)
        if git.dirty_count:
            parts += _dirty(git)
    if recent:
        top = session.cwd or ""
        parts.append("edited lately: " + ", ".join(_short(p, top) for p in recent))
    return redact.text("; ".join(parts)) if parts else None


def _woken_with(wake: dict) -> str:
    """A wake in a few words: "attempt 2 stuck; attempt 3 died" (the full text was the
    agent's; the dump says the state itself)."""
    pairs = zip(wake.get("attempts") or [], wake.get("kinds") or [], strict=False)
    return "; ".join(f"attempt {n} {kind}" for n, kind in pairs) or str(wake.get("text", ""))


def _dirty(git: GitSection) -> list[str]:
    """What differs from HEAD, source apart from outputs: "changed since HEAD: Makefile
    (+2 -0)"; "not in git: dist/, server.log"."""
    tracked = [p for p in git.dirty if p not in git.untracked]
    new = [p for p in git.dirty if p in git.untracked]
    hidden = git.dirty_count - len(git.dirty)
    out = []
    if tracked:
        since = "since HEAD" if git.head else "staged"
        shown = ", ".join(f"{p} ({git.lines[p]})" if p in git.lines else p for p in tracked)
        out.append(f"changed {since}: {shown}")
    if new:
        out.append(f"not in git: {', '.join(new)}")
    if hidden > 0:
        out.append(f"and {hidden} more changed paths")
    return out


def _short(path: str, top: str) -> str:
    try:
        return str(PurePosixPath(path).relative_to(top)) if top else path
    except ValueError:
        return path


def _describe(watch: Watch) -> str:
    spec = watch.spec
    target = getattr(spec, "match", None) or getattr(spec, "path", None)
    if target is None:
        target = getattr(spec, "port", None) or getattr(spec, "name", None) or spec.kind
    return f"{spec.kind} `{target}` (watch {watch.id}): {watch.reason}"
