"""What every model module shares: the strict input base, bounded text types, and the
Unavailable line every section of observations carries."""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# A dot is never doubled nor last (`a..b` reads as a path's parent); the length (64) is checked
# beside the pattern wherever it is used.
SESSION_ID_PATTERN = r"^[a-z0-9](?:[a-z0-9_-]|\.[a-z0-9_-]){0,63}$"
# SESSION_ID_PATTERN in words, for a person who gave another name
SESSION_ID_RULE = (
    "a session name is lowercase letters, digits, '.', '_' or '-', starting with a letter or "
    "a digit, with no '..' and no '.' at its end, up to 64 characters, and not a device's "
    "name (con, nul, com1, …)"
)
# Names a system gives its devices (`con`, `nul.txt` on Windows, where a copied snapshots
# folder may land): never a session's, whatever follows a dot.
DEVICE_NAMES = frozenset(
    {"con", "prn", "aux", "nul", "clock$"} | {f"{d}{n}" for d in ("com", "lpt") for n in range(10)}
)


def is_device_name(sid: str) -> bool:
    return sid.split(".", 1)[0] in DEVICE_NAMES


SessionId = Annotated[str, Field(pattern=SESSION_ID_PATTERN, max_length=64)]
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
