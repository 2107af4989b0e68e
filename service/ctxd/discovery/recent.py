"""The dump's recent commands: the last commands with time and exit status, the first error
line of a failure, and repeats folded into one line.

Pure: it reads command actions (anything with the CommandAction fields) already redacted.
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from ctxd.models.journal import LastRead

RECENT_MAX = 10
LAUNCH_CHARS = 100
LINE_MAX_CHARS = 200
_ERROR = re.compile(
    r"(?:^|\b)(?:error|fatal|failed|exception|traceback|panic|segmentation fault|killed"
    r"|no such file|command not found|permission denied|cannot|could not|not found)\b",
    re.IGNORECASE,
)
_DIGITS = re.compile(r"\d+")
# The exception line that ends a Python traceback: `RuntimeError: CUDA error: …`.
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b.*")


class CommandLike(Protocol):
    command: str
    at: datetime
    exit_status: int | None
    output_tail: str
    background: bool
    refused: str | None


@dataclass
class RecentCommand:
    command: str
    at: datetime  # of the latest run
    exit_status: int | None
    background: bool = False
    first_error: str | None = None
    runs: int = 1  # how many times it (or one alike but for its numbers) ran in the window
    alike: bool = False  # some of those runs had other numbers (`tail -n 3`, `tail -n 10`)
    attempt: str | None = None  # what it launched: "attempt 2 (pid 4242)"
    refused: str | None = None  # the harness's words: it never ran

    def line(self) -> str:
        """One line, like: 12:03:10 `make -j8` → exit 2: make: *** No targets (3 runs)."""
        # a launch's whole line is its attempt's, under Attempts: its start says which it is
        limit = LAUNCH_CHARS if self.attempt else LINE_MAX_CHARS
        text = f"{self.at.strftime('%H:%M:%S')} `{_one_line(self.command, limit)}`"
        if self.refused:
            text += f" → not run, the harness refused it: {_one_line(self.refused)}"
        elif self.attempt:
            # the shell's exit status says nothing of what it sent off
            text += f" → started in the background → {self.attempt}"
        elif self.background:
            text += " → sent to the background"
        elif self.exit_status is not None:
            text += f" → exit {self.exit_status}"
        if self.first_error:
            text += f": {self.first_error}"
        if self.runs > 1 and self.alike:
            text += (
                f" (run {self.runs} times in a row, alike but for their numbers; the last shown)"
            )
        elif self.runs > 1:
            text += f" ({self.runs} runs)"
        return text


def _one_line(text: str, limit: int = LINE_MAX_CHARS) -> str:
    """The command on one line: its first line, "…" for the rest (a heredoc's body joined to
    its first line would run as shell what the real run took as text)."""
    first, newline, _ = text.strip().partition("\n")
    flat = " ".join(first.split()) + (" …" if newline else "")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def first_error_line(output: str) -> str | None:
    """The line that says what went wrong: a traceback's exception line, else the first line
    that reads like an error; None if no line does."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        exceptions = [line for line in lines if _EXCEPTION.match(line)]
        if exceptions:
            return _one_line(exceptions[-1])
    for line in lines:
        if _ERROR.search(line):
            return _one_line(line)
    return None


# Programs that show a file's text: what they print is what the agent read. A log's tail is
# the Logs section's (read fresh there), so a look at a log is not one.
_READERS = frozenset(
    {"cat", "head", "tail", "sed", "grep", "egrep", "rg", "awk", "nl", "bat", "less", "more"}
)
# A page asked of a server, as `curl -s 127.0.0.1:8000/health` asks it: a look too, but for a
# request that sends or changes something, or writes the answer to a file.
_URL_READER = "curl"
_NOT_A_LOOK = re.compile(
    r"\s(?:-[A-Za-z]*[dFTXoO]|--(?:data|form|upload|request|output|remote-name))"
)
# Programs that print nothing of their own: allowed beside a reader (`sleep 2; curl …`).
_QUIET = frozenset({"sleep", "cd", "true"})
_LOG = re.compile(r"\.(?:log|out|err)\b|(?:^|[\s/])logs?/")
_SEGMENTS = re.compile(r"\|\||&&|[;|\n]")
READ_LINES = 14  # of what a look showed, the last lines kept
READ_CHARS = 1400


def last_reads(actions: Iterable[CommandLike], count: int = 2) -> list[LastRead]:
    """What the agent's newest looks showed it, oldest first: the newest `count` commands
    (each line once) that ran in the foreground, exited 0 and printed something, whose
    programs are all file readers (`grep -n -A12 "def stage" launch.py`, `sed -n 1,40p
    train.py | nl`) or a page asked of a server (`sleep 2; curl -s 127.0.0.1:8000/`), and
    which read no log: the config the agent read, then what its server answered."""
    found: dict[str, CommandLike] = {}
    for action in actions:
        if _a_read(action):
            found.pop(action.command, None)  # a line run again is shown at its newest run
            found[action.command] = action
    return [_read(action) for action in list(found.values())[-count:]]


def _read(found: CommandLike) -> LastRead:
    lines = found.output_tail.rstrip("\n").splitlines()
    kept: list[str] = []
    size = 0
    for line in reversed(lines[-READ_LINES:]):
        size += len(line) + 1
        if size > READ_CHARS:
            break
        kept.append(line)
    kept.reverse()
    return LastRead(command=found.command, at=found.at, lines=kept, above=len(lines) - len(kept))


def _a_read(action: CommandLike) -> bool:
    """A look at a file that worked: exit 0, or no exit status told (Codex tells none) and
    no line of the reader's own complaint (`grep: x.py: No such file or directory`)."""
    if action.exit_status not in (0, None) or action.background or action.refused:
        return False
    if not action.output_tail.strip() or _LOG.search(action.command):
        return False
    programs = []
    for segment in _SEGMENTS.split(action.command):
        words = [w for w in segment.split() if "=" not in w.split("/")[0]]  # no VAR=value
        if words:
            programs.append(words[0].rsplit("/", 1)[-1])
        if programs and programs[-1] == _URL_READER and _NOT_A_LOOK.search(segment):
            return False
    readers = [p for p in programs if p not in _QUIET]
    if not readers or not all(p in _READERS or p == _URL_READER for p in readers):
        return False
    complaints = tuple(f"{p}: " for p in readers)
    told = action.exit_status is not None
    return told or not any(line.startswith(complaints) for line in action.output_tail.splitlines())


def recent_commands(
    actions: Iterable[CommandLike],
    limit: int = RECENT_MAX,
    attempts: Mapping[str, tuple[str, datetime]] | None = None,
) -> list[RecentCommand]:
    """The last `limit` distinct commands, oldest first; a command run again is shown once, at
    its latest run, with its run count, and so is a run of commands in a row alike but for
    their numbers (`tail -n 3 …`, `tail -n 10 …`: a poll). A failure carries its first error
    line; a launch says which attempt it made and stays a line of its own, at the time that
    attempt was launched (`attempts`: command line -> ("attempt 2 (pid 4242)", its launch):
    the harness reports the command when its call returns, a second later)."""
    folded: dict[str, RecentCommand] = {}
    last = ""
    for action in actions:
        flat = " ".join(action.command.split())
        attempt, launched = (attempts or {}).get(action.command, (None, action.at))
        key = flat
        shape = _DIGITS.sub("N", flat)
        if not attempt and flat not in folded and last and _DIGITS.sub("N", last) == shape:
            key = last  # alike to the one just before: one line for the run of them
        failed = action.exit_status not in (0, None)
        error = first_error_line(action.output_tail) if failed else None
        previous = folded.pop(key, None)  # re-inserted: dict order is latest-run order
        before = " ".join(previous.command.split()) if previous else flat
        folded[flat] = RecentCommand(
            command=action.command,
            at=launched,
            exit_status=action.exit_status,
            background=action.background,
            first_error=error,
            runs=(previous.runs + 1) if previous else 1,
            alike=previous is not None and (previous.alike or before != flat),
            attempt=attempt,
            refused=action.refused,
        )
        last = flat
    return list(folded.values())[-limit:]
