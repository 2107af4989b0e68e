"""What every MCP tool shares: the session and version argument types, and error mapping."""

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, ValidationError

from ctxd import redact
from ctxd.errors import CtxdError
from ctxd.models import SESSION_ID_PATTERN

T = TypeVar("T")
SessionArg = Annotated[
    str,
    Field(
        pattern=SESSION_ID_PATTERN, max_length=64, description="the ctxd session id, a short slug"
    ),
]
Version = Annotated[int, Field(ge=1)]


def _run(call: Callable[[], T]) -> T:
    """Domain errors become tool errors a model can act on, with observed text redacted."""
    try:
        return call()
    except CtxdError as exc:
        hint = "; call list_sessions to see what exists" if exc.status == 404 else ""
        raise ToolError((redact.text(str(exc)) + hint)[:2000]) from None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
        )
        raise ToolError(redact.text(f"invalid input: {problems}")[:2000]) from None
    except ValueError as exc:
        raise ToolError(redact.text(str(exc))[:2000]) from None


def _given(**fields: Any) -> dict[str, Any]:
    """Only the arguments a model passed: the input models tell "omitted" from "null"."""
    return {k: v for k, v in fields.items() if v is not None}
