"""A fresh server's first burst through an SDK client: ``--calls`` calls of ``--hold`` seconds to
a tool with ``--max-active`` slots (``Guard(max_active=2)``: queue 20, queue_timeout 5 s),
arriving ``--gap`` seconds apart as over a real transport; a refused caller comes back after
exactly its ``retry_after``. Prints, per SDK, the refusals, the most any one caller took, the
advice given, whether every refusal's figures agree with its reason, and when the last call
answered against the ideal drain (calls x hold / slots).

    python benchmarks/cold_burst.py [--calls 20] [--gap 0.005] [--hold 1.0] [--sdk mcp fastmcp]

Each SDK's client talks to its server in process (the MCP SDK's ``Client(app)``, FastMCP's
``Client(app)``: in-memory streams, no stdio or HTTP); real clock, asyncio.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp import Client
from mcp.server.mcpserver import MCPServer

from fusion_guard import Guard, parse_tool_error
from fusion_guard.integrations.fastmcp import GuardMiddleware
from fusion_guard.integrations.mcp import install

Call = Callable[[], Awaitable[Any]]


@dataclass
class BurstFigures:
    ideal: float
    done: float = 0.0
    refused: Counter[int] = field(default_factory=Counter)
    advice: list[float] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    contradictions: list[str] = field(default_factory=list)

    def line(self, sdk: str) -> str:
        told = f"{min(self.advice):.2f}-{max(self.advice):.2f} s" if self.advice else "-"
        return (
            f"{sdk:8} {sum(self.refused.values())} refusals ({dict(self.reasons)}), at most"
            f" {max(self.refused.values(), default=0)} per caller, told {told},"
            f" {len(self.contradictions)} contradicting their reason; done at {self.done:.2f} s"
            f" = {self.done / self.ideal:.2f}x the ideal {self.ideal:.1f} s"
        )


def contradiction(details: dict[str, str]) -> str | None:
    """What in a SERVER_BUSY's figures contradicts its reason, or None."""
    queued, max_queue = int(details["queued"]), int(details["max_queue"])
    if details["reason"] == "queue_full" and queued != max_queue:
        return f"queue_full at {queued} of {max_queue}"
    if int(details["active"]) > int(details["max_active"]):
        return f"{details['active']} active of {details['max_active']}"
    return None


async def burst(call: Call, calls: int, gap: float, hold: float, slots: int) -> BurstFigures:
    figures = BurstFigures(ideal=calls * hold / slots)
    start = time.monotonic()

    async def caller(index: int) -> None:
        await anyio.sleep(index * gap)
        while True:
            result = await call()
            if not result.is_error:
                figures.done = max(figures.done, time.monotonic() - start)
                return
            text = "\n".join(block.text for block in result.content if hasattr(block, "text"))
            refusal = parse_tool_error(text)
            assert refusal is not None, text
            assert refusal.code == "SERVER_BUSY", text
            assert refusal.retry_after is not None  # a SERVER_BUSY always carries one
            figures.refused[index] += 1
            figures.advice.append(refusal.retry_after)
            figures.reasons[refusal.details["reason"]] += 1
            if (wrong := contradiction(refusal.details)) is not None:
                figures.contradictions.append(wrong)
            await anyio.sleep(refusal.retry_after)

    async with anyio.create_task_group() as tg:
        for index in range(calls):
            tg.start_soon(caller, index)
    return figures


@asynccontextmanager
async def mcp_session(guard: Guard, hold: float) -> AsyncIterator[Call]:
    app: MCPServer[Any] = MCPServer("cold", log_level="CRITICAL")

    @app.tool()
    async def work() -> str:
        await anyio.sleep(hold)
        return "done"

    install(app, guard)
    async with Client(app) as client:
        yield lambda: client.call_tool("work", {})


@asynccontextmanager
async def fastmcp_session(guard: Guard, hold: float) -> AsyncIterator[Call]:
    from fastmcp import Client as FastMCPClient
    from fastmcp import FastMCP

    app = FastMCP("cold")

    @app.tool
    async def work() -> str:
        await anyio.sleep(hold)
        return "done"

    app.add_middleware(GuardMiddleware(guard))
    async with FastMCPClient(app) as client:
        yield lambda: client.call_tool("work", {}, raise_on_error=False)


SESSIONS = {"mcp": mcp_session, "fastmcp": fastmcp_session}


async def measure(sdk: str, calls: int, gap: float, hold: float, slots: int) -> BurstFigures:
    """The burst through ``sdk`` at a fresh guard (the session opened first, off the clock)."""
    async with SESSIONS[sdk](Guard(max_active=slots, metrics=False), hold) as call:
        return await burst(call, calls, gap, hold, slots)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--gap", type=float, default=0.005, help="seconds between arrivals")
    parser.add_argument("--hold", type=float, default=1.0, help="seconds per call")
    parser.add_argument("--max-active", type=int, default=2)
    parser.add_argument("--sdk", nargs="+", choices=sorted(SESSIONS), default=["mcp", "fastmcp"])
    args = parser.parse_args()
    for sdk in args.sdk:
        figures = anyio.run(measure, sdk, args.calls, args.gap, args.hold, args.max_active)
        print(figures.line(sdk))


if __name__ == "__main__":
    main()
