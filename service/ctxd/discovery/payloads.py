"""The harness-neutral action dicts a tool call becomes (each harness module maps its own
payloads to them, its shapes documented there), and the cuts they take.

Standard library only, so that a hook, which runs on every tool call, can import it cheaply;
`actions.py` validates the same dicts into models on the service side. Nothing here redacts:
the service redacts every action before it is stored.
"""

from typing import Any

COMMAND_MAX_CHARS = 8_192  # the start of a command says what it is; the rest is cut
OUTPUT_TAIL_MAX_CHARS = 4_096  # the end of an output holds the error and the exit
PROMPT_MAX_CHARS = 8_192  # a prompt's start states the request
PATH_MAX_CHARS = 4_096
REFUSAL_MAX_CHARS = 300  # a harness's reason for not running a command: one sentence
CUT = "…[cut]"


def head(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(CUT)] + CUT


def tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else CUT + text[len(text) - limit + len(CUT) :]


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def duration_ms(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value < 1e12 else None  # also drops NaN and infinities


def command_action(
    command: str,
    *,
    cwd: str = "",
    exit_status: int | None = None,
    duration_s: float | None = None,
    output: str = "",
    background: bool = False,
    tool_id: str = "",
    harness: str = "",
    refused: str = "",
) -> dict[str, Any]:
    return {
        "kind": "command",
        "command": head(command, COMMAND_MAX_CHARS),
        "cwd": head(cwd, PATH_MAX_CHARS) or None,
        "exit_status": exit_status,
        "duration_s": duration_s,
        "output_tail": tail(output, OUTPUT_TAIL_MAX_CHARS),
        "background": background,
        "tool_id": head(tool_id, 200) or None,
        "harness": harness or None,
        "refused": head(refused, REFUSAL_MAX_CHARS) or None,
    }


def file_edit_action(path: str, tool: str, *, cwd: str = "", harness: str = "") -> dict[str, Any]:
    return {
        "kind": "file_edit",
        "path": head(path, PATH_MAX_CHARS),
        "tool": head(tool, 100),
        "cwd": head(cwd, PATH_MAX_CHARS) or None,
        "harness": harness or None,
    }


def prompt_action(text: str, *, harness: str = "") -> dict[str, Any]:
    return {"kind": "prompt", "text": head(text, PROMPT_MAX_CHARS), "harness": harness or None}
