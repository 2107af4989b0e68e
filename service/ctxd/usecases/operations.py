"""The use cases: every operation a transport (HTTP, MCP, CLI via HTTP) performs, in one place.

A transport only translates its input into these calls and their results or `CtxdError`s
into its answers. The rules that apply to what an agent writes live here: redaction before
anything is stored, watch admission, journal status rules, and activity marking (any call
about a session counts as its activity; the quiet trigger waits for silence).
"""

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Any

import psutil

from ctxd import __version__, confine, redact
from ctxd.attempts import reconcile
from ctxd.attempts.binding import LogFiles
from ctxd.discovery.actions import Action, CommandAction, parse_action
from ctxd.discovery.harness_files import output_tail
from ctxd.discovery.objective import first_prompt_in_transcript, is_substantive
from ctxd.discovery.payloads import OUTPUT_TAIL_MAX_CHARS
from ctxd.errors import Invalid, NotFound
from ctxd.harness import conversations, resolve
from ctxd.harness.adapter import RESUME_SOURCES, HarnessName
from ctxd.harness.conversations import Placed
from ctxd.harness.events import (
    INJECT_MAX_CHARS,
    SUMMARY_MAX_CHARS,
    HookIn,
    HookOut,
    TurnMarks,
    WakeIn,
    WakeOut,
)
from ctxd.harness.policy import HOOK_MAX_CHARS, is_continue
from ctxd.harness.registry import adapter as harness_adapter
from ctxd.harness.resolve import Resolved, ResolveIn
from ctxd.hookclient import hook as hook_client
from ctxd.hookclient.harnesses import HOOKS
from ctxd.models import (
    Diff,
    JournalEntry,
    JournalIn,
    JournalUpdate,
    Observations,
    Session,
    SessionIn,
    Snapshot,
    SnapshotSummary,
    Trigger,
    Watch,
    WatchSpec,
    check_status,
)
from ctxd.models.base import SESSION_ID_RULE, is_device_name
from ctxd.models.sessions import is_system_folder
from ctxd.peers import serve as peers_serve
from ctxd.peers.fanout import Peers, PeerStatus
from ctxd.peers.serve import ObserveIn
from ctxd.redact.names import is_secret_name
from ctxd.snapshotter import news
from ctxd.snapshotter.line_waits import line_waits
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.snapshotter.triggers import Activity
from ctxd.store.connection import now
from ctxd.store.peers import Peer, PeerIn
from ctxd.usecases import recovery
from ctxd.usecases.admission import admit
from ctxd.usecases.agent_actions import ActionIntake
from ctxd.usecases.scrub import Scrubber
from ctxd.usecases.search import SearchResult, find

OBJECTIVE_CHARS = 2000
AGENT_SAID_MAX_CHARS = 2000  # the agent's last reply, as a dump quotes it


class UseCases:
    """ctxd's operations over one snapshotter (and its store) and the in-memory activity."""

    def __init__(self, snap: Snapshotter, activity: Activity) -> None:
        self.snap = snap
        self.store = snap.store
        self.settings = snap.settings
        self.activity = activity
        self.scrubber = Scrubber(snap.store, snap.files)
        self.intake = ActionIntake(
            snap, lambda sid, spec, why: self.add_watch(sid, spec, why)[0], self.scrubber
        )
        self._transcripts_read: set[str] = set()
        self.turns = TurnMarks()
        # hook events by how they came: posted by the harness itself, or by `ctxd hook`
        self.hook_events = {"posted": 0, "by_command": 0}
        self.hook_last: dict[str, str] = {}  # harness -> when its last event came (ISO)
        self._compacting: dict[tuple[str, str], int] = {}  # the version taken as it compacts

    def close(self) -> None:
        self.intake.close()
        self.scrubber.close()

    def _active(self, sid: str) -> str:
        """One rule for every transport: a call about a session is activity of that session."""
        self.activity.mark(sid)
        return sid

    # --- service ----------------------------------------------------------------------------

    def health(self) -> dict[str, str | int]:
        size = self.snap.data_dir_bytes()
        storage = "read-only" if self.store.read_only else "writable"
        return {"status": "ok", "version": __version__, "data_dir_bytes": size, "storage": storage,
                "hooks_posted": self.hook_events["posted"],
                "hooks_by_command": self.hook_events["by_command"],
                **{f"last_hook_{name}": at for name, at in self.hook_last.items()}}  # fmt: skip

    def prune(self, keep_days: int | None = None) -> int:
        return self.snap.prune(keep_days or self.settings.keep_days)

    # --- sessions ---------------------------------------------------------------------------

    def put_session(self, sid: str, data: SessionIn) -> tuple[Session, bool]:
        """Create or update a session; returns it and whether it was created."""
        if is_device_name(sid):
            raise Invalid(f"{sid!r} is a device's name on some systems: {SESSION_ID_RULE}")
        return self.store.put_session(self._active(sid), redact.scrub(data))

    def list_sessions(self, cwd: str | None = None) -> list[Session]:
        return self.store.list_sessions(cwd=cwd)

    def get_session(self, sid: str) -> Session:
        return self.store.get_session(self._active(sid))

    def resolve_session(self, ask: ResolveIn) -> Resolved:
        """The session of the agent that asks, made if need be (see `harness/resolve.py`)."""
        return Resolved.model_validate(self._resolve(ask).model_dump())

    def _resolve(self, ask: ResolveIn) -> Session:
        if ask.session:
            return self.put_session(ask.session, SessionIn())[0]
        if not ask.cwd.startswith("/"):
            return self.put_session(*resolve.harness_session(ask))[0]
        if scoped := self.store.list_sessions(cwd=ask.cwd):
            return self.get_session(scoped[0].id)
        root = ask.root if ask.root.startswith("/") else ask.cwd
        if is_system_folder(root):  # no project to scope to: the conversation's own session
            return self.put_session(*resolve.harness_session(ask))[0]
        base, _ = resolve.checkout_session(root, None, exists=False)
        try:
            taken_by, exists = self.store.get_session(base).cwd, True
        except NotFound:
            taken_by, exists = None, False
        return self.put_session(*resolve.checkout_session(root, taken_by, exists))[0]

    def heartbeat(self, sid: str) -> None:
        self.store.get_session(self._active(sid))

    # --- peers ------------------------------------------------------------------------------

    @property
    def _peers(self) -> Peers:
        peers = self.snap.runner.peers
        assert peers is not None  # the Snapshotter always gives its runner the directory
        return peers

    def put_peer(self, name: str, data: PeerIn) -> tuple[Peer, bool]:
        return self._peers.put(name, data)

    def list_peers(self) -> list[PeerStatus]:
        """Each peer with its reachability, round trip and clock offset, asked now."""
        return self._peers.status()

    def delete_peer(self, name: str) -> None:
        self._peers.delete(name)

    def peer_observe(self, ask: ObserveIn) -> Observations:
        """Another host's watches observed here, each admitted as a local one would be."""
        runner = self.snap.runner
        return peers_serve.observe(
            runner, ask, self._peers.callers, lambda spec: admit(spec, self.settings)
        )

    # --- watches ----------------------------------------------------------------------------

    def add_watch(self, sid: str, spec: WatchSpec, reason: str | None = None) -> tuple[Watch, bool]:
        """Admit a watch: the command allowlist (403), the watch roots (403), the limit (409).
        Returns it and whether it was added: the same watch asked for again is the one the
        session has. A `reason` marks one ctxd added by itself (automatic)."""
        self._active(sid)
        if getattr(spec, "host", None) is None:  # a peer's watch is admitted by that peer
            spec = admit(spec, self.settings)
        # a health URL or path may carry a token: what is kept is what may be shown
        limit = self.settings.limits.max_watches_per_session
        return self.store.add_watch_once(sid, redact.scrub(spec), limit, reason)

    def list_watches(self, sid: str) -> list[Watch]:
        return self.store.list_watches(self._active(sid))

    def get_watch(self, sid: str, wid: int) -> Watch:
        return self.store.get_watch(self._active(sid), wid)

    def remove_watch(self, sid: str, wid: int) -> None:
        self.store.delete_watch(self._active(sid), wid)

    # --- journal ----------------------------------------------------------------------------

    def add_entry(self, sid: str, entry: JournalIn) -> JournalEntry:
        # scrub the model, not its dump: a fact is redacted by its key (api_key = ...)
        return self.store.add_entry(self._active(sid), redact.scrub(entry))

    def update_entry(self, sid: str, eid: int, update: JournalUpdate) -> JournalEntry:
        fields = update.model_dump(exclude_unset=True)
        if "text" in fields and fields["text"] is None:  # an entry's text is never NULL
            raise Invalid("text: cannot be null; omit it to keep the current text")
        entry = self.store.get_entry(self._active(sid), eid)
        if "status" in fields:
            check_status(entry.kind, fields["status"])
        fields = redact.scrub(fields)
        if fields.get("text") and entry.key and is_secret_name(entry.key):
            redact.learn(update.text or "")
            fields["text"] = redact.REDACTED  # a fact named like a secret keeps no value
        if "concerns" in fields:
            fields["concerns"] = fields["concerns"] or []
        return self.store.update_entry(sid, eid, fields)

    def list_entries(self, sid: str) -> list[JournalEntry]:
        return self.store.list_entries(self._active(sid))

    # --- snapshots and recovery -------------------------------------------------------------

    def take(self, sid: str, note: str | None = None, force: bool = False) -> Snapshot:
        return self.snap.take(self._active(sid), Trigger.MANUAL, note=note, force=force)

    def list_snapshots(self, sid: str) -> list[SnapshotSummary]:
        return self.store.list_snapshots(self._active(sid))

    def get_snapshot(self, sid: str, version: int) -> Snapshot:
        return self.store.get_snapshot(self._active(sid), version)

    def get_markdown(self, sid: str, version: int) -> str:
        return self.store.get_markdown(self._active(sid), version)

    def search(self, sid: str | None, q: str, limit: int = 20, offset: int = 0) -> SearchResult:
        """Ranked hits of `q` in one session's history, or in every session's (sid None)."""
        return find(self.store, None if sid is None else self._active(sid), q, limit, offset)

    def latest_dump(self, sid: str) -> str:
        """The latest stored dump as Markdown (what the MCP resource serves)."""
        self.store.get_session(sid)
        version = self.store.latest_version(sid)
        if not version:
            raise NotFound(f"session '{sid}' has no snapshot yet; call take_snapshot")
        return self.snap.latest_in_memory(sid) or self.store.get_markdown(sid, version)

    def resume_from_memory(
        self,
        sid: str,
        *,
        fresh: bool = True,
        max_chars: int | None = None,
        since: int | None = None,
    ) -> str | None:
        """The latest dump from memory when nothing needs computing (no I/O, so it may run on
        the event loop); None means "call `resume`"."""
        return recovery.resume_from_memory(
            self.snap, self._active(sid), fresh=fresh, max_chars=max_chars, since=since
        )

    def resume(
        self,
        sid: str,
        *,
        fresh: bool = True,
        max_chars: int | None = None,
        since: int | None = None,
    ) -> str:
        cached = self.resume_from_memory(sid, fresh=fresh, max_chars=max_chars, since=since)
        if cached is not None:
            return cached
        return recovery.resume(self.snap, sid, fresh=fresh, max_chars=max_chars, since=since)

    def prompt(self, sid: str, text: str, max_chars: int = HOOK_MAX_CHARS) -> str | None:
        """A prompt a hook saw: recorded as the latest message; a bare "continue" instead takes
        a fresh snapshot and returns it cut to `max_chars`, for the hook to inject."""
        if not is_continue(text):
            self.note_prompt(sid, text)
            return None
        self.message(sid, "", typed=text)
        return self.resume(sid, fresh=False, max_chars=max_chars)

    def note_prompt(self, sid: str, text: str) -> None:
        """A user's prompt, kept as the latest message; the first substantive one stands as
        the objective while none was set."""
        if is_continue(text):
            self.store.touch(self._active(sid))
            self.store.add_prompt(sid, text.strip())  # a bare "continue" counts, as typed
            return
        self.message(sid, text)
        session = self.store.get_session(sid)
        if not session.objective and is_substantive(text):
            self._user_objective(sid, text)

    def objective_from_transcript(self, sid: str, path: str) -> None:
        """While a session has no objective, the first substantive prompt of the harness's
        transcript stands for it (the user's words from before ctxd was installed). Only a
        `.jsonl` under a `.claude/projects` folder inside the watch roots is read."""
        session = self.store.get_session(sid)
        if session.objective or path in self._transcripts_read:
            return
        if len(self._transcripts_read) > 10_000:  # one per conversation: bounded anyway
            self._transcripts_read.clear()
        self._transcripts_read.add(path)
        # resolved, checked (a .jsonl under .claude/projects inside the roots) and read on one
        # descriptor, never blocking, within a time: see first_prompt_in_transcript
        if text := first_prompt_in_transcript(path, roots=confine.roots(self.settings)):
            self._user_objective(sid, text)

    def _user_objective(self, sid: str, text: str) -> None:
        """The user's own words stand as the objective, marked as such."""
        objective = redact.text(text.strip())[:OBJECTIVE_CHARS]
        self.store.set_objective(sid, objective, "the user's first prompt")

    # --- what the agent did ------------------------------------------------------------------

    def record_actions(self, sid: str, actions: list[Action]) -> list[Watch]:
        """The agent's actions, kept redacted; returns the watches they added by themselves."""
        self.store.get_session(self._active(sid))  # an unknown session is a 404
        return self.intake.record(sid, actions)

    async def wake(self, harness: HarnessName, given: WakeIn) -> WakeOut:
        """A waiter's long poll: the session's attempts' news as soon as there is some
        (claimed: handed out once, and recorded as delivered), else, after `wait_s`, whether
        anything is still pending. Waits on the news board: no thread, no CPU."""
        sid = await asyncio.to_thread(self._waiter_session, harness, given)
        if not self.settings.wake:
            return WakeOut(session=sid)
        latest = await asyncio.to_thread(self.snap.latest, sid)
        waits = self.snap.news.waits_for(sid)
        waiting = given.launched or news.pending(latest, None, waits)  # else: what is there
        got = await self.snap.news.wait(sid, given.wait_s if waiting else 0)
        latest = await asyncio.to_thread(self.snap.latest, sid) if got else latest
        waits = self.snap.news.waits_for(sid)
        if not got:
            return WakeOut(session=sid, pending=given.launched or news.pending(latest, None, waits))
        if given.harness_pid and not psutil.pid_exists(given.harness_pid):
            self.snap.news.give_back(sid, got)  # nobody to wake: the next dump tells it
            return WakeOut(session=sid)
        text = redact.text(news.wake_text(sid, got, latest, waits))
        body = {"text": text, "attempts": [o.number for o in got], "kinds": [o.kind for o in got]}
        await asyncio.to_thread(self.store.add_action, sid, "wake", datetime.now(UTC), body)
        return WakeOut(session=sid, text=text, pending=news.pending(latest, None, waits))

    async def news(
        self, sid: str, since: int | None = None, attempt: int | None = None,
        wait_s: float = 0, reader: bool = False,
    ) -> news.NewsOut:  # fmt: skip
        """What the session's attempts (or attempt `attempt`) came to after version `since`
        (serving, stuck, died, ended; None: from now on): at once when something has, else as
        soon as something does, nothing after `wait_s`. Claims nothing: a wake is still
        delivered. An agent's wait makes its attempts looked at often meanwhile; a page's
        `reader` does not."""
        await asyncio.to_thread(self.store.get_session, sid)  # an unknown session is a 404
        if not self.snap.news.recalled(sid):
            await asyncio.to_thread(self._recall_news, sid)
        if since is None:
            since = self.snap.news.through(sid)
        got = await self.snap.news.follow(sid, since, attempt, wait_s, waiter=not reader)
        latest = await asyncio.to_thread(self.snap.latest, sid)
        told = [news.NewsItem(attempt=o.number, kind=o.kind, text=redact.text(o.text), at=o.at,
                              version=o.version) for o in got]  # fmt: skip
        pending = news.pending(latest, attempt, self.snap.news.waits_for(sid))
        cursor = max([since, *(o.version for o in got)])
        return news.NewsOut(session=sid, version=cursor, news=told, pending=pending)

    def _recall_news(self, sid: str) -> None:
        """The outcomes of the session's newest stored versions, for readers of a board that
        began after them (a restart): each version compared with the one before it."""
        newest = self.store.latest_version(sid)
        actions = self.store.list_actions(sid, "command", limit=50)
        commands = [(datetime.fromisoformat(a["at"]), str(a.get("command", ""))) for a in actions]
        waits = line_waits(actions)
        found: list[news.Outcome] = []
        first = max(1, newest - news.RECALL_VERSIONS + 1)
        previous = None  # before version 1: none, as when it was stored
        for version in range(first - 1 if first > 1 else first, newest + 1):
            with contextlib.suppress(NotFound):  # a version pruned away
                current = self.store.get_snapshot(sid, version)
                if version >= first:
                    found += news.outcomes(previous, current, commands, waits)
                previous = current
        self.snap.news.recall(sid, found, newest)

    def _waiter_session(self, harness: HarnessName, given: WakeIn) -> str:
        event = harness_adapter(harness).event(given.payload)
        ask = ResolveIn(harness=harness, session=given.session, cwd=event.cwd[:4096],
                        root=given.root, harness_session=event.conversation[:4096])  # fmt: skip
        return self.place(ask, False, event.source, given.harness_pid).sid

    def place(self, ask: ResolveIn, ended: bool, source: str, pid: int | None) -> Placed:
        """The session of a hook event's conversation, bound on first sight (`ended`: the event
        ends the conversation; `source`: how a conversation starts; `pid`: the harness process
        the hook ran under, when the hook could tell); the rules: `harness/conversations.py`."""
        store, conversation = self.store, ask.harness_session
        root = ask.root if ask.root.startswith("/") else ask.cwd
        if ask.session or not conversation or not ask.cwd.startswith("/") or is_system_folder(root):
            return Placed(self.resolve_session(ask).id)  # no project: the conversation's own
        at, process = now(), conversations.process(pid)
        bound = store.conversation(ask.harness, conversation)
        scope = self.get_session(bound["session"]).cwd if bound is not None else None
        if bound is not None and conversations.within(ask.cwd, scope):
            store.see_conversation(ask.harness, conversation, at, process=process, ended=ended)
            return Placed(bound["session"])
        before = store.conversation_of_process(ask.harness, *process) if process else None
        if before is not None and conversations.within(
            ask.cwd, self.get_session(before["session"]).cwd
        ):  # the same harness process moved on to a new conversation (/clear, opencode's /new)
            store.see_conversation(
                ask.harness, conversation, at, sid=before["session"], process=process, ended=ended
            )
            return Placed(before["session"])
        latest = self.resolve_session(ask.model_copy(update={"harness_session": ""}))
        others = [c for c in store.conversations_of(latest.id) if c["conversation"] != conversation]
        live_s = self.settings.conversation_live_s
        placed = Placed(latest.id)
        if any(conversations.live(c, at, live_s) for c in others) and source not in RESUME_SOURCES:
            sid, title, said = conversations.own_session(latest, conversation)
            self.put_session(sid, SessionIn(cwd=latest.cwd, title=title))
            placed = Placed(sid, said)
        elif others and source == "startup":
            placed.pointer = conversations.pointer_to_latest(latest, at)
        store.see_conversation(
            ask.harness, conversation, at, sid=placed.sid, process=process, ended=ended
        )
        return placed

    def http_hook(self, harness: HarnessName, payload: dict[str, Any]) -> dict[str, Any]:
        """A hook event the harness posted itself (Claude Code's HTTP hooks: no process per
        event): handled as `ctxd hook` forwards one, the tool's output cut to its end and
        the checkout found here, and answered in the harness's own hook output shape."""
        adapter = HOOKS.get(harness)
        if adapter is None:
            raise NotFound(f"{harness} posts no hook events of its own")
        cwd = payload.get("cwd")
        given = HookIn(
            payload={**payload, "tool_response": hook_client.tail(payload.get("tool_response"))},
            root=hook_client.git_root(cwd) if isinstance(cwd, str) else "",
        )
        answer = self.hook(harness, given, posted=True).model_dump()
        return adapter.output(adapter.event_name(payload) or "", answer) or {}

    def hook(self, harness: HarnessName, given: HookIn, posted: bool = False) -> HookOut:
        """A harness's hook event: its conversation's session, what to record, what to hand
        the model (at most one dump per turn)."""
        self.hook_events["posted" if posted else "by_command"] += 1
        self.hook_last[harness] = datetime.now(UTC).isoformat(timespec="seconds")
        adapter = harness_adapter(harness)
        event = adapter.event(given.payload)
        budget = min(given.max_chars or HOOK_MAX_CHARS, INJECT_MAX_CHARS)
        if self.store.read_only and (
            (event.kind == "prompt" and is_continue(event.prompt))
            or (event.kind == "start" and event.source in RESUME_SOURCES)
        ):  # nothing can be recorded: the dump it asks for can still be built
            known = self.store.conversation(harness, event.conversation)
            scoped = self.store.list_sessions(cwd=event.cwd) if event.cwd.startswith("/") else []
            sid = known["session"] if known else scoped[0].id if scoped else None
            if sid is not None:
                return HookOut(session=sid, context=recovery.unsaved(self.snap, sid, budget))
        ask = ResolveIn(
            harness=harness,
            session=given.session,
            cwd=event.cwd[:4096],
            root=given.root,
            harness_session=event.conversation[:4096],
        )
        placed = self.place(ask, event.kind == "end", event.source, given.harness_pid)
        sid = placed.sid
        # a start before any prompt is told apart by its process; any other event by its own
        # id, whichever way it came (a command hook, or an HTTP hook, which has no process)
        process = given.harness_pid if event.kind == "start" else None
        seen = (harness, event.conversation, event.event_id, process)
        if event.event_id and not self.turns.first(seen):
            return HookOut(session=sid)  # delivered again: ctxd's hooks are wired twice
        out = HookOut(session=sid, message=placed.pointer)
        if event.in_flight is not None:  # the harness's own word on its background shells
            self.background_told(sid, harness, event.in_flight)
        if event.kind in ("start", "prompt") and event.transcript_path:
            self.objective_from_transcript(sid, event.transcript_path)
        if event.kind == "tool":
            actions = [parse_action(a) for a in event.actions]
            self.record_actions(sid, self._whole_output(actions, event.output_file))
        elif event.kind == "start" and event.source == "resume":
            # the prompt that resumed it comes next: the dump waits for it, and quotes it (one
            # taken now could only say that the user's latest message was not seen yet)
            self.turns.resumed(sid, event.conversation)
        elif event.kind == "start" and event.source in RESUME_SOURCES:
            out.context = self.resume(sid, max_chars=budget)
            self.turns.mark(sid, event.conversation)
        elif event.kind == "subagent":  # it starts with none of the conversation
            out.context = self.resume(sid, max_chars=budget)
        elif event.kind == "prompt":
            if self.turns.owed(sid, event.conversation):  # the first prompt after a resume
                self.note_prompt(sid, event.prompt)
                out.context = self.resume(sid, max_chars=budget)
            elif self.turns.fresh(sid, event.conversation):
                # the turn began with a dump (a compaction, /clear): the prompt is still recorded
                self.note_prompt(sid, event.prompt)
            else:
                out.context = self.prompt(sid, event.prompt, max_chars=budget)
        elif event.kind == "compact":
            note = f"{adapter.label}: compaction ({event.compaction or 'unknown'} trigger)"
            if len(self._compacting) > 10_000:  # one per conversation compacting: bounded anyway
                self._compacting.clear()
            self._compacting[(sid, event.conversation)] = self.take(sid, note=note).header.version
        elif event.kind == "compacted":
            version = self._compacting.pop((sid, event.conversation), None)
            self.keep_harness_summary(sid, adapter.label, event.summary, version)
        elif event.kind == "failed":
            self.take(sid, note=f"{adapter.label}: the turn failed: {event.error or 'unknown'}")
        elif event.kind == "interrupted":
            self.take(sid, note=f"{adapter.label}: the person interrupted the turn")
        elif event.kind in ("idle", "end"):
            self.heartbeat(sid)
            if event.kind == "idle" and event.said.strip():
                self.note_agent_said(sid, event.said)
        return out

    def background_told(self, sid: str, harness: HarnessName, in_flight: tuple[str, ...]) -> None:
        """The attempts of the harness's background calls as it says they stand: in flight
        (its list's command lines) or ended (`attempts/reconcile.py`)."""
        files = LogFiles(tuple(confine.roots(self.settings)), self.settings.limits)
        updates = reconcile.told(self.store, sid, harness, in_flight, datetime.now(UTC), files)
        reconcile.save(self.store, sid, updates)

    def note_agent_said(self, sid: str, text: str) -> None:
        """What the agent said as its turn ended, kept redacted and cut to its last
        AGENT_SAID_MAX_CHARS (a long reply ends with what it concluded)."""
        said = redact.text(text.strip())
        if len(said) > AGENT_SAID_MAX_CHARS:
            said = "…" + said[-(AGENT_SAID_MAX_CHARS - 1) :]
        self.store.set_agent_said(sid, said)

    def _whole_output(self, actions: list[Action], output_file: str) -> list[Action]:
        """A command whose output the harness kept in a file, too long to inline, ends as that
        file ends (read confined and never blocking: harness_files.output_tail), not as the
        start the payload carried does."""
        roots = confine.roots(self.settings)
        tail = output_tail(output_file, roots, OUTPUT_TAIL_MAX_CHARS) if output_file else None
        if tail is None:
            return actions
        return [
            a.model_copy(update={"output_tail": tail}) if isinstance(a, CommandAction) else a
            for a in actions
        ]

    def keep_harness_summary(
        self, sid: str, harness: str, text: str, version: int | None = None
    ) -> None:
        """A harness's own summary of the conversation it compacted, kept (redacted) with the
        version taken as it compacted (else the session's latest, or one taken now)."""
        if not text.strip():
            return
        version = version or self.store.latest_version(sid) or self.take(sid).header.version
        summary = {
            "harness": harness,
            "text": redact.text(text)[:SUMMARY_MAX_CHARS],
            "at": datetime.now(UTC).isoformat(),
        }
        self.store.set_harness_summary(sid, version, summary)

    def diff(self, sid: str, from_version: int, to_version: int) -> Diff:
        return recovery.diff(self.snap, self._active(sid), from_version, to_version)

    def message(self, sid: str, text: str, typed: str = "") -> str | None:
        """A user message; a blank one means "continue" and returns a fresh dump (`typed`: the
        word a harness's prompt said it with, kept as the message)."""
        return recovery.message(self.snap, self._active(sid), text, typed)
