"""The /mcp mount: loads the MCP SDK on first use, so a ctxd that never speaks MCP never pays it."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from litestar import Litestar, asgi
from litestar.handlers import ASGIRouteHandler
from litestar.types import Receive, Scope, Send

from ctxd.redact import log_filter as redact_log

if TYPE_CHECKING:
    from ctxd.http.mcp.server import McpEndpoint


class LazyMcp:
    """`handler` is the /mcp route and `lifespan` its place in the app's lifespan.

    The SDK and its dependencies hold about 30 MB; they are imported, and the MCP session
    manager started in a task of its own, when the first request reaches /mcp.
    """

    def __init__(self, max_body_bytes: int, host: str) -> None:
        self._args = (max_body_bytes, host)
        self._app: Litestar | None = None
        self._endpoint: McpEndpoint | None = None
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.handler: ASGIRouteHandler = asgi("/mcp", is_mount=True, copy_scope=True)(self._serve)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self._endpoint or await self._start()
        await endpoint.serve(scope, receive, send)

    async def _start(self) -> "McpEndpoint":
        async with self._lock:
            if self._endpoint is not None:
                return self._endpoint
            from ctxd.http.mcp import sdk as mcp_sdk

            mcp_sdk.import_server()  # first: without cryptography and rich
            from ctxd.http.mcp.server import McpEndpoint

            endpoint = McpEndpoint(*self._args)
            redact_log.install_log_filter()  # the SDK may have added a root log handler
            ready = asyncio.Event()

            async def run() -> None:
                assert self._app is not None
                async with endpoint.lifespan(self._app):
                    ready.set()
                    await self._stop.wait()

            self._task = asyncio.create_task(run())
            waiter = asyncio.create_task(ready.wait())
            await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if not ready.is_set():
                waiter.cancel()
                await self._task  # raises why the session manager could not start
            self._endpoint = endpoint
            return endpoint

    @asynccontextmanager
    async def lifespan(self, app: Litestar) -> AsyncIterator[None]:
        self._app = app
        try:
            yield
        finally:
            self._stop.set()
            if self._task is not None:
                with contextlib.suppress(Exception):
                    await self._task
            self._app = None
