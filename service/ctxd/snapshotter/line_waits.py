"""The lines an agent waits for in a log, read from its own wait commands: `until grep -q P
LOG; do sleep 5; done`, `while ! grep -q P LOG; do …; done`, `tail -f LOG | grep -m1 P`
(also inside `timeout N bash -c '…'`). A log that prints such a line is its attempt coming up,
as an expected port that opens is: `news.py` says so once, and the trigger loop snapshots at
once when a probe sees the line. Pure: no I/O.

A wait the agent ran in the foreground that ended with status 0 saw the line itself: it is no
news to the agent, and is left out. One run in the background, or given up on (`timeout`
ended it), is still open.
"""

import os
import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

SHELLS = {"bash", "sh", "dash", "zsh"}
GREPS = {"grep": "", "egrep": "E", "fgrep": "F"}
WRAPPERS = {"!", "until", "while", "if", "do", "then", "else", "time", "command", "exec"}
TAILS_FOLLOW = {"-f", "-F", "--follow", "--retry"}
VALUED = set("emABCfd")  # grep's short options that take a value
# BRE's escaped operators, as Python writes them; BRE's bare ones are literal there
_BRE = {r"\|": "|", r"\(": "(", r"\)": ")", r"\+": "+", r"\?": "?", r"\{": "{", r"\}": "}"}


@dataclass(frozen=True)
class LineWait:
    """The agent waits for a line matching `pattern` (as it wrote it: `written`) in the log at
    `path` (absolute), since `at`."""

    path: str
    written: str
    pattern: re.Pattern[str]
    at: datetime

    def printed(self, lines: Iterable[str]) -> str | None:
        """The first of these lines the agent's wait would stop at, if any."""
        return next((line for line in lines if self.pattern.search(line)), None)


def line_waits(actions: Iterable[dict]) -> list[LineWait]:
    """The open waits for a log line among the agent's recorded commands (each a stored
    action body with `at`, `command`, `cwd`, `background`, `exit_status`)."""
    out = []
    for action in actions:
        command = str(action.get("command") or "")
        if "grep" not in command or not isinstance(action.get("at"), str):
            continue
        backgrounded = bool(action.get("background")) or command.rstrip().endswith("&")
        if not backgrounded and action.get("exit_status") == 0:
            continue  # it waited in the foreground and saw the line: the agent knows
        cwd = str(action.get("cwd") or "")
        at = datetime.fromisoformat(action["at"])
        for path, written, pattern in _waits_in(command):
            full = os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))
            if os.path.isabs(full):
                out.append(LineWait(full, written, pattern, at))
    return out


def _waits_in(command: str, depth: int = 0) -> Iterator[tuple[str, str, re.Pattern[str]]]:
    """(log path as written, pattern as written, pattern) of each wait in one shell line."""
    segments = _segments(command)
    for n, (separator, words) in enumerate(segments):
        looped = False  # `until grep …`, `while ! grep …`: a wait, not a one-off check
        while words and (words[0] in WRAPPERS or words[0] == "timeout"):
            looped |= words[0] in ("until", "while")
            words = words[2:] if words[0] == "timeout" and len(words) > 1 else words[1:]
            while words and words[0].startswith("-"):  # timeout's own options
                words = words[1:]
        if not words:
            continue
        if words[0] in SHELLS and "-c" in words and depth < 2:
            inner = words[words.index("-c") + 1 : words.index("-c") + 2]
            yield from (_waits_in(inner[0], depth + 1) if inner else ())
            continue
        if words[0] not in GREPS:
            continue
        found = _grep(words[1:], GREPS[words[0]])
        if found is None:
            continue
        written, pattern, files, stops = found
        if looped and separator != "|" and stops and len(files) == 1:
            yield files[0], written, pattern  # until/while grep -q P LOG
        elif separator == "|" and stops and not files and n > 0:
            followed = _followed(segments[n - 1][1])  # tail -f LOG | grep -m1 P
            if followed is not None:
                yield followed, written, pattern


def _segments(command: str) -> list[tuple[str, list[str]]]:
    """The line's simple commands, each with the operator before it (`|`, `;`, `&&`, …) and
    its words, redirections left out."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # an unclosed quote: no wait read from it
        return []
    out: list[tuple[str, list[str]]] = []
    separator, skip = "", False
    words: list[str] = []
    for token in tokens:
        if skip:
            skip = False
        elif token and set(token) <= set("<>&"):
            if token in ("&", "&&"):
                out.append((separator, words))
                separator, words = token, []
            else:  # a redirection: its target goes, and a descriptor number before it
                skip = True
                if words and words[-1].isdigit():
                    words.pop()
        elif token and set(token) <= set(";|()&"):
            out.append((separator, words))
            separator, words = token, []
        else:
            words.append(token)
    out.append((separator, words))
    return out


def _grep(args: list[str], mode: str) -> tuple[str, re.Pattern[str], list[str], bool] | None:
    """A grep's pattern as written, as a Python pattern, its files, and whether it stops at
    the first match (-q, -m1); None when it reads its patterns from a file."""
    written: str | None = None
    files: list[str] = []
    stops, ignore_case, options = False, False, True
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if options and word == "--":
            options = False
        elif options and word.startswith("--"):
            name, _, value = word[2:].partition("=")
            stops |= name in ("quiet", "silent") or (name == "max-count" and value == "1")
            ignore_case |= name == "ignore-case"
            mode = {"extended-regexp": "E", "fixed-strings": "F"}.get(name, mode)
            if name == "regexp":
                written = value
            if name == "file":
                return None
        elif options and word.startswith("-") and len(word) > 1:
            letters = word[1:]
            for at, letter in enumerate(letters):
                if letter in VALUED:
                    value = letters[at + 1 :] or (args[i] if i < len(args) else "")
                    i += 0 if letters[at + 1 :] else 1
                    if letter == "f":
                        return None
                    if letter == "e":
                        written = value
                    stops |= letter == "m" and value == "1"
                    break
                stops |= letter == "q"
                ignore_case |= letter == "i"
                mode = letter if letter in "EFG" else mode
        elif written is None:
            written = word
        else:
            files.append(word)
    if written is None:
        return None
    return written, _compiled(written, mode, ignore_case), files, stops


def _compiled(written: str, mode: str, ignore_case: bool) -> re.Pattern[str]:
    flags = re.IGNORECASE if ignore_case else 0
    if mode == "F":
        return re.compile(re.escape(written), flags)
    text = written
    if mode != "E":  # a basic regular expression: its escaped operators are Python's bare ones
        text = re.sub(r"\\[|()+?{}]|[|()+?{}]", lambda m: _BRE.get(m[0], "\\" + m[0]), written)
    try:
        return re.compile(text, flags)
    except re.error:
        return re.compile(re.escape(written), flags)


def _followed(words: list[str]) -> str | None:
    """The file a `tail -f` follows, or None for any other command."""
    if not words or words[0] != "tail" or not any(w in TAILS_FOLLOW for w in words):
        return None
    files, skip = [], False
    for word in words[1:]:
        if skip:
            skip = False
        elif word in ("-n", "-c", "--lines", "--bytes", "-s", "--pid"):
            skip = True
        elif not word.startswith("-") and not (word.startswith("+") and word[1:].isdigit()):
            files.append(word)
    return files[0] if len(files) == 1 else None
