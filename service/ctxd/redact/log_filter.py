"""ctxd's own log: every record redacted (message, arguments, traceback, stack) before any
handler formats it, with the same rules as what the collectors observe."""

import logging

from ctxd.redact import text


class RedactingFilter(logging.Filter):
    """Redacts each record's message, traceback and stack before any handler formats it."""

    # Formatters of these loggers read record.args themselves (uvicorn's access line does):
    # their args are redacted one by one instead of folded into the message.
    KEEP_ARGS = frozenset({"uvicorn.access"})

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name in self.KEEP_ARGS and isinstance(record.args, tuple):
            record.msg = text(str(record.msg))
            record.args = tuple(text(a) if isinstance(a, str) else a for a in record.args)
        else:
            try:
                message = record.getMessage()
            except Exception:
                message = f"{record.msg!s} {record.args!r}"
            record.msg, record.args = text(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = text(record.exc_text)
        if record.stack_info:
            record.stack_info = text(record.stack_info)
        return True


def install_log_filter(logger: logging.Logger | None = None) -> None:
    """Add a RedactingFilter to the root logger's handlers, and to `logger` and its handlers.

    Call it after logging is configured: handlers added later do not get the filter.
    """
    root = logging.getLogger()
    targets: list[logging.Filterer] = [*root.handlers]
    if logger is not None:
        targets += [logger, *logger.handlers]
    for target in targets:
        if not any(isinstance(f, RedactingFilter) for f in target.filters):
            target.addFilter(RedactingFilter())
