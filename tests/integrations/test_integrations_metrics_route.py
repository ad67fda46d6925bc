"""``/metrics`` on the MCP server's own port: ``add_metrics_route`` on an ``MCPServer`` and on a
FastMCP server, each served over streamable HTTP by uvicorn on a loopback socket; a guarded call
through the MCP SDK's client, then a scrape of the same port. Asyncio and trio (the servers run
in a thread of their own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import httpx2
import pytest
from integrations_support import texts
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from fusion_guard import Guard
from fusion_guard.integrations.fastmcp import GuardMiddleware
from fusion_guard.integrations.mcp import install
from fusion_guard.observability import add_metrics_route
from fusion_guard.observability._metric_definitions import metric_names
from http_serving import served

pytestmark = pytest.mark.anyio

TIMEOUT = 30


def mcpserver_app(registry: CollectorRegistry) -> Any:
    server: MCPServer[Any] = MCPServer("metrics-route", log_level="CRITICAL")

    @server.tool()
    async def lookup() -> str:
        return "found"

    install(server, Guard(registry=registry, max_active=2))
    add_metrics_route(server, registry=registry)
    return server.streamable_http_app()  # what server.run("streamable-http") serves


def fastmcp_app(registry: CollectorRegistry) -> Any:
    from fastmcp import FastMCP

    server = FastMCP("metrics-route")

    @server.tool
    async def lookup() -> str:
        return "found"

    server.add_middleware(GuardMiddleware(Guard(registry=registry, max_active=2)))
    add_metrics_route(server, registry=registry)
    return server.http_app()  # what server.run("http") serves


@pytest.mark.parametrize("make_app", [mcpserver_app, fastmcp_app])
async def test_a_guarded_call_is_scraped_from_the_servers_own_port(
    make_app: Callable[[CollectorRegistry], Any],
) -> None:
    registry = CollectorRegistry()
    with served(lambda: make_app(registry)) as base, anyio.fail_after(TIMEOUT):
        async with Client(streamable_http_client(f"{base}/mcp")) as client:
            result = await client.call_tool("lookup", {})
        async with httpx2.AsyncClient(base_url=base) as http:
            page = await http.get("/metrics")
            head = await http.head("/metrics")
            post = await http.post("/metrics")
    assert texts(result) == "found"
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/plain")
    families = {family.name: family for family in text_string_to_metric_families(page.text)}
    assert {name.removesuffix("_total") for name in metric_names()} <= set(families)
    calls = {
        (sample.labels["tool"], sample.labels["outcome"]): sample.value
        for sample in families["fusion_guard_calls"].samples
    }
    assert calls[("lookup", "ok")] == 1
    assert sum(calls.values()) == 1  # the scrape itself is no guarded call
    durations = [
        s
        for s in families["fusion_guard_call_duration_seconds"].samples
        if s.name.endswith("_count")
    ]
    assert [(s.labels["tool"], s.value) for s in durations] == [("lookup", 1)]
    assert head.status_code == 200
    assert post.status_code == 405  # GET (and HEAD) only
