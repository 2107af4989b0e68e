"""Progress bars written line by line (tqdm into a file, pip, Hugging Face): one line per bar.

A bar written to a file instead of a terminal leaves one line per frame, so a tail of 40
lines can be 19 frames of "Loading safetensors checkpoint shards". A run of frames keeps,
for each bar in it, its last frame, marked with how many earlier frames were folded into it.
"""

import re
from collections.abc import Sequence

FOLDED = " [{} earlier frames of this bar folded]"
FRAME_CHARS_MAX = 400

# tqdm and the bars built on it: "desc:  45%|████▌ | 2.24G/4.97G [", "desc:  58% 707M/1.22G [",
# SGLang's and vLLM's "Loading safetensors checkpoint shards:   5% Completed | 1/19 [".
# The percentage is found first and what follows it matched there: no backtracking over a
# long description.
_PERCENT = re.compile(r"(?<![\d.])\d{1,3}%")
_AFTER_PERCENT = re.compile(
    r"(?:\s*Completed)?(?:\s*\|[^|]*\|\s*|\s*\|\s*|\s+)"
    r"[\d.]+[kMGTPB]*/(?P<total>[\d.]+[kMGTPB]*)(?:\s*\[|\s*$)"
)
# pip's rich bar: "   ━━━━━━━━╸━━━━━━━ 12.5/268.2 MB 70.3 MB/s eta 0:00:04"
_PIP = re.compile(r"^\s*[━╸╺╾╼─]+\s+[\d.]+/(?P<total>[\d.]+\s*[kMGT]?B)\b")
# What a multi-process server writes between two frames: an empty line, or only its prefix.
_FILLER = re.compile(r"^\s*(?:\([\w.-]+ pid=\d+\)\s*)?$")


def bar_key(line: str) -> tuple[str, str] | None:
    """Which bar `line` is a frame of (its description and total), or None."""
    if "/" not in line:
        return None  # every frame shows done/total: most lines leave here
    line = line[:FRAME_CHARS_MAX]  # a frame is short; a long line is not matched at length
    for percent in _PERCENT.finditer(line):
        after = _AFTER_PERCENT.match(line, percent.end())
        if after:
            return line[: percent.start()].strip(), after.group("total")
    m = _PIP.match(line)
    if m:
        return "pip", m.group("total")
    return None


def fold_progress(lines: Sequence[str]) -> list[str]:
    """Each run of bar frames becomes the last frame of each of its bars, with a fold count."""
    out: list[str] = []
    i, n = 0, len(lines)
    while i < n:
        if bar_key(lines[i]) is None:
            out.append(lines[i])
            i += 1
            continue
        last: dict[tuple[str, str], tuple[int, int]] = {}  # bar -> (index of last frame, frames)
        j = i
        while j < n:
            key = bar_key(lines[j])
            if key is not None:
                last[key] = (j, last.get(key, (0, 0))[1] + 1)
                j += 1
                continue
            ahead = j
            while ahead < n and _FILLER.match(lines[ahead]):
                ahead += 1
            if ahead in (j, n) or bar_key(lines[ahead]) is None:
                break  # the run ended; what follows is the log again
            j = ahead  # filler between two frames goes with the run
        for index, frames in sorted(last.values()):
            out.append(lines[index] + (FOLDED.format(frames - 1) if frames > 1 else ""))
        i = j
    return out
