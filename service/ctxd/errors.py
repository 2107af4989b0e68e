"""Domain errors: what a use case refuses or cannot do, each with the HTTP status it means.

Transports map these once each (HTTP in `app.py`, MCP in `routes/mcp.py`, the CLI by status);
built-in exceptions are never used as domain signals, so a real OverflowError or an OS
PermissionError is a bug or a storage condition, not "limit reached" or "refused".
"""


class CtxdError(Exception):
    """Base of every domain error; `status` is the HTTP status a transport answers with."""

    status = 500


class NotFound(CtxdError, LookupError):
    """A session, watch, entry or version that does not exist."""

    status = 404


class Invalid(CtxdError, ValueError):
    """Input that fits the schema but not the rules (answered with 400 and the reason).

    A ValueError too, so a pydantic validator raising it becomes a validation error."""

    status = 400


class Refused(CtxdError):
    """A rule of the server refuses the request: outside the watch roots, not allowlisted."""

    status = 403


class LimitReached(CtxdError):
    """A configured limit is reached, such as the number of watches in a session."""

    status = 409
