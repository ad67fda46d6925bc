"""A real HTTP server for tests: an ASGI app served by uvicorn from a thread of its own, on a
loopback socket bound and listening before uvicorn starts, so the port is known at once and
connections wait in the backlog until the app has started (no polling for readiness).

uvicorn runs asyncio in its thread, so the test itself may run on asyncio or trio. The app is
built in that thread: anyio objects an app makes (the SDKs' locks) then belong to uvicorn's
loop, not to the test's.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

STOP_SECONDS = 15


@contextmanager
def served(make_app: Callable[[], Any]) -> Iterator[str]:
    """Serve the app ``make_app()`` builds (its lifespan included); yields the base URL
    ``http://127.0.0.1:PORT``."""
    import uvicorn

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    stopping = threading.Event()
    servers: list[uvicorn.Server] = []
    failures: list[BaseException] = []

    async def serve() -> None:
        config = uvicorn.Config(
            make_app(), lifespan="on", log_level="warning", timeout_graceful_shutdown=5
        )
        servers.append(server := uvicorn.Server(config))
        server.should_exit = stopping.is_set()
        await server.serve(sockets=[listener])

    def run() -> None:
        try:
            asyncio.run(serve())
        except BaseException as failure:  # a start-up failure exits; the test must see it
            failures.append(failure)
            listener.close()  # waiting clients fail at once instead of hanging

    thread = threading.Thread(target=run, name=f"uvicorn:{port}", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stopping.set()
        for server in servers:
            server.should_exit = True
        thread.join(STOP_SECONDS)
        listener.close()
    assert not thread.is_alive(), f"uvicorn did not stop within {STOP_SECONDS} s"
    if failures:  # uvicorn exits (SystemExit) when the app's start-up fails: its log says why
        raise RuntimeError(f"uvicorn stopped on {failures[0]!r}") from failures[0]
