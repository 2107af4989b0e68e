"""Agent actions in: kept redacted in a ring per session, and the watches they call for added
by themselves (marked automatic, with the reason), then a snapshot once the launch settles.

A command that launches something (in the background, with `nohup`, `&`, `setsid`, …) or
builds something gets a settling snapshot a moment later, so a launch is seen even when it
ends before anyone asks for a dump; that snapshot also looks at the machine (long-lived
processes of the workspace and the files on their stdout) and at what a build produced.
"""

import contextlib
import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from pydantic import BaseModel, Field, ValidationError

from ctxd import confine, redact
from ctxd.attempts import binding
from ctxd.attempts.model import Attempt
from ctxd.discovery import procscan, rules
from ctxd.discovery.actions import Action, CommandAction
from ctxd.discovery.shellparse import CommandFacts, SimpleCommand, parse_command
from ctxd.errors import CtxdError
from ctxd.models import LogWatch, ProcessWatch, Strict, Trigger, Watch, WatchIn, WatchSpec
from ctxd.redact import known as redact_known
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.usecases.scrub import Scrubber

log = logging.getLogger("ctxd")


class ActionsIn(Strict):
    """What an agent just did, harness-neutral: shell commands, file edits, prompts."""

    actions: list[Action] = Field(min_length=1, max_length=100)


class ActionsOut(BaseModel):
    recorded: int
    watches: list[Watch]  # the watches these actions added by themselves


# Admits a watch the way the use cases do (allowlist, roots, limit), with its reason.
Admit = Callable[[str, WatchSpec, str], Watch]

SETTLE_S = 1.0  # a launch has forked its workers and opened its log by then
# The settling snapshot takes the process table its workspace scan read just before, unless
# the steps between (stdout files, a build's walk) took longer than this.
SCAN_TABLE_AGE_S = 0.5
# Ended attempts whose logs stay watched: the newest two failures', as their logs end.
ENDED_LOGS_KEPT = 2
BUILD_WINDOW_S = 600.0  # without a previous action, a build looked this far back
ARTIFACT_SUFFIXES: tuple[str, ...] = (".whl", ".so", ".a", ".tar.gz", ".zip", ".egg", ".jar")
ARTIFACT_SUFFIXES += (".deb", ".rpm", ".bin", ".exe", ".cubin", ".fatbin", ".ptx", ".dylib", ".pyd")
_SKIP_DIRS = {"node_modules", "__pycache__", "venv", "site-packages"}
SCAN_ENTRIES_MAX = 20_000
BUILT_WATCHES_MAX = 4


class ActionIntake:
    def __init__(self, snap: Snapshotter, admit: Admit, scrubber: Scrubber) -> None:
        self.snap = snap
        self.store = snap.store
        self.admit = admit
        self.scrubber = scrubber
        self._lock = threading.Lock()
        self._reads: dict[str, Counter[str]] = {}
        self._last_at: dict[str, datetime] = {}
        self._pending: dict[str, threading.Timer] = {}
        self._builds: dict[str, list[tuple[datetime, str]]] = {}

    def close(self) -> None:
        with self._lock:
            for timer in self._pending.values():
                timer.cancel()
            self._pending.clear()

    def record(self, sid: str, actions: list[Action]) -> list[Watch]:
        """Store each action (redacted first) and add the watches it calls for, unless the
        session switched discovery off."""
        added: list[Watch] = []
        discover = self.store.get_session(sid).discovery
        for action in actions:
            if isinstance(action, CommandAction):  # its flags' and headers' secrets, first
                known = redact_known.generation
                redact.learn_command(action.command)
                if redact_known.generation != known:  # stored before it was known: scrubbed
                    self.scrubber.request()
            action = redact.scrub(action)
            body = action.model_dump(mode="json", exclude={"at"})
            self.store.add_action(sid, action.kind, action.at, body)
            if isinstance(action, CommandAction) and discover:
                added += self._command(sid, action)
            with self._lock:
                self._last_at[sid] = action.at
        return added

    def _command(self, sid: str, action: CommandAction) -> list[Watch]:
        if action.refused:  # the harness never ran it: no launch, no build, nothing to watch
            return []
        facts = parse_command(action.command)
        launches = rules.launched(facts, action.background)
        if launches:
            self._retire_ended(sid)
        counts = self._reads.setdefault(sid, Counter())
        existing = self._existing(sid)
        proposals = rules.propose_for_command(
            facts,
            cwd=action.cwd,
            at=action.at,
            background=action.background,
            existing=existing,
            read_counts=counts,
            allowed=self._allowed(),
            cap=len(existing) + rules.AUTO_WATCH_CAP,  # the cap is applied below
        )
        for read in facts.reads:
            counts[os.path.normpath(os.path.join(action.cwd or "/", read))] += 1
        room = rules.AUTO_WATCH_CAP - sum(1 for w in existing if w.get("auto"))
        if len(proposals) > room:
            room += self._make_room(sid, len(proposals) - room)
        added = [w for p in proposals[: max(0, room)] if (w := self._admit(sid, p)) is not None]
        if launches:  # after its watches: a snapshot that reads the attempt has them too
            logs = rules.launch_logs(facts, launches, action.cwd)
            attempts = [_attempt(action, facts, *each) for each in zip(launches, logs, strict=True)]
            self._follow_newest(sid, attempts)
            with self.store.held():  # see binding.save
                self.store.save_attempts(
                    sid, [binding.joining(self.store, sid, a) for a in attempts]
                )
        if facts.builds:
            with self._lock:
                since = self._last_at.get(sid) or action.at - timedelta(seconds=BUILD_WINDOW_S)
                self._builds.setdefault(sid, []).append((since, facts.builds[0].tool))
        if facts.launches or action.background or facts.builds:
            self._settle_later(sid)
        return added

    def _follow_newest(self, sid: str, attempts: list[Attempt]) -> None:
        """An automatic process watch of a program launched again expects what the newest
        attempt expects, in its folder (the ports of run 1 are not run 24's), and shows the
        variables its line sets (`export APP_DEBUG=1; nohup …`) besides the earlier ones'."""
        for watch in self.store.list_watches(sid):
            spec = watch.spec
            if not watch.auto or not isinstance(spec, ProcessWatch):
                continue
            for attempt in attempts:
                if rules.program_pattern(attempt.argv) != spec.match:
                    continue
                env = list(dict.fromkeys([*sorted(attempt.env), *spec.env]))[: rules.ENV_NAMES_MAX]
                update: dict[str, object] = {
                    "expect_ports": list(attempt.expected_ports), "cwd": attempt.cwd, "env": env
                }  # fmt: skip
                if update != {"expect_ports": spec.expect_ports, "cwd": spec.cwd, "env": spec.env}:
                    self.store.replace_spec(sid, watch.id, spec.model_copy(update=update))

    def _make_room(self, sid: str, wanted: int) -> int:
        """Retire up to `wanted` automatic log watches, oldest first, so that a long session's
        newest attempts are watched too: those of attempts that ended (the error each ended
        with is kept with its attempt), then those of attempts launched and not seen running
        (a burst of launches faster than any snapshot); never one a running attempt writes.
        How many were retired."""
        ended, unseen = self._idle_log_watches(sid)
        retired = (ended + unseen)[:wanted]
        for watch_id in retired:
            self.store.delete_watch(sid, watch_id)
        return len(retired)

    def _retire_ended(self, sid: str) -> None:
        """At a launch, retire the automatic log watches of attempts that ended but the
        newest two's: each ended attempt keeps its error and the log it is in, and a long
        session's snapshots read, store and show its live runs' logs and its newest failures',
        not fifteen of old runs (which every budget cut then dropped)."""
        ended, _ = self._idle_log_watches(sid)
        for watch_id in ended[:-ENDED_LOGS_KEPT]:
            self.store.delete_watch(sid, watch_id)

    def _idle_log_watches(self, sid: str) -> tuple[list[int], list[int]]:
        """The automatic log watches, oldest first, of attempts that all ended, and of
        attempts launched and not seen running."""
        logs = [
            (w.id, w.spec.path)
            for w in self.store.list_watches(sid)
            if w.auto and isinstance(w.spec, LogWatch)
        ]
        idle = self.store.idle_logs(sid, [path for _, path in logs])
        ended = [watch_id for watch_id, path in logs if idle.get(path) is True]
        unseen = [watch_id for watch_id, path in logs if idle.get(path) is False]
        return ended, unseen

    def _existing(self, sid: str) -> list[dict]:
        return [{**w.spec.model_dump(), "auto": w.auto} for w in self.store.list_watches(sid)]

    def _allowed(self) -> Callable[[str], bool]:
        roots = confine.roots(self.snap.settings)
        return lambda path: confine.allowed(path, roots)

    def _admit(self, sid: str, proposal: dict) -> Watch | None:
        reason = str(proposal.get("reason") or "added by ctxd")
        fields = {k: v for k, v in proposal.items() if k not in ("auto", "reason")}
        try:
            return self.admit(sid, WatchIn.model_validate(fields).root, reason)
        except (CtxdError, ValidationError) as exc:  # not allowed, or the cap: skip quietly
            log.debug("automatic watch %s refused: %s", fields.get("kind"), redact.text(str(exc)))
            return None

    def _settle_later(self, sid: str) -> None:
        """One settling snapshot per burst of launches (debounced)."""
        with self._lock:
            if (old := self._pending.pop(sid, None)) is not None:
                old.cancel()
            timer = threading.Timer(SETTLE_S, self._settle, args=(sid,))
            timer.daemon = True
            self._pending[sid] = timer
            timer.start()

    def _settle(self, sid: str) -> None:
        with self._lock:
            self._pending.pop(sid, None)
            builds = self._builds.pop(sid, [])
        try:
            # judged by what was recorded before the scan below read the process table
            cut = binding.cutoff(self.store, sid)
            session = self.store.get_session(sid)
            if session.cwd:
                self._from_machine(sid, session.cwd)
                for since, tool in builds:
                    self._from_build(sid, session.cwd, since, tool)
            recent = time.monotonic() - SCAN_TABLE_AGE_S
            cut = replace(cut, at=max(cut.at, recent))
            self.snap.take(sid, Trigger.ACTION, cut=cut)
        except Exception:  # a background step must never take the service down
            log.exception("settling snapshot of %s failed", sid)

    def _from_machine(self, sid: str, workspace: str) -> None:
        """Long-lived workspace processes and the files on their stdout, however started."""
        roots = procscan.roots(procscan.workspace_processes([workspace], min_age_s=0.5))
        found = [(c, procscan.stdio_files(c.pid)) for c in roots]
        proposals = rules.propose_from_machine(
            found, existing=self._existing(sid), allowed=self._allowed()
        )
        for proposal in proposals:
            self._admit(sid, proposal)

    def _from_build(self, sid: str, workspace: str, since: datetime, tool: str) -> None:
        """What a build changed in the workspace, as globs (a rebuild renames its output)."""
        existing = {w.spec.path for w in self.store.list_watches(sid) if hasattr(w.spec, "path")}
        at = since.strftime("%H:%M")
        for pattern in built_since(workspace, since.timestamp() - 1)[:BUILT_WATCHES_MAX]:
            if pattern not in existing:
                spec = WatchIn.model_validate({"kind": "artifact", "path": pattern}).root
                with contextlib.suppress(CtxdError):  # outside the roots, or the cap
                    self.admit(sid, spec, f"built by `{tool}` after {at}")


def _attempt(
    action: CommandAction, facts: CommandFacts, launch: SimpleCommand, logs: list[str]
) -> Attempt:
    """An attempt as its command makes it, before any process is seen (`seen` False): what the
    agent wrote (already redacted), where, when, the files its output goes to and its ports.
    A snapshot binds it to the process it spawned (`attempts/binding.py`)."""
    started = action.at - timedelta(seconds=action.duration_s or 0)
    return Attempt(
        start_key=f"cmd:{uuid.uuid4().hex}",
        watch_id=None,
        pid=None,
        started_at=started,
        argv=tuple(launch.argv),
        cwd=rules.launch_dir(launch, action.cwd),
        env=dict(launch.env),
        expected_ports=tuple(sorted(set(facts.ports))[:32]),
        command=action.command,
        tool_id=action.tool_id,
        logs=tuple(logs),
        seen=False,
    )


def built_since(top: str, since: float) -> list[str]:
    """Globs (`dist/*.whl`) of artifact files under `top` modified after `since`, newest
    first; the walk skips hidden and dependency folders and stops after SCAN_ENTRIES_MAX."""
    found: dict[str, float] = {}
    seen = 0
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS]
        seen += len(files) + len(dirs)
        if seen > SCAN_ENTRIES_MAX:
            break
        for name in files:
            suffix = next((s for s in ARTIFACT_SUFFIXES if name.endswith(s)), None)
            if suffix is None:
                continue
            try:
                mtime = os.lstat(os.path.join(folder, name)).st_mtime
            except OSError:
                continue
            if mtime >= since:
                glob = os.path.join(folder, "*" + suffix)
                found[glob] = max(mtime, found.get(glob, 0.0))
    return sorted(found, key=lambda g: -found[g])
