"""Files an agent harness names in its hook payload, read where the harness keeps them: Claude
Code's transcript (`transcript_path`), a tool's output it kept in a file because it was too
long to inline (a Bash call's `persistedOutputPath`).

A hook names the file, so nothing it names can make the request wait: a fifo, socket or
device is refused without blocking (see named_files.open_named), and the whole read runs
under READ_S. What is read is the file the name names: the opened descriptor's real path must
be the name itself, so what a caller checked about the name holds for what is read (a name
with a link in it is refused: resolve it first). With `roots`, the name is resolved here and
only a file of the given suffixes under a `.claude/projects` folder inside the roots is read,
checked on the descriptor the same way.
"""

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO, TypeVar

from ctxd import confine
from ctxd.named_files import NotRegular, TimedReads, TooSlow, changed, open_named, opened_name

T = TypeVar("T")
READ_S = 5.0
# Files read at once; past that many stuck on a hung filesystem, the next is refused.
_READS = TimedReads("harness file", slots=4)
PROJECTS = "/.claude/projects/"
TOOL_RESULTS = "/tool-results/"  # Claude Code's folder of a conversation's long outputs
OUTPUT_READ_BYTES = 64 * 1024  # of an output's end: its last lines hold the error and exit


def read_named(
    path: str,
    roots: Sequence[Path] | None,
    suffixes: tuple[str, ...],
    read: Callable[[BinaryIO, os.stat_result], T],
    within: tuple[str, ...] = (PROJECTS,),
) -> T | None:
    """`read(file, its fstat)` of the file `path` names; None when it may not or cannot be
    read (see the module docstring). With `roots`, the resolved name must end with one of
    `suffixes` and hold each of `within`."""
    try:
        return _READS.run(lambda: _read(path, roots, suffixes, within, read), READ_S)
    except (OSError, ValueError, NotRegular, TooSlow):  # ValueError: a NUL in the name
        return None


def output_tail(path: str, roots: Sequence[Path], max_chars: int) -> str | None:
    """The end of a tool's output that the harness kept in a file (a `.txt` or `.json` in a
    conversation's `tool-results` folder under `.claude/projects`), at most `max_chars`,
    starting at a line; None when it is not such a file or cannot be read."""

    def tail(f: BinaryIO, st: os.stat_result) -> str:
        start = max(0, st.st_size - OUTPUT_READ_BYTES)
        f.seek(start)
        text = f.read(OUTPUT_READ_BYTES).decode("utf-8", errors="replace")
        if start and "\n" in text:
            text = text.split("\n", 1)[1]  # the first line was cut by the seek
        return text[-max_chars:]

    return read_named(path, roots, (".txt", ".json"), tail, (PROJECTS, TOOL_RESULTS))


def _may_read(
    given: str, real: str, roots: Sequence[Path], suffixes: tuple[str, ...], within: tuple[str, ...]
) -> bool:
    """A file of those suffixes in those folders, inside the roots as named and as resolved
    (as confine.check_path wants both)."""
    return (
        real.endswith(suffixes)
        and all(folder in real for folder in within)
        and confine.refusal(real, roots) is None
        and confine.refusal(os.path.abspath(given), roots) is None
    )


def _read(
    path: str,
    roots: Sequence[Path] | None,
    suffixes: tuple[str, ...],
    within: tuple[str, ...],
    read: Callable[[BinaryIO, os.stat_result], T],
) -> T | None:
    name = os.path.abspath(path) if roots is None else os.path.realpath(path)
    if roots is not None and not _may_read(path, name, roots, suffixes, within):
        return None
    fd, st = open_named(name)
    with os.fdopen(fd, "rb") as f:
        opened = opened_name(fd)
        if opened != name or changed(opened, st):
            return None  # a parent was swapped, or the file renamed, since the name was checked
        return read(f, st)
