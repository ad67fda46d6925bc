"""What the adapters add to a tool call, end to end through each SDK, in the same run.

A real client session (in-process) calls a trivial tool on the same server with and without the
guard; the session is opened outside the timed region, so the figure is the cost of one
``tools/call`` round trip. The guard has the default limits (a concurrency limit and a handler
deadline) plus a rate limit, all admitting every call, so it pays for the full admission path.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from fastmcp import FastMCP
from mcp import Client
from mcp.server.mcpserver import MCPServer

from bench_support import Figures, time_batches
from fusion_guard import Guard
from fusion_guard.integrations.fastmcp import GuardMiddleware
from fusion_guard.integrations.mcp import install

OPS = 200
ROUNDS = 15
TARGET = 1.3  # the SDK round trip in process is 150-800 us; the guard adds 20-50 us (noisy machine)
LIMITS: dict[str, Any] = {"rate": 100_000, "burst": 100_000}


def _mcpserver(guarded: bool) -> MCPServer[Any]:
    app: MCPServer[Any] = MCPServer("bench", log_level="CRITICAL")

    @app.tool()
    async def ping() -> str:
        return "pong"

    if guarded:
        install(app, Guard(**LIMITS))
    return app


def _fastmcp(guarded: bool) -> FastMCP:
    app = FastMCP("bench")

    @app.tool
    async def ping() -> str:
        return "pong"

    if guarded:
        app.add_middleware(GuardMiddleware(Guard(**LIMITS)))
    return app


def _session_batch(
    connect: Callable[[], AbstractAsyncContextManager[Any]],
    call: Callable[[Any], Awaitable[Any]],
) -> Callable[[int], float]:
    """A batch runner timing ``ops`` calls on a session opened (untimed) in a fresh loop."""

    async def timed(ops: int) -> float:
        async with connect() as session:
            warm_up = await call(session)  # tool lookup, the guard's per-tool state
            assert not warm_up.is_error, warm_up  # every timed call is admitted and runs
            start = time.perf_counter()
            for _ in range(ops):
                await call(session)
            return time.perf_counter() - start

    return lambda ops: asyncio.run(timed(ops))


def _mcp_batch(guarded: bool) -> Callable[[int], float]:
    app = _mcpserver(guarded)
    return _session_batch(lambda: Client(app), lambda c: c.call_tool("ping", {}))


def _fastmcp_batch(guarded: bool) -> Callable[[int], float]:
    from fastmcp import Client as FastMCPClient

    app = _fastmcp(guarded)
    return _session_batch(lambda: FastMCPClient(app), lambda c: c.call_tool("ping", {}))


@pytest.mark.parametrize(("sdk", "batch"), [("MCPServer", _mcp_batch), ("FastMCP", _fastmcp_batch)])
def test_guarded_tool_call_vs_unguarded(
    benchmark: pytest.FixtureRequest,
    figures: Figures,
    sdk: str,
    batch: Callable[[bool], Callable[[int], float]],
) -> None:
    rounds = ROUNDS if figures.strict else 3  # the smoke run (make test) stays short
    candidate, baseline = time_batches(batch(True), batch(False), ops=OPS, rounds=rounds)
    figures.at_most(f"guarded tools/call vs unguarded ({sdk})", candidate, baseline, TARGET)
    benchmark.pedantic(batch(True), args=(OPS,), rounds=1, iterations=1)
