"""A snapshot: header, signals, changes and observations, and what the API returns of it."""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, Field

from ctxd.models.base import VOLATILE, LongText, Strict
from ctxd.models.journal import Narrative
from ctxd.models.observations import Observations

Cause = Literal["manual", "quiet", "schedule", "action", "resume", "continue", "preview", "event"]


@dataclass(frozen=True)
class Trigger:
    """Why a snapshot is taken: its cause, and for an event the words of what happened
    (`snapshotter.happened.TRIGGER_WORDS`); stored in the header as `str(trigger)`."""

    cause: Cause
    events: tuple[str, ...] = ()

    MANUAL: ClassVar["Trigger"]
    QUIET: ClassVar["Trigger"]
    SCHEDULE: ClassVar["Trigger"]
    ACTION: ClassVar["Trigger"]
    RESUME: ClassVar["Trigger"]
    CONTINUE: ClassVar["Trigger"]
    PREVIEW: ClassVar["Trigger"]

    @classmethod
    def event(cls, words: Iterable[str]) -> "Trigger":
        return cls("event", tuple(words))

    def __str__(self) -> str:
        return f"event:{','.join(self.events)}" if self.cause == "event" else self.cause


Trigger.MANUAL, Trigger.QUIET, Trigger.SCHEDULE, Trigger.ACTION = (
    Trigger("manual"), Trigger("quiet"), Trigger("schedule"), Trigger("action"),
)  # fmt: skip
Trigger.RESUME, Trigger.CONTINUE, Trigger.PREVIEW = (
    Trigger("resume"), Trigger("continue"), Trigger("preview"),
)  # fmt: skip

Severity = Literal["critical", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}


class Signal(BaseModel):
    severity: Severity
    code: str
    subject: str = ""
    text: str

    @property
    def key(self) -> str:
        """Identity across snapshots: the same condition on the same thing, whatever its text."""
        return f"{self.code}:{self.subject}"


class Change(BaseModel):
    kind: str
    text: str


class SnapshotHeader(BaseModel):
    session: str
    version: int
    taken_at: datetime
    trigger: str
    previous_version: int | None = None
    previous_taken_at: datetime | None = None
    host: str = ""
    note: str | None = None
    duration_ms: Annotated[float, VOLATILE] = 0.0
    confirmed_at: Annotated[datetime | None, VOLATILE] = None
    confirmations: int = 0
    data_dir_bytes: int | None = None


class Snapshot(BaseModel):
    header: SnapshotHeader
    title: str = ""
    narrative: Narrative = Narrative()
    signals: list[Signal] = []
    observations: Observations = Observations()
    changes: list[Change] = []


class SnapshotSummary(BaseModel):
    session: str
    version: int
    taken_at: datetime
    trigger: str
    signals: int
    changes: int
    confirmed_at: Annotated[datetime | None, VOLATILE] = None


class SnapshotIn(Strict):
    note: LongText | None = None
    force: bool = False


class MessageIn(Strict):
    text: Annotated[str, Field(max_length=100_000)] = ""


class Diff(BaseModel):
    session: str
    from_version: int
    to_version: int
    changes: list[Change]
    markdown_diff: str
