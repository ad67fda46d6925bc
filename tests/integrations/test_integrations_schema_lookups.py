"""The adapters ask the SDK for a tool's output schema only where an answer needs it, a warning
(a success, which must match the schema), and once per tool: a refusal or another error is sent
as text whatever the tool's output, so under overload nothing is looked up per call."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from integrations_support import Harness

from fusion_guard import Guard, error
from holding_gate import Gate

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["mcpserver", "fastmcp"])
def sdk_harness(request: pytest.FixtureRequest, anyio_backend: str) -> Harness:
    """The SDKs whose adapters ask the server for a tool's schema (a low-level ``Server``'s
    come with the tool names its ``tools/list`` handler gives)."""
    return Harness(str(request.param), anyio_backend)


def _count(app: Any, method: str) -> list[str]:
    """Record each call the adapter makes of ``app.method`` (the SDK's tool look-up; the client's
    own ``tools/list`` requests reach it too, and are not the adapter's)."""
    asked: list[str] = []
    original: Callable[..., Awaitable[Any]] = getattr(app, method)

    async def counted(*args: Any, **kwargs: Any) -> Any:
        if sys._getframe(1).f_globals.get("__name__", "").startswith("fusion_guard."):
            asked.append(str(args[0]) if args else "")
        return await original(*args, **kwargs)

    setattr(app, method, counted)
    return asked


async def test_refusals_look_nothing_up_and_a_warning_once_per_tool(
    sdk_harness: Harness,
) -> None:
    guard = Guard(metrics=False, tools={"slow": {"max_active": 1, "max_queue": 0}})
    gate = Gate()
    app = sdk_harness.build(gate, guard)

    async def stale() -> str:
        return error("STALE_DATA", "Served from a cached copy").severity("warning")  # type: ignore[return-value]

    (app.tool() if sdk_harness.sdk == "mcpserver" else app.tool)(stale)
    # MCPServer: its tool list (schemas included); FastMCP: one tool by name.
    method = "list_tools" if sdk_harness.sdk == "mcpserver" else "get_tool"
    async with sdk_harness.session(app) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call, "slow")
            await gate.wait_inside(1)
            asked = _count(app, method)
            refused = [await client.call("slow") for _ in range(3)]
            gate.release.set()
        assert all(result.is_error for result in refused)
        assert asked == []  # the tool is known, and no error needs its schema
        warnings = [await client.call("stale") for _ in range(3)]
    assert not any(result.is_error for result in warnings)
    assert all(
        result.structured_content == {"result": warnings[0].content[0].text} for result in warnings
    )
    # FastMCP is asked once whether "stale" is a tool, once for its schema; MCPServer lists
    # its tools once.
    assert asked == ([""] if sdk_harness.sdk == "mcpserver" else ["stale", "stale"])
