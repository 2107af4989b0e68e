"""A snapshot: header, signals, changes and observations, and what the API returns of it."""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from ctxd.models.base import LongText, Strict
from ctxd.models.journal import Narrative
from ctxd.models.observations import Observations

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
    duration_ms: float = 0.0
    confirmed_at: datetime | None = None
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
    confirmed_at: datetime | None = None


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
