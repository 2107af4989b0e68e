"""Pure log-text parsers: clean lines, tails, binary detection and error blocks."""

import re
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

from ctxd import redact
from ctxd.collectors import _patterns
from ctxd.collectors._progress import fold_progress
from ctxd.fmt import human_bytes

BLOCK_BYTES = 64 * 1024
CUT_MARKER = " … [cut {} chars]"
ERROR_BLOCK_LINES_MAX = 200
ERROR_SUMMARY_CHARS = 300

_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erase line
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window titles, hyperlinks
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"  # the remaining two-byte escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
# Tab survives; everything else a terminal would interpret (and \n, \r) must not reach a dump.
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
# Bytes that do not occur in text logs; \t \n \r \b \f and ESC do.
_NON_TEXT = re.compile(r"[\x00-\x07\x0b\x0e-\x1a\x1c-\x1f\x7f\ufffd]")

TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
# Shapes of a line that reports a failure. Levels are matched in capitals and not as a
# setting's value (log_level='ERROR'), so a server-args dump is not an error.
ERROR_SHAPES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        TRACEBACK.pattern,
        r"(?<![\w='\"])(?:ERROR|CRITICAL|FATAL)\b(?!['\"=])",
        r"CUDA error|CUDA_ERROR_\w+|cudaError\w+|illegal memory access",
        r"NCCL WARN|NCCL error|nccl\w*Error",
        r"out of memory|OutOfMemoryError|\bOOM\b",
        r"\bKilled\b|Segmentation fault|SIGSEGV|SIGABRT|core dumped|Fatal Python error",
        # an exception line, also behind a rank or process prefix ("[rank0]: ", "(Worker pid=9) ")
        r"^(?:\[\w+\]:?\s*|\([\w.-]+ pid=\d+\)\s*)?[ \t]*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*"
        r"(?:Error|Exception)(?::|$)",
        # compilers (gcc, clang, nvcc: "file.c:3:5: error: ...") and make ("*** [all] Error 2")
        r"^\S+?:\d+(?::\d+)?:\s+(?:fatal )?error:|\*\*\* \[[^\]]*\] Error \d+",
    )
)
_EXCEPTION_LINE = re.compile(r"(?:^|\s|\])(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b:")
_EXCEPT_CLAUSE = re.compile(r"\bexcept\b[^:]*:\s*$")  # source shown in a frame, not an error
_CHAINED = re.compile(
    r"During handling of the above exception|The above exception was the direct cause"
)
# A line that opens a new log record rather than continuing an exception message.
_RECORD_START = re.compile(
    r"^\s*(?:\[?\d{4}-\d\d-\d\d|\[?\d\d:\d\d:\d\d|\(\w+ pid=\d+\)"
    r"|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\b|\[[A-Z]?\d{4})"
)


def clean_line(line: str, max_line_chars: int) -> str:
    """Collapse `\\r` progress updates to the last one with content, strip escapes, cut."""
    text, dropped = "", 0
    for segment in reversed(line.split("\r")):
        bound = max_line_chars * 4  # escapes only shrink a line: the rest would be cut anyway
        dropped = max(0, len(segment) - bound)
        segment = _CONTROLS.sub("", _ESCAPES.sub("", segment[:bound]))
        if segment.strip():
            text = segment
            break
    if len(text) > max_line_chars or (text and dropped):
        cut = len(text) - max_line_chars + dropped
        text = redact.cut(text, max_line_chars, marker="") + CUT_MARKER.format(cut)
    return text


def parse_lines(raw: bytes, max_line_chars: int, *, partial: bool = False) -> list[str]:
    """Every clean line of `raw`; `partial`: raw starts mid-line, drop that piece."""
    parts = raw.decode("utf-8", errors="replace").split("\n")
    if partial and len(parts) > 1:
        parts = parts[1:]
    if parts[-1] == "":
        parts.pop()  # the newline ending the last line does not start another one
    return [clean_line(part, max_line_chars) for part in parts]


def detect_binary(raw: bytes) -> bool:
    """True when the last block of `raw` looks like binary data rather than text."""
    block = raw[-BLOCK_BYTES:]
    if not block:
        return False
    if block.count(0) * 10 > len(block):
        return True
    text = block.decode("utf-8", errors="replace")
    return len(_NON_TEXT.findall(text)) * 10 > len(text) * 3


# Literals at least one of which every ERROR_SHAPES match contains: one fast pass finds the
# few candidate lines, and only those are matched against the full shapes.
_PREFILTER = re.compile(
    r"E(?:RROR|rror|xception)|Traceback|CRITICAL|FATAL|Fatal|CUDA|cuda|NCCL|nccl|memory|OOM"
    r"|Killed|Segmentation|SIG|dumped|error:"
)
_SHAPES = re.compile("|".join(f"(?:{p.pattern})" for p in ERROR_SHAPES))


def error_line_indexes(lines: Sequence[str], extra: Sequence[re.Pattern[str]] = ()) -> list[int]:
    """Indexes of the lines that have an error shape (or match an `extra` pattern)."""
    text = "\n".join(lines)
    starts = list(accumulate((len(line) + 1 for line in lines), initial=0))

    def line_indexes(pattern: re.Pattern[str]) -> set[int]:
        return {bisect_right(starts, m.start()) - 1 for m in pattern.finditer(text)}

    found = {i for i in line_indexes(_PREFILTER) if _SHAPES.search(lines[i])}
    if extra:  # the watch's own patterns: time-bounded, as a user may write a slow one
        joined = "|".join(f"(?:{p.pattern})" for p in extra)
        hits = _patterns.Budget().finditer(_patterns.compiled(joined, multiline=True), text)
        found |= {bisect_right(starts, m.start()) - 1 for m in hits}
    return sorted(found)


def _traceback_end(lines: Sequence[str], start: int, prefix: str) -> int:
    """Index after the last line of the traceback that starts at `start`."""

    def body(line: str) -> str:
        return line[len(prefix) :] if prefix and line.startswith(prefix) else line

    i, in_frames = start + 1, True
    while i < len(lines):
        text = body(lines[i])
        if in_frames:
            if not text.strip() or not text[0].isspace():
                in_frames = bool(not text.strip())  # the exception line ends the frames
        elif not text.strip():
            ahead = [body(x) for x in lines[i + 1 : i + 3] if body(x).strip()]
            if not (ahead and _CHAINED.search(ahead[0])):
                return i
        elif TRACEBACK.search(text):
            in_frames = True
        elif _RECORD_START.match(text) and not (prefix and lines[i].startswith(prefix)):
            return i
        i += 1
    return i


def find_error_block(
    lines: Sequence[str], extra: Sequence[re.Pattern[str]] = ()
) -> tuple[list[str], str, int] | None:
    """The first error block in `lines`: (block, summary line, error-shaped line count).

    A traceback is kept whole (chained ones too) up to ERROR_BLOCK_LINES_MAX lines; any other
    error line is kept with the lines that continue it (indented, or with the same prefix).
    """
    hits = error_line_indexes(lines, extra)
    for start in hits[:1]:
        line = lines[start]
        tb = TRACEBACK.search(line)
        if tb:
            end = _traceback_end(lines, start, line[: tb.start()])
        else:
            end = start + 1
            while end < len(lines) and (lines[end][:1].isspace() or _same_record(line, lines[end])):
                end += 1
            follow = TRACEBACK.search(lines[end]) if end < len(lines) else None
            if follow:  # logger.exception: the message line, then the traceback
                end = _traceback_end(lines, end, lines[end][: follow.start()])
        block = list(lines[start:end])
        if len(block) > ERROR_BLOCK_LINES_MAX:
            more = len(block) - ERROR_BLOCK_LINES_MAX
            block = [*block[: ERROR_BLOCK_LINES_MAX - 1], f"… [{more + 1} more lines]", block[-1]]
        return block, summarize(block), len(hits)
    return None


def _same_record(first: str, line: str) -> bool:
    """True when `line` repeats `first`'s prefix up to its level word (vLLM's `ERROR 07-28 …]`)."""
    m = re.match(r"^(.{0,80}?\b(?:ERROR|CRITICAL|FATAL)\b[^\]]{0,60}\])", first)
    return m is not None and line.startswith(m.group(1))


def summarize(block: Sequence[str]) -> str:
    """The root cause of an error block: its first exception line, else its first line.

    Python prints a chain oldest first ("During handling of the above exception", "The above
    exception was the direct cause"), and vLLM's "Engine core initialization failed. See root
    cause above" comes after the cause: the first exception is the one to fix.
    """
    chosen = next((x for x in block if _is_exception_line(x)), block[0])
    chosen = chosen.strip()
    if len(chosen) > ERROR_SUMMARY_CHARS:
        chosen = redact.cut(chosen, ERROR_SUMMARY_CHARS)
    return chosen


def _is_exception_line(line: str) -> bool:
    return bool(_EXCEPTION_LINE.search(line)) and not _EXCEPT_CLAUSE.search(line)


_DIGITS = re.compile(r"\d+")


def error_shape(line: str) -> str:
    """A line with what differs between ranks, pids and times masked, from its exception on."""
    m = _EXCEPTION_LINE.search(line)
    text = line[m.start() :] if m and not _EXCEPT_CLAUSE.search(line) else line
    return _DIGITS.sub("#", text.strip())


def repeats(lines: Sequence[str], summary: str, extra: Sequence[re.Pattern[str]] = ()) -> int:
    """How many error lines of `lines` say what `summary` says (eight ranks, one cause: 8)."""
    shape = error_shape(summary)
    return sum(1 for i in error_line_indexes(lines, extra) if error_shape(lines[i]) == shape)


_HOLE = re.compile(rb"\x00{16,}")
HOLE_LINE = "[… {} of NUL bytes: a hole, as truncation in place (copytruncate) or a crash leaves]"


def tail_text(
    raw: bytes, lines: int, max_line_chars: int, *, partial: bool = False
) -> tuple[list[str], bool]:
    """(the last `lines` clean lines of `raw`, binary): runs of NUL bytes become a marked hole.

    A log truncated under a writer that keeps its offset reads as zeros up to where the writer
    went on: the text after such a hole is the news, so only a tail that is not text once its
    holes are set aside counts as binary. Progress bars written line by line are folded.
    """
    holes = list(_HOLE.finditer(raw))
    text = _HOLE.sub(b"", raw) if holes else raw
    if (holes and not text.strip()) or detect_binary(text):
        return [], True
    if lines <= 0:
        return [], False
    out: list[str] = []
    start = 0
    for index, hole in enumerate([*holes, None]):
        end = hole.start() if hole else len(raw)
        segment = raw[start:end]
        if segment.strip(b"\n"):
            out += parse_lines(segment, max_line_chars, partial=partial and start == 0)
        if hole is not None:
            at_least = "more than " if index == 0 and hole.start() == 0 and partial else ""
            out.append(HOLE_LINE.format(at_least + human_bytes(hole.end() - hole.start())))
            start = hole.end()
    return fold_progress(out)[-lines:], False
