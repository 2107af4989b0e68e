"""create_app(settings) -> Litestar: wiring of store, snapshotter, routes and error handling."""

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar, MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi import OpenAPIConfig
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from service import __version__, redact
from service.routes.api import SessionController, health
from service.settings import Settings
from service.snapshots import Snapshotter
from service.store import NotFound, Store

log = logging.getLogger("ctxd")


def _error(status: int, detail: str) -> Response[dict[str, str]]:
    return Response({"detail": detail}, status_code=status, media_type=MediaType.JSON)


def _validation(_: Request, exc: ValidationException) -> Response[dict[str, str]]:
    """Name the offending field in `detail` itself, so a terse client still sees it."""
    problems = []
    for item in exc.extra if isinstance(exc.extra, list) else []:
        if isinstance(item, dict):
            where = item.get("key") or item.get("source") or "body"
            problems.append(f"{where}: {item.get('message', 'invalid')}")
    detail = "; ".join(problems) or exc.detail
    return _error(400, redact.text(detail)[:2000])


def _http(_: Request, exc: HTTPException) -> Response[dict[str, str]]:
    return _error(exc.status_code, redact.text(str(exc.detail))[:2000])


def _not_found(_: Request, exc: NotFound) -> Response[dict[str, str]]:
    return _error(404, redact.text(str(exc)))


def _conflict(_: Request, exc: OverflowError) -> Response[dict[str, str]]:
    return _error(409, redact.text(str(exc)))


def _unexpected(request: Request, exc: Exception) -> Response[dict[str, str]]:
    # Exception text may hold an observed secret: log it redacted, answer without it.
    log.error("unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path)
    return _error(HTTP_500_INTERNAL_SERVER_ERROR, "internal error; see the ctxd log")


def create_app(settings: Settings | None = None) -> Litestar:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        store = Store(settings.db_path)
        snapshotter = Snapshotter(settings, store)
        rebuilt = snapshotter.rebuild_files()
        if rebuilt:
            log.info("rewrote %d Markdown file(s) from the database", rebuilt)
        app.state.snapshotter = snapshotter
        try:
            yield
        finally:
            snapshotter.close()
            store.close()

    redact.install_log_filter(log)
    return Litestar(
        route_handlers=[health, SessionController],
        lifespan=[lifespan],
        request_max_body_size=settings.limits.max_body_bytes,
        exception_handlers={
            ValidationException: _validation,
            NotFound: _not_found,
            OverflowError: _conflict,
            HTTPException: _http,
            Exception: _unexpected,
        },
        openapi_config=OpenAPIConfig(title="ctxd", version=__version__, path="/schema"),
        debug=False,
    )
