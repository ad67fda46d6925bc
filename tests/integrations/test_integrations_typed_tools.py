"""Envelopes from tools of every annotation, through both SDKs' real clients: a returned envelope
is an envelope (not a crash, not a quoted success), and a warning from a tool with an output
schema reaches the client intact."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from integrations_support import texts
from mcp import Client
from pydantic import BaseModel

from fusion_guard import Guard, error, parse_tool_error, tool_error

pytestmark = pytest.mark.anyio


class Invoice(BaseModel):
    number: str


def _conflict() -> Any:
    return tool_error("CONFLICT", "Invoice already paid")


def _stale() -> Any:
    return error("STALE_DATA", "Served from a cached copy").severity("warning")


def _register(add: Callable[[Callable[..., Any]], Any]) -> None:
    """The same tools on either SDK: ``add`` is its decorator."""

    @add
    async def returns_error_typed() -> str:
        return _conflict()  # type: ignore[no-any-return]

    @add
    async def returns_error_untyped():  # type: ignore[no-untyped-def]
        return _conflict()

    @add
    async def returns_error_model() -> Invoice:
        return _conflict()  # type: ignore[no-any-return]

    @add
    async def raises_warning_typed() -> str:
        raise _stale()

    @add
    async def returns_warning_typed() -> str:
        return _stale()  # type: ignore[no-any-return]

    @add
    async def returns_warning_untyped():  # type: ignore[no-untyped-def]
        return _stale()

    @add
    async def raises_warning_model() -> Invoice:
        raise _stale()

    @add
    async def plain_typed() -> str:
        return "fine"


@asynccontextmanager
async def _client(sdk: str, anyio_backend: str) -> AsyncIterator[Any]:
    if sdk == "mcpserver":
        from mcp.server.mcpserver import MCPServer

        from fusion_guard.integrations.mcp import install

        server: Any = MCPServer("typed", log_level="CRITICAL")
        _register(server.tool())
        install(server, Guard(metrics=False))
        async with Client(server) as client:
            yield client
        return
    from fastmcp import FastMCP

    from fusion_guard.integrations.fastmcp import GuardMiddleware

    app = FastMCP("typed")
    _register(app.tool)
    app.add_middleware(GuardMiddleware(metrics=False))
    if anyio_backend == "asyncio":  # FastMCP's own client (asyncio only)
        from fastmcp import Client as FastMCPClient

        async with FastMCPClient(app) as fastmcp_client:
            yield _RaiseFree(fastmcp_client)
        return
    async with Client(app._mcp_server) as client:
        yield client


class _RaiseFree:
    """FastMCP's client, answering error results instead of raising ToolError (its default)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return await self._client.call_tool(name, arguments, raise_on_error=False)


@pytest.fixture(params=["mcpserver", "fastmcp"])
def sdk(request: pytest.FixtureRequest) -> str:
    return str(request.param)


_RETURNED_ERRORS = [
    (sdk, tool)
    for sdk in ("mcpserver", "fastmcp")
    for tool in ("returns_error_typed", "returns_error_untyped", "returns_error_model")
    # FastMCP serializes any returned object as the annotated model, silently (an envelope
    # becomes {}): a tool annotated with a model raises its envelopes (the documented limit).
    if (sdk, tool) != ("fastmcp", "returns_error_model")
]


@pytest.mark.parametrize(("sdk_name", "tool"), _RETURNED_ERRORS)
async def test_a_returned_error_envelope_arrives_as_itself(
    sdk_name: str, anyio_backend: str, tool: str
) -> None:
    async with _client(sdk_name, anyio_backend) as client:
        result = await client.call_tool(tool, {})
    assert result.is_error
    assert texts(result) == _conflict().text


@pytest.mark.parametrize(
    "tool", ["raises_warning_typed", "returns_warning_typed", "returns_warning_untyped"]
)
async def test_a_warning_reaches_the_client_as_a_success(
    sdk: str, anyio_backend: str, tool: str
) -> None:
    async with _client(sdk, anyio_backend) as client:
        result = await client.call_tool(tool, {})  # the client validated it: no RuntimeError
    assert not result.is_error
    assert texts(result) == _stale().text
    parsed = parse_tool_error(texts(result))
    assert parsed is not None
    assert (parsed.code, parsed.severity) == ("STALE_DATA", "warning")


async def test_a_warning_from_a_tool_of_another_shape_is_flagged_not_refused(
    sdk: str, anyio_backend: str
) -> None:
    async with _client(sdk, anyio_backend) as client:
        result = await client.call_tool("raises_warning_model", {})
    assert result.is_error  # no envelope fits an Invoice: sent flagged, the text still says so
    assert texts(result) == _stale().text


async def test_a_plain_typed_result_is_untouched(sdk: str, anyio_backend: str) -> None:
    async with _client(sdk, anyio_backend) as client:
        result = await client.call_tool("plain_typed", {})
    assert not result.is_error
    assert texts(result) == "fine"
    assert result.structured_content == {"result": "fine"}


async def test_fastmcp_logs_no_crash_for_a_raised_envelope(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with _client("fastmcp", anyio_backend) as client:
        await client.call_tool("raises_warning_typed", {})
    crashes = [r for r in caplog.records if r.name.startswith("fastmcp") and r.exc_info]
    assert crashes == []
