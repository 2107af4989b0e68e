"""A session: what it is for and how often it is looked at."""

from datetime import datetime
from pathlib import PurePosixPath

from pydantic import BaseModel, Field, field_validator

from ctxd.models.base import LongText, PathText, ShortText, Strict

# Folders that hold everyone's work, not one project's: a session scoped to one would take in
# every conversation below it (another account's agent, continuing anywhere, joined it).
SYSTEM_FOLDERS = frozenset(
    {"/", "/tmp", "/var", "/var/tmp", "/home", "/root", "/usr", "/usr/local", "/etc", "/opt",
     "/srv", "/mnt", "/media", "/dev", "/proc", "/sys", "/run", "/boot", "/data", "/scratch"}
)  # fmt: skip


def is_system_folder(path: str) -> bool:
    """Whether `path` (absolute) is a folder of the system or of all users, not a project's."""
    return str(PurePosixPath(path)) in SYSTEM_FOLDERS


class SessionIn(Strict):
    title: ShortText | None = None
    objective: LongText | None = None
    quiet_after_s: int | None = Field(None, ge=1, le=7 * 24 * 3600)
    schedule_every_s: int | None = Field(None, ge=0, le=7 * 24 * 3600)
    cwd: PathText | None = None
    # whether ctxd adds watches by itself from the agent's actions and the machine
    discovery: bool | None = None

    @field_validator("cwd")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError("cwd must be an absolute path")
        if value is not None and is_system_folder(value):
            raise ValueError(f"{value} holds everyone's work, not a project: scope to a project")
        return value


class Session(BaseModel):
    id: str
    title: str = ""
    objective: str = ""
    objective_source: str | None = None  # None: set by hand; else e.g. "the user's first prompt"
    discovery: bool = True
    quiet_after_s: int = 300
    schedule_every_s: int | None = None
    cwd: str | None = None
    created_at: datetime
    last_activity_at: datetime
    versions: int = 0
