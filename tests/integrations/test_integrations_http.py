"""Per-client limits over streamable HTTP, with the client key read from a request header.

The servers' ASGI apps are driven in process (httpx2's ASGI transport, JSON responses, stateless
sessions, so every request is its own connection: exactly where a session id would fail as a
key). Asyncio and trio.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from integrations_support import envelope, texts
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer

from fusion_guard import Guard
from fusion_guard.integrations.fastmcp import GuardMiddleware
from fusion_guard.integrations.mcp import install

pytestmark = pytest.mark.anyio

BASE = "http://127.0.0.1:8000"  # a loopback Host header the SDKs' DNS-rebinding checks accept


def per_client_guard() -> Guard:
    return Guard(rate=1, rate_per=60, burst=1, rate_scope="client")


def mcpserver_http_app() -> Any:
    app: MCPServer[Any] = MCPServer("http-guarded", log_level="CRITICAL")

    @app.tool()
    async def fast() -> str:
        return "fast done"

    def api_key(ctx: Any) -> str | None:  # ctx.request: the Starlette request
        return None if ctx.request is None else ctx.request.headers.get("x-api-key")

    install(app, per_client_guard(), client_key=api_key)
    return app.streamable_http_app(json_response=True, stateless_http=True)


def fastmcp_http_app() -> Any:
    from fastmcp import FastMCP
    from fastmcp.server.dependencies import get_http_request

    app = FastMCP("http-guarded")

    @app.tool
    async def fast() -> str:
        return "fast done"

    def api_key(context: Any) -> str | None:
        return get_http_request().headers.get("x-api-key")

    app.add_middleware(GuardMiddleware(per_client_guard(), client_key=api_key))
    return app.http_app(json_response=True, stateless_http=True)


@asynccontextmanager
async def serving(asgi_app: Any) -> AsyncIterator[Callable[[str], Any]]:
    """Runs the app's lifespan; yields ``call(api_key)`` making one ``fast`` call as that key."""
    async with asgi_app.router.lifespan_context(asgi_app):

        async def call(api_key: str) -> Any:
            async with (
                httpx2.AsyncClient(
                    transport=httpx2.ASGITransport(app=asgi_app),
                    base_url=BASE,
                    headers={"x-api-key": api_key},
                ) as http,
                Client(streamable_http_client(f"{BASE}/mcp", http_client=http)) as client,
            ):
                return await client.call_tool("fast", {})

        yield call


@pytest.mark.parametrize("make_app", [mcpserver_http_app, fastmcp_http_app])
async def test_a_header_keyed_client_limit_over_http(make_app: Callable[[], Any]) -> None:
    async with serving(make_app()) as call:
        alice_first = await call("alice-key")
        alice_again = await call("alice-key")
        bob_first = await call("bob-key")
    assert texts(alice_first) == "fast done"
    limited = envelope(alice_again)
    assert limited.code == "RATE_LIMITED"
    assert "alice-key" not in texts(alice_again)
    assert texts(bob_first) == "fast done"
