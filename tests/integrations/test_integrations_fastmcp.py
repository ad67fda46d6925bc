"""FastMCP specifics: which ToolErrors are crashes (FastMCP wraps an exception) and which are the
tool's or FastMCP's deliberate answers, with error masking on or off. Asyncio and trio (the
FastMCP server driven by the MCP SDK's client)."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from integrations_support import SECRET, envelope, texts
from mcp import Client

from fusion_guard import Guard
from fusion_guard.integrations.fastmcp import GuardMiddleware

pytestmark = pytest.mark.anyio


def app_with_failures(*, mask_error_details: bool) -> FastMCP:
    app = FastMCP("failures", mask_error_details=mask_error_details)

    @app.tool
    async def crash() -> str:
        raise KeyError(SECRET)

    @app.tool
    async def declined() -> str:
        try:
            raise LookupError(SECRET)
        except LookupError as exc:  # the tool's own ToolError, raised from another exception
            raise ToolError("Card declined") from exc

    @app.tool
    async def upstream_timeout() -> str:
        raise httpx2.ReadTimeout(SECRET)

    app.add_middleware(GuardMiddleware(Guard()))
    return app


async def call(app: FastMCP, tool: str) -> Any:
    async with Client(app._mcp_server) as client:
        return await client.call_tool(tool, {})


@pytest.mark.parametrize("mask", [False, True])
async def test_a_crash_is_internal_error_with_or_without_masking(mask: bool) -> None:
    result = await call(app_with_failures(mask_error_details=mask), "crash")
    assert envelope(result).code == "INTERNAL_ERROR"
    assert SECRET not in texts(result)


async def test_a_tools_own_tool_error_raised_from_an_exception_stays_deliberate() -> None:
    result = await call(app_with_failures(mask_error_details=False), "declined")
    assert result.is_error
    assert texts(result) == "Card declined"


async def test_fastmcps_upstream_timeout_answer_passes_through() -> None:
    result = await call(app_with_failures(mask_error_details=False), "upstream_timeout")
    assert result.is_error
    assert texts(result) == "Upstream request timed out, please retry"


def _limited_app(middleware: GuardMiddleware) -> FastMCP:
    app = FastMCP("limited")

    @app.tool
    async def lookup() -> str:
        return "found"

    app.add_middleware(middleware)
    return app


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: GuardMiddleware(rate=1, rate_per=60, burst=1), id="keywords"),
        pytest.param(lambda: GuardMiddleware.from_env(rate_per=60, burst=1), id="from_env"),
        pytest.param(lambda: GuardMiddleware(Guard(rate=1, rate_per=60, burst=1)), id="guard"),
    ],
)
async def test_the_middleware_takes_a_guard_keyword_limits_or_the_environment(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUSION_GUARD_RATE", "1")
    middleware = make()
    async with Client(_limited_app(middleware)._mcp_server) as client:
        first = await client.call_tool("lookup", {})
        second = await client.call_tool("lookup", {})
    assert texts(first) == "found"
    assert envelope(second).code == "RATE_LIMITED"
    assert middleware.guard.limits("lookup").rate == 1.0


def test_keyword_limits_are_read_as_the_guard_reads_them() -> None:
    from fusion_guard import ConfigurationError

    with pytest.raises(ConfigurationError, match="max_active"):
        GuardMiddleware(max_active=-1)
    with pytest.raises(ConfigurationError, match="either a Guard or keyword limits"):
        GuardMiddleware(Guard(), max_active=3)
    with pytest.raises(ConfigurationError, match="expected a fusion_guard Guard"):
        GuardMiddleware("not a guard")  # type: ignore[arg-type]


async def test_install_adds_the_middleware_and_runs_the_guard_with_the_server() -> None:
    from fusion_guard import ConfigurationError
    from fusion_guard.integrations.fastmcp import install

    app = FastMCP("installed")

    @app.tool
    async def lookup() -> str:
        return "found"

    middleware = install(app, max_active=1, metrics=False)
    assert middleware in app.middleware
    guard = middleware.guard
    for _ in range(2):  # the server starts twice: the guard runs with it each time
        async with Client(app._mcp_server) as client:
            assert texts(await client.call_tool("lookup", {})) == "found"
            assert guard._serving == 1  # inside the server's lifespan
        assert guard._serving == 0  # what it opened closed, the guard itself open
    assert not guard.closed
    with pytest.raises(ConfigurationError, match="guarded already"):
        install(app, Guard())
