"""A call's priority from each source, through both SDK adapters on real requests.

Over streamable HTTP (the servers' ASGI apps driven in process, as test_integrations_http.py
does): the tool's priority, the caller's tier (``priority_of``, read from a header) and the
request's ``_meta`` hint, which may only lower it. A slot is held (by a call whose hint lowered
it to ``background``: the guard then keeps priorities); every further call is refused at
arrival (``max_queue=0``), and its envelope says the priority it was admitted at. Over stdio:
a subprocess server whose tool is ``background`` from ``FUSION_GUARD_TOOLS``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from integrations_support import envelope, texts
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from prometheus_client import CollectorRegistry
from test_integrations_stdio import SERVER, RawSession, _collect, call, envelope_of

from fusion_guard import Guard
from fusion_guard.integrations.fastmcp import GuardMiddleware
from fusion_guard.integrations.mcp import install

pytestmark = pytest.mark.anyio

BASE = "http://127.0.0.1:8000"
HINT = "fusion-guard/priority"


class Server:
    """One app of either SDK with a ``work`` tool that holds until released."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.guard = Guard(max_active=1, max_queue=0, registry=self.registry)
        self.release = anyio.Event()
        self.holding = anyio.Event()

    async def work(self, hold: bool) -> str:
        if hold:
            self.holding.set()
            await self.release.wait()
        return "done"

    def hints_ignored(self) -> float | None:
        return self.registry.get_sample_value(
            "fusion_guard_priority_hints_ignored_total", {"tool": "work"}
        )


def tier(request: Any) -> str | None:
    return None if request is None else request.headers.get("x-tier")


def mcpserver_app(server: Server) -> Any:
    app: MCPServer[Any] = MCPServer("priorities", log_level="CRITICAL")

    @app.tool()
    async def work(hold: bool = False) -> str:
        return await server.work(hold)

    async def priority_of(ctx: Any) -> str | None:  # async, as a store look-up would be
        return tier(ctx.request)

    install(app, server.guard, priority_of=priority_of)
    return app.streamable_http_app(json_response=True, stateless_http=True)


def fastmcp_app(server: Server) -> Any:
    from fastmcp import FastMCP
    from fastmcp.server.dependencies import get_http_request

    app = FastMCP("priorities")

    @app.tool
    async def work(hold: bool = False) -> str:
        return await server.work(hold)

    def priority_of(context: Any) -> str | None:
        return tier(get_http_request())

    app.add_middleware(GuardMiddleware(server.guard, priority_of=priority_of))
    return app.http_app(json_response=True, stateless_http=True)


@asynccontextmanager
async def serving(asgi_app: Any) -> AsyncIterator[Callable[..., Any]]:
    async with asgi_app.router.lifespan_context(asgi_app):

        async def request(tier: str | None = None, hint: object = None, hold: bool = False) -> Any:
            headers = {} if tier is None else {"x-tier": tier}
            meta = None if hint is None else {HINT: hint}
            async with (
                httpx2.AsyncClient(
                    transport=httpx2.ASGITransport(app=asgi_app), base_url=BASE, headers=headers
                ) as http,
                Client(streamable_http_client(f"{BASE}/mcp", http_client=http)) as client,
            ):
                return await client.call_tool("work", {"hold": hold}, meta=meta)

        yield request


def admitted_at(result: Any) -> tuple[str, str]:
    refusal = envelope(result)
    assert refusal.code == "SERVER_BUSY"
    return refusal.details["priority"], refusal.details["admitting"]


@pytest.mark.parametrize("make_app", [mcpserver_app, fastmcp_app])
async def test_priority_from_tier_and_hint_through_the_adapter(
    make_app: Callable[[Server], Any],
) -> None:
    server = Server()
    held: list[Any] = []
    async with serving(make_app(server)) as request, anyio.create_task_group() as tasks:

        async def holder() -> None:
            held.append(await request(hint="background", hold=True))  # a hint may lower

        tasks.start_soon(holder)
        await server.holding.wait()
        # A background tier asking for critical in its hint gains nothing.
        assert admitted_at(await request(tier="background", hint="critical")) == (
            "background",
            "critical,interactive",
        )
        # A hint lowers below the tool's priority (interactive).
        assert admitted_at(await request(hint="sheddable"))[0] == "sheddable"
        # A tier cannot raise a call above its tool's.
        assert admitted_at(await request(tier="critical"))[0] == "interactive"
        # A hint naming no priority is ignored, and counted; never an error.
        assert server.hints_ignored() == 0
        assert admitted_at(await request(hint="urgent!"))[0] == "interactive"
        assert admitted_at(await request(hint=7))[0] == "interactive"
        assert server.hints_ignored() == 2
        server.release.set()
    assert texts(held[0]) == "done"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the subprocess is under test
@pytest.mark.parametrize("sdk", ["mcpserver", "fastmcp"])
async def test_a_hint_that_tries_to_raise_over_stdio(sdk: str) -> None:
    env = {
        **os.environ,
        "FUSION_GUARD_TOOLS": json.dumps(
            {"slow": {"max_active": 1, "max_queue": 0, "priority": "background"}}
        ),
        "FASTMCP_SHOW_SERVER_BANNER": "false",
    }
    stderr = bytearray()
    with anyio.fail_after(60):
        async with (
            await anyio.open_process([sys.executable, str(SERVER), sdk], env=env) as process,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(_collect, process, stderr)
            session = RawSession(process)
            await session.initialize()
            await session.request(2, "tools/call", call("slow", progress_token="slow-1"))
            await session.wait_for(
                lambda m: (
                    m.get("method") == "notifications/progress"
                    and m["params"]["progressToken"] == "slow-1"
                )
            )
            raising = call("slow")
            raising["_meta"] = {HINT: "critical"}
            await session.request(3, "tools/call", raising)
            busy = envelope_of(await session.response(3))
            await session.request(4, "tools/call", call("release"))
            await session.response(4)
            await session.response(2)
            await session.close()
    assert busy.code == "SERVER_BUSY"
    assert (busy.details["priority"], busy.details["admitting"]) == (
        "background",
        "critical,interactive",
    )
