"""A TCP proxy in front of the test Redis whose connections are slow to set up: every reply of a
new connection waits until ``delay`` seconds after it opened (as a cold, loaded process sees
its first connections), later replies pass at once. Loopback only, in the test's event loop."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Self

__all__ = ["SlowStartProxy"]


class SlowStartProxy:
    """``async with SlowStartProxy(redis_port, delay) as proxy:`` then connect to ``proxy.url``."""

    def __init__(self, redis_port: int, delay: float) -> None:
        self.redis_port = redis_port
        self.delay = delay
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        opened = loop.time()
        upstream_reader, upstream_writer = await asyncio.open_connection(
            "127.0.0.1", self.redis_port
        )
        for pipe in (
            self._pipe(reader, upstream_writer, None),
            self._pipe(upstream_reader, writer, opened + self.delay),
        ):
            task = loop.create_task(pipe)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _pipe(
        source: asyncio.StreamReader, sink: asyncio.StreamWriter, hold_until: float | None
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            while data := await source.read(65536):
                if hold_until is not None:
                    await asyncio.sleep(hold_until - loop.time())  # the slowness simulated
                    hold_until = None
                sink.write(data)
                await sink.drain()
        except ConnectionError:
            pass
        finally:
            sink.close()
