"""What the adapters add to a tool call, end to end through each SDK, in the same run.

A real client session (in-process) calls a trivial tool on the same server with and without the
guard; the session is opened outside the timed region, so the figure is the cost of one
``tools/call`` round trip. The guard has the default limits (what ``Guard()`` gives: an
adaptive concurrency limit, ``max_active="auto"``, and a handler deadline), admitting every
call, so it pays for the whole admission path of an untuned server; a second figure has a fixed
limit instead (``max_active=10``), a third adds a rate limit to it.
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

from bench_support import Figures
from fusion_guard import Guard
from fusion_guard.integrations.fastmcp import GuardMiddleware
from fusion_guard.integrations.mcp import install

OPS = 200
ROUNDS = 15
#: The guard's overhead per call through each SDK with a fixed limit: within 10 % of the SDK alone
#: (the round trip in process is 150-800 us; the guard adds about 15 us).
TARGET = 1.1
FIXED_LIMIT: dict[str, Any] = {"max_active": 10}
#: As installed with ``Guard()``: the adaptive limit learns from every finished call (its
#: uncrowded median, its window, the parallelism and the queue that follow), about 10 us more
#: through MCPServer on this machine: within 20 %.
DEFAULT_TARGET = 1.2
#: With an in-memory rate limit as well (one GCRA decision more, about 4 us): within 15 %.
RATE_LIMITED_TARGET = 1.15
RATE_LIMITED: dict[str, Any] = {**FIXED_LIMIT, "rate": 100_000, "burst": 100_000}


def _mcpserver(guarded: dict[str, Any] | None) -> MCPServer[Any]:
    app: MCPServer[Any] = MCPServer("bench", log_level="CRITICAL")

    @app.tool()
    async def ping() -> str:
        return "pong"

    if guarded is not None:
        install(app, Guard(**guarded))
    return app


def _fastmcp(guarded: dict[str, Any] | None) -> FastMCP:
    app = FastMCP("bench")

    @app.tool
    async def ping() -> str:
        return "pong"

    if guarded is not None:
        app.add_middleware(GuardMiddleware(Guard(**guarded)))
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


def _mcp_batch(guarded: dict[str, Any] | None) -> Callable[[int], float]:
    app = _mcpserver(guarded)
    return _session_batch(lambda: Client(app), lambda c: c.call_tool("ping", {}))


def _fastmcp_batch(guarded: dict[str, Any] | None) -> Callable[[int], float]:
    from fastmcp import Client as FastMCPClient

    app = _fastmcp(guarded)
    return _session_batch(lambda: FastMCPClient(app), lambda c: c.call_tool("ping", {}))


@pytest.mark.parametrize(("sdk", "batch"), [("MCPServer", _mcp_batch), ("FastMCP", _fastmcp_batch)])
@pytest.mark.parametrize(
    ("limits", "label", "target"),
    [
        ({}, "Guard()", DEFAULT_TARGET),
        (FIXED_LIMIT, "Guard(max_active=10)", TARGET),
        (RATE_LIMITED, "Guard(max_active=10) with a rate limit", RATE_LIMITED_TARGET),
    ],
)
def test_guarded_tool_call_vs_unguarded(
    benchmark: pytest.FixtureRequest,
    figures: Figures,
    sdk: str,
    batch: Callable[[dict[str, Any] | None], Callable[[int], float]],
    limits: dict[str, Any],
    label: str,
    target: float,
) -> None:
    candidate, baseline = figures.time_batches(batch(limits), batch(None), ops=OPS, rounds=ROUNDS)
    name = f"guarded tools/call, {label}, vs unguarded ({sdk})"
    figures.at_most(name, candidate, baseline, target)
    benchmark.pedantic(batch(limits), args=(OPS,), rounds=1, iterations=1)
