"""The journal: entries the agent writes, and the narrative a dump shows of them."""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from ctxd.errors import Invalid
from ctxd.models.base import VOLATILE, LongText, ShortText, Strict

JournalKind = Literal[
    "objective", "attempt", "finding", "hypothesis", "decision", "next", "note", "fact", "question"
]


STATUSES: dict[str, tuple[str, ...]] = {
    "attempt": ("running", "failed", "succeeded", "abandoned"),
    "hypothesis": ("open", "confirmed", "refuted"),
    "next": ("open", "done"),
    "question": ("open", "answered"),
}


def check_status(kind: str | None, status: str | None) -> None:
    allowed = STATUSES.get(kind or "")
    if status is not None and allowed and status not in allowed:
        choices = f"{', '.join(allowed[:-1])} or {allowed[-1]}"
        raise Invalid(f"the status of {kind} entries is {choices}, not '{status}'")
    if status is not None and not allowed and kind is not None:
        raise Invalid(f"{kind} entries have no status")


class JournalIn(Strict):
    kind: JournalKind
    text: Annotated[str, Field(min_length=1, max_length=20_000)]
    outcome: LongText | None = None
    status: ShortText | None = None
    key: ShortText | None = None
    concerns: list[Annotated[int, Field(ge=1)]] = Field(default=[], max_length=50)

    @model_validator(mode="after")
    def _consistent(self) -> "JournalIn":
        if self.kind == "fact" and not self.key:
            raise ValueError("a 'fact' entry needs a 'key' (its value goes in 'text')")
        check_status(self.kind, self.status)
        return self


class JournalUpdate(Strict):
    """Fields of an entry that can change as work goes on; omitted fields stay as they are."""

    text: Annotated[str, Field(min_length=1, max_length=20_000)] | None = None
    outcome: LongText | None = None
    status: ShortText | None = None
    concerns: list[Annotated[int, Field(ge=1)]] | None = Field(default=None, max_length=50)


class JournalEntry(BaseModel):
    id: int
    session: str
    kind: JournalKind
    text: str
    outcome: str | None = None
    status: str | None = None
    key: str | None = None
    concerns: list[int] = []
    created_at: datetime
    updated_at: datetime | None = None


class HistoryItem(BaseModel):
    """One line of the dump's Attempts: a launch ctxd saw, or an attempt the agent wrote."""

    at: datetime
    source: Literal["launch", "journal"]
    text: str
    status: str | None = None
    outcome: str | None = None
    command: str | None = None  # a launch's command line (redacted), as the agent wrote it
    cwd: str | None = None  # the folder that command ran in
    written: bool = False  # `command` is the agent's line, not a process's argv ctxd read
    label: str | None = None  # "attempt 3", "attempts 1-18" (an en dash): fmt.attempts
    first: int | None = None  # the attempts it is about, by number
    last: int | None = None
    error: str | None = None  # the root-cause line its own log ended with
    error_log: str | None = None  # the log that line is in
    pid: int | None = None  # its root process, once seen
    flags: list[str] = Field(default_factory=list)  # flags changed from the attempt before
    # those flags and variables with the value each has here ("--port": "30000")
    flag_values: dict[str, str] = Field(default_factory=dict)
    # The parts of `outcome` as fields, for a page to lay out: how it ran or ended ("running
    # for 3 min", "exited with status 1 after 2 min"), what changed from the attempt before
    # (its words in the dump), the ports its command expects and whether they listen (None:
    # none expected), the files its output goes to. `ran` moves on its own, as `outcome` does.
    ran: Annotated[str | None, VOLATILE] = None
    changed: str | None = None
    ports: list[int] = Field(default_factory=list)
    port_open: bool | None = None
    logs: list[str] = Field(default_factory=list)
    lived_s: float | None = None  # from its launch to when it was seen gone (ended ones)

    def program(self) -> str | None:
        """The program its line names (`python3 serve.py`, the text between the first pair of
        backticks), None for a line that names none (a fold, a note)."""
        parts = self.text.split("`")
        return parts[1] if len(parts) > 2 else None


class Said(BaseModel):
    """Words of the conversation a dump quotes: the user's prompts, the agent's last reply
    (redacted, as the harness reported them, with when)."""

    at: datetime
    text: str


class LastRead(BaseModel):
    """What a look of the agent's showed it (a `grep`, `sed -n`, `cat` of code or config, a
    `curl -s` of its server, as the harness reported its output, redacted): the last lines of
    that output."""

    command: str
    at: datetime
    lines: list[str]
    above: int = 0  # lines of that output above those kept


class Narrative(BaseModel):
    """The journal as a dump shows it: current state, grouped by kind."""

    objective: str = ""
    latest_message: str | None = None
    facts: dict[str, str] = {}
    attempts: list[JournalEntry] = []
    findings: list[JournalEntry] = []
    decisions: list[JournalEntry] = []
    next_steps: list[JournalEntry] = []
    questions: list[JournalEntry] = []
    notes: list[JournalEntry] = []
    last_entry_id: int = 0
    # What ctxd learned from the agent's own actions (issue: zero configuration)
    objective_source: str | None = None  # "the user's first prompt" when not set by hand
    history: list[HistoryItem] = []  # attempts and the journal's own, oldest first
    recent_commands: list[str] = []
    workspace: str | None = None  # git branch, HEAD, dirty and recently edited files
    auto_watches: list[str] = []
    # The conversation's own words (issue 38's handover): the user's newest prompts, oldest
    # first (a bare "continue" is an empty text), and what the agent last said it did or thought.
    user_messages: list[Said] = []
    agent_said: Said | None = None
    last_read: LastRead | None = None  # what the agent's newest look at a file showed it
    read_before: LastRead | None = None  # and the look before that one, at another file or page
    # The news ctxd woke the agent with (issue 40), newest last: what it was told unasked.
    wakes: list[Said] = []
    # Since when the session slept unwatched before this version (issue 43), if it did
    dormant_since: datetime | None = None
