"""create_app(settings) -> Litestar: wiring of store, snapshotter, routes and error handling."""

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar, MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi import OpenAPIConfig
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from ctxd import __version__, redact
from ctxd.collectors.proc import sampler
from ctxd.errors import CtxdError
from ctxd.http import access, gc_policy, storage_errors
from ctxd.http.api import (
    harness_hook,
    health,
    hook,
    prune,
    scrub,
    search_all,
    sessions_router,
    wake,
)
from ctxd.http.mcp.mount import LazyMcp
from ctxd.http.pages import PageController
from ctxd.http.peers import handlers as peer_handlers
from ctxd.models import SESSION_ID_RULE
from ctxd.redact import log_filter as redact_log
from ctxd.render import html as templating
from ctxd.settings import Settings
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.snapshotter.triggers import Activity, Watcher
from ctxd.store.database import Store
from ctxd.usecases.operations import UseCases

log = logging.getLogger("ctxd")


def _error(status: int, detail: str) -> Response[dict[str, str | int]]:
    # status_code too: the OpenAPI schema Litestar publishes for errors requires it.
    body: dict[str, str | int] = {"status_code": status, "detail": detail}
    return Response(body, status_code=status, media_type=MediaType.JSON)


def _validation(_: Request, exc: ValidationException) -> Response[dict[str, str | int]]:
    """Name the offending field in `detail` itself, so a terse client still sees it."""
    problems = []
    for item in exc.extra if isinstance(exc.extra, list) else []:
        if isinstance(item, dict):
            where = item.get("key") or item.get("source") or "body"
            said = str(item.get("message", "invalid")).removeprefix("Value error, ")
            # the session in the path: its rule in words, not its regular expression
            problems.append(SESSION_ID_RULE if where == "sid" else f"{where}: {said}")
    detail = "; ".join(problems) or exc.detail
    return _error(400, redact.text(detail)[:2000])


def _http(_: Request, exc: HTTPException) -> Response[dict[str, str | int]]:
    return _error(exc.status_code, redact.text(str(exc.detail))[:2000])


def _domain(_: Request, exc: CtxdError) -> Response[dict[str, str | int]]:
    return _error(exc.status, redact.text(str(exc))[:2000])


def _unexpected(request: Request, exc: Exception) -> Response[dict[str, str | int]]:
    # Exception text may hold an observed secret: log it redacted, answer without it.
    log.error("unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path)
    return _error(HTTP_500_INTERNAL_SERVER_ERROR, "internal error; see the ctxd log")


def _filter_server_logs() -> None:
    # uvicorn configures its loggers after create_app ran: filter them once they exist.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        redact_log.install_log_filter(logging.getLogger(name))


def create_app(settings: Settings | None = None) -> Litestar:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        store = Store(settings.db_path)
        snapshotter = Snapshotter(settings, store)
        sampler.shared(settings.sample_interval_s)  # watched processes are sampled from now on
        cleaned = 0 if store.read_only else snapshotter.files.clean_temps()  # killed mid-write
        if cleaned:
            log.info("removed %d temp file(s) left by a killed process", cleaned)
        rebuilt = snapshotter.rebuild_files()  # tolerant: a read-only dir only logs
        if rebuilt:
            log.info("rewrote %d Markdown file(s) from the database", rebuilt)
        app.state.snapshotter = snapshotter
        app.state.activity = Activity()
        app.state.usecases = UseCases(snapshotter, app.state.activity)
        watcher = Watcher(snapshotter, app.state.activity)
        # read-only: what is stored is served, and nothing is taken in the background
        triggers = asyncio.create_task(watcher.run()) if not store.read_only else None
        gc_policy.install()  # full collections on a timer, not inside a request
        try:
            yield
        finally:
            if triggers is not None:
                triggers.cancel()
            await asyncio.to_thread(watcher.stop)
            app.state.usecases.close()
            snapshotter.close()
            sampler.stop_all()
            store.close()

    # Its lifespan comes second: the MCP tools need the snapshotter the first one sets up.
    # The access middleware in front of every route checks the bearer token for /mcp too.
    mcp = LazyMcp(settings.limits.max_body_bytes, settings.host)
    redact_log.install_log_filter(log)
    redact.load_learned(settings.data_dir)  # secrets learned before a restart, as digests
    redact.learn_own_env()
    return Litestar(
        route_handlers=[
            health,
            prune,
            scrub,
            hook,
            harness_hook,
            wake,
            search_all,
            sessions_router,
            PageController,
            mcp.handler,
            *peer_handlers,
        ],
        template_config=templating.template_config(),
        lifespan=[lifespan, mcp.lifespan],
        on_startup=[_filter_server_logs],
        middleware=[access.middleware(settings)],
        request_max_body_size=settings.limits.max_body_bytes,
        exception_handlers={
            ValidationException: _validation,
            CtxdError: _domain,
            OSError: storage_errors.storage,
            sqlite3.Error: storage_errors.storage,
            HTTPException: _http,
            Exception: _unexpected,
        },
        openapi_config=OpenAPIConfig(title="ctxd", version=__version__, path="/schema"),
        debug=False,
    )
