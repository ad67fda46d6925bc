"""``wrap`` end to end over streamable HTTP: the MCP SDK's client reaches a guarded server's ASGI
app in process (httpx2's ASGI transport, JSON responses, stateless sessions), in virtual time on
asyncio and trio; the second call of a pair is refused with RATE_LIMITED and retried after its
advice."""

from __future__ import annotations

from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer

from fusion_guard import Guard, MemoryBackend
from fusion_guard.client import ATTEMPT_META_KEY, wrap
from fusion_guard.integrations.mcp import install
from virtual_time import virtual_time_backends

anyio_backend = virtual_time_backends()

BASE = "http://127.0.0.1:8000"  # a loopback Host header the SDK's DNS-rebinding check accepts


def http_app() -> Any:
    app: MCPServer[Any] = MCPServer("http-billing", log_level="CRITICAL")

    @app.tool()
    async def attempt(ctx: Context) -> str:
        return str((ctx.request_context.meta or {}).get(ATTEMPT_META_KEY))

    guard = Guard(
        max_active=None,
        timeout=None,
        rate=2,
        burst=1,
        metrics=False,
        rate_backend=MemoryBackend(clock=anyio.current_time),
    )
    install(app, guard)
    return app.streamable_http_app(json_response=True, stateless_http=True)


@pytest.mark.anyio
async def test_a_refusal_over_streamable_http_is_retried_after_its_advice() -> None:
    asgi_app = http_app()
    async with (
        asgi_app.router.lifespan_context(asgi_app),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=asgi_app), base_url=BASE) as http,
        Client(streamable_http_client(f"{BASE}/mcp", http_client=http)) as client,
    ):
        session = wrap(client)
        start = anyio.current_time()
        first = await session.call_tool_outcome("attempt", {})
        second = await session.call_tool_outcome("attempt", {})
    assert (first.stopped, first.attempts) == ("ok", 1)
    assert (second.stopped, second.attempts) == ("ok", 2)
    assert second.result.content[0].text == "2"
    assert 0.5 <= anyio.current_time() - start <= 0.5 * 1.2
