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
