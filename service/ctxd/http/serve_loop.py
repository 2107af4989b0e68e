"""uvicorn's server with an idle loop that wakes once a second instead of ten times.

uvicorn's main loop ticks every 0.1 s to refresh its Date header (which changes once a second)
and to notice a shutdown; on a server that is idle for hours those eleven wakeups a second are
most of its CPU. Here the loop ticks once a second, and a shutdown signal wakes it at once.
"""

import asyncio
import contextlib
import sys
from types import FrameType

import uvicorn
from uvicorn.main import STARTUP_FAILURE

from ctxd.snapshotter import news

TICK_S = 1.0
TICKS_PER_S = 10  # uvicorn counts ticks of 0.1 s: its Date header is refreshed every tenth


class QuietServer(uvicorn.Server):
    _loop: asyncio.AbstractEventLoop | None = None
    _wake: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + TICKS_PER_S) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_S)
            should_exit = await self.on_tick(counter)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)  # safe from a signal handler
            # long polls answer now, before uvicorn waits for open requests to finish: one
            # left waiting would be cancelled at the end of the grace, a traceback in the log
            self._loop.call_soon_threadsafe(news.close_all)


def run(config: uvicorn.Config) -> None:
    """What uvicorn.run does for one process without reload, with the quiet loop."""
    config.load_app()
    server = QuietServer(config=config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)
