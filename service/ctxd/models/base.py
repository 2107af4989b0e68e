"""What every model module shares: the strict input base, bounded text types, and the
Unavailable line every section of observations carries."""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

SESSION_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
# SESSION_ID_PATTERN in words, for a person who gave another name
SESSION_ID_RULE = (
    "a session name is lowercase letters, digits, '.', '_' or '-', starting with a letter or "
    "a digit, up to 64 characters"
)
SessionId = Annotated[str, Field(pattern=SESSION_ID_PATTERN)]
ShortText = Annotated[str, Field(max_length=200)]
LongText = Annotated[str, Field(max_length=20_000)]


class _Volatile:
    """Marks an observed field that moves on its own while nothing happens (an age, a rate, a
    temperature): shown in a dump, never a reason for a new version. `Annotated[float,
    VOLATILE]`; `snapshotter/changes.content_key` leaves such fields out."""

    def __repr__(self) -> str:
        return "VOLATILE"


VOLATILE = _Volatile()
PathText = Annotated[str, Field(min_length=1, max_length=4096)]


class Strict(BaseModel):
    """Input models reject fields they do not know, so a typo is an error, not a no-op."""

    model_config = ConfigDict(extra="forbid")


class Unavailable(BaseModel):
    """A watch (or a whole collector) that could not be observed, and why."""

    watch_id: int | None = None
    target: str
    reason: str
