"""An objective without asking: the session's first substantive user prompt, from a prompt
event or from the Claude Code transcript at the hook's `transcript_path`.

Transcript lines relied on (Claude Code JSONL, as public parsers of it read them):
`{"type": "user", "message": {"role": "user", "content": str | [{"type": "text", "text"},
{"type": "tool_result", …}]}, "isMeta"?, "isSidechain"?, "isCompactSummary"?}`. Meta lines
(caveats, slash-command echoes, skill injections), subagent (sidechain) lines, compaction
summaries and tool results are not the user's words.
"""

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxd.discovery.harness_files import read_named
from ctxd.harness.policy import CONTINUE_WORDS

TRANSCRIPT_MAX_BYTES = 4 * 1024 * 1024  # the first prompt is near the start
LINE_MAX_BYTES = 1024 * 1024
MIN_WORDS = 3
# No request either: the continue words, and a bare yes (CONTINUE_WORDS is the harness's)
NOT_A_REQUEST = CONTINUE_WORDS | {"yes", "ok", "okay", "go"}
_HARNESS_MARKUP = re.compile(
    r"^\s*<(?:command-name|command-message|command-args|local-command-stdout|"
    r"local-command-stderr|system-reminder|user-prompt-submit-hook|bash-input|bash-stdout)>"
)


def is_substantive(text: str) -> bool:
    """A prompt that states work: not empty, not a bare "continue", not harness markup, and
    at least a few words."""
    if not isinstance(text, str):
        return False
    bare = text.strip().lower().rstrip(".!…").strip()
    if bare in NOT_A_REQUEST or _HARNESS_MARKUP.match(text) or bare.startswith("caveat:"):
        return False
    return len(bare.split()) >= MIN_WORDS


def _user_text(record: Any) -> str | None:
    if not isinstance(record, dict) or record.get("type") != "user":
        return None
    if record.get("isMeta") or record.get("isSidechain") or record.get("isCompactSummary"):
        return None
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            block["text"]
            for block in content
            if isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        ]
        return "\n".join(texts) if texts else None
    return None


def first_prompt_in_transcript(
    path: str, max_bytes: int = TRANSCRIPT_MAX_BYTES, roots: Sequence[Path] | None = None
) -> str | None:
    """The first substantive user prompt in a Claude Code transcript; None when there is none,
    or the file cannot be read. Only the first `max_bytes` are read; bad lines are skipped.
    The file a hook names is read as harness_files.read_named reads one: never blocking,
    within a time, the file the name names; with `roots`, only a `.jsonl` under a
    `.claude/projects` folder inside the roots.
    """

    def first(f: Any, _: object) -> str | None:
        for raw in _lines(f, max_bytes):
            try:
                text = _user_text(json.loads(raw))
            except (ValueError, RecursionError):
                continue  # a half-written or foreign line
            if text is not None and is_substantive(text):
                return text.strip()
        return None

    return read_named(path, roots, (".jsonl",), first)


def _lines(f: Any, max_bytes: int) -> Any:
    read = 0
    while read < max_bytes:
        raw = f.readline(LINE_MAX_BYTES)
        if not raw:
            return
        read += len(raw)
        if raw.endswith(b"\n") or len(raw) < LINE_MAX_BYTES:
            yield raw
        else:
            while raw and not raw.endswith(b"\n"):  # an over-long line is skipped whole
                raw = f.readline(LINE_MAX_BYTES)
                read += len(raw)
