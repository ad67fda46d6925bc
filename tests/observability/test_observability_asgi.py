"""metrics_app and add_metrics_route: /metrics inside a server's own HTTP app.

The app is driven in process (httpx2's ASGI transport) for what it answers, and a real
Prometheus scrapes it from an MCPServer's streamable-HTTP port (uvicorn on loopback).
"""

from __future__ import annotations

import gzip
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from observability_support import Prometheus, require_binary, samples, value
from prometheus_client import REGISTRY, CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import Route

from fusion_guard import ConfigurationError, Guard, PrometheusObserver, serve_metrics
from fusion_guard.integrations.mcp import install
from fusion_guard.observability import MetricsApp, add_metrics_route, metrics_app
from http_serving import served

pytestmark = pytest.mark.anyio


def observed_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    bound = PrometheusObserver(registry).for_tool("search", max_active=3)
    bound.admitted(0.0)
    bound.finished("ok", 0.02)
    return registry


async def get(app: Any, path: str, **headers: str) -> httpx2.Response:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://metrics") as http:
        return await http.get(path, headers=headers)


async def test_routed_in_starlette_it_serves_the_registry(anyio_backend: str) -> None:
    app = Starlette(routes=[Route("/metrics", metrics_app(registry=observed_registry()))])
    page = await get(app, "/metrics")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/plain")
    found = samples(page.text)
    assert value(found, "fusion_guard_calls_total", tool="search", outcome="ok") == 1
    assert value(found, "fusion_guard_concurrency_limit", tool="search") == 3


async def test_it_compresses_when_the_scraper_accepts_gzip(anyio_backend: str) -> None:
    app = metrics_app(registry=observed_registry())
    transport = httpx2.ASGITransport(app=app)
    async with (
        httpx2.AsyncClient(transport=transport, base_url="http://metrics") as http,
        http.stream("GET", "/", headers={"accept-encoding": "gzip"}) as answer,
    ):
        body = b"".join([chunk async for chunk in answer.aiter_raw()])
    assert answer.headers["content-encoding"] == "gzip"
    assert b"fusion_guard_calls_total" in gzip.decompress(body)


async def test_it_refuses_scopes_other_than_http(anyio_backend: str) -> None:
    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: Any) -> None:
        raise AssertionError("nothing is sent")

    with pytest.raises(ValueError, match="HTTP requests, not 'websocket'"):
        await metrics_app(registry=CollectorRegistry())({"type": "websocket"}, receive, send)


def test_without_a_registry_it_serves_the_guards_default_one() -> None:
    assert metrics_app().registry is REGISTRY


@pytest.mark.parametrize("registry", [object(), "REGISTRY", PrometheusObserver])
def test_what_is_not_a_registry_is_refused_at_once(registry: object) -> None:
    with pytest.raises(ConfigurationError, match=r"registry=.* expected a prometheus_client"):
        metrics_app(registry=registry)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"registry=.* expected a prometheus_client"):
        serve_metrics(0, registry=registry)  # type: ignore[arg-type]


def test_the_route_is_added_with_get_only() -> None:
    class Server:
        def __init__(self) -> None:
            self.routes: list[tuple[str, list[str], object]] = []

        def custom_route(self, path: str, methods: list[str]) -> Any:
            return lambda endpoint: self.routes.append((path, methods, endpoint))

    server = Server()
    app = add_metrics_route(server, "/internal/metrics", registry=CollectorRegistry())
    assert isinstance(app, MetricsApp)
    assert server.routes == [("/internal/metrics", ["GET"], app)]


@pytest.mark.parametrize("path", ["metrics", "", None, b"/metrics"])
def test_a_bad_path_is_refused(path: object) -> None:
    server = MCPServer("bad-path")
    with pytest.raises(ConfigurationError, match=r"path=.* expected a URL path starting with '/'"):
        add_metrics_route(server, path)  # type: ignore[arg-type]


def test_a_server_without_custom_routes_is_refused() -> None:
    from mcp.server.lowlevel import Server

    with pytest.raises(ConfigurationError, match="MCPServer or a FastMCP server, not Server"):
        add_metrics_route(Server("low-level"))  # type: ignore[arg-type]


def guarded_mcpserver(registry: CollectorRegistry) -> Any:
    server: MCPServer[Any] = MCPServer("scraped", log_level="CRITICAL")

    @server.tool()
    async def lookup() -> str:
        return "found"

    install(server, Guard(registry=registry))
    add_metrics_route(server, registry=registry)
    return server.streamable_http_app()


# A real Prometheus on its own clock: the point is the scrape, not the event loop; one loop.
@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_real_prometheus_scrapes_the_mcp_servers_own_port(
    anyio_backend: str, tmp_path: Any
) -> None:
    binary = require_binary("prometheus")
    registry = CollectorRegistry()
    with served(lambda: guarded_mcpserver(registry)) as base:
        async with Client(streamable_http_client(f"{base}/mcp")) as client:
            await client.call_tool("lookup", {})
            await client.call_tool("lookup", {})
        prometheus = Prometheus(binary, tmp_path, [base.removeprefix("http://")])
        try:
            await anyio.to_thread.run_sync(prometheus.wait_ready)
            query = 'fusion_guard_calls_total{tool="lookup", outcome="ok"}'
            result = await anyio.to_thread.run_sync(prometheus.poll, query, bool)
            up = await anyio.to_thread.run_sync(prometheus.query, "up")
        finally:
            prometheus.stop()
    assert [float(series["value"][1]) for series in result] == [2.0]
    assert [series["value"][1] for series in up] == ["1"]
