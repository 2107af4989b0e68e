"""The agent action models (a shell command, a file edit, a prompt), harness-neutral and capped.

The harness payload mapping lives in `payloads` (standard library only, for the hooks); this
module validates its dicts, or any client's, into models. Over-long text is cut, not refused:
an action is evidence and losing its end (or start) is better than losing it.
"""

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, field_validator

from ctxd.discovery import payloads
from ctxd.discovery.payloads import (
    COMMAND_MAX_CHARS,
    OUTPUT_TAIL_MAX_CHARS,
    PATH_MAX_CHARS,
    PROMPT_MAX_CHARS,
    REFUSAL_MAX_CHARS,
)
from ctxd.harness.adapter import HarnessName

# Who reported an action: a harness, or the agent itself through MCP or the CLI.
Source = Literal[HarnessName, "mcp", "cli"]


class _Action(BaseModel):
    at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    harness: Source | None = None


class CommandAction(_Action):
    kind: Literal["command"] = "command"
    command: str = Field(min_length=1)
    cwd: str | None = None
    exit_status: int | None = None
    duration_s: float | None = Field(default=None, ge=0)
    output_tail: str = ""
    background: bool = False
    tool_id: str | None = Field(default=None, max_length=200)
    # the harness's words when it refused to run the command (a policy block, a cancel
    # before it started): the agent asked for it, nothing ran
    refused: str | None = None

    @field_validator("command")
    @classmethod
    def _cap_command(cls, value: str) -> str:
        return payloads.head(value, COMMAND_MAX_CHARS)

    @field_validator("output_tail")
    @classmethod
    def _cap_output(cls, value: str) -> str:
        return payloads.tail(value, OUTPUT_TAIL_MAX_CHARS)

    @field_validator("refused")
    @classmethod
    def _cap_refused(cls, value: str | None) -> str | None:
        return payloads.head(value, REFUSAL_MAX_CHARS) if value else None

    @field_validator("cwd")
    @classmethod
    def _cap_cwd(cls, value: str | None) -> str | None:
        return payloads.head(value, PATH_MAX_CHARS) if value else None


class FileEditAction(_Action):
    kind: Literal["file_edit"] = "file_edit"
    path: str = Field(min_length=1)
    tool: str = Field(default="", max_length=100)
    cwd: str | None = None

    @field_validator("path", "cwd")
    @classmethod
    def _cap_path(cls, value: str | None) -> str | None:
        return payloads.head(value, PATH_MAX_CHARS) if value else value


class PromptAction(_Action):
    kind: Literal["prompt"] = "prompt"
    text: str

    @field_validator("text")
    @classmethod
    def _cap_text(cls, value: str) -> str:
        return payloads.head(value, PROMPT_MAX_CHARS)


Action = Annotated[CommandAction | FileEditAction | PromptAction, Field(discriminator="kind")]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(Action)


def parse_action(data: Any) -> CommandAction | FileEditAction | PromptAction:
    """One action from a dict (raises pydantic.ValidationError on a malformed one)."""
    result: CommandAction | FileEditAction | PromptAction = _ADAPTER.validate_python(data)
    return result
