"""Invented tool names through both SDKs: no gate and no metric series of their own, and the
configured tools keep their limits."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from integrations_support import Harness, envelope, texts
from prometheus_client import CollectorRegistry

from fusion_guard import Guard
from fusion_guard.integrations import mcp as mcp_integration
from fusion_guard.integrations._common import UNKNOWN_TOOLS
from holding_gate import Gate

pytestmark = pytest.mark.anyio

#: Enough that one series, gate or cached entry per name would multiply the registry's series
#: (a few dozen) many times over; more only lengthens the run.
INVENTED = 2_000


def _tools_in(registry: CollectorRegistry) -> tuple[set[str], int]:
    """The tool label values in ``registry`` and how many series it holds."""
    tools: set[str] = set()
    series = 0
    for family in registry.collect():
        for sample in family.samples:
            series += 1
            if "tool" in sample.labels:
                tools.add(sample.labels["tool"])
    return tools, series


@pytest.mark.slow
async def test_invented_names_leave_configured_limits_and_series_alone(harness: Harness) -> None:
    registry = CollectorRegistry()
    guard = Guard(registry=registry, tools={"slow": {"max_active": 1, "max_queue": 0}})
    gate = Gate()
    async with harness.connect(gate, guard) as client:
        assert not (await client.call("fast")).is_error
        _, series_before = _tools_in(registry)
        started = time.perf_counter()
        for index in range(INVENTED):
            result = await client.call(f"invented-{index}")
            assert result.is_error
        flood_seconds = time.perf_counter() - started
        # The configured tool, first called after the flood, still has its own limit.
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call, "slow")
            await gate.wait_inside(1)
            refused = envelope(await client.call("slow"))
            assert refused.code == "SERVER_BUSY"
            assert refused.details["max_active"] == "1"
            gate.release.set()
    assert guard.limits("slow").max_active == 1
    tools, series_after = _tools_in(registry)
    if harness.sdk == "lowlevel":  # its handler decides: unknown names share one gate
        assert tools == {"fast", "slow", UNKNOWN_TOOLS}
    else:  # the SDK answers them without the guard
        assert tools == {"fast", "slow"}
    # The flood added at most two tools' worth of series (slow, and the shared gate).
    assert series_after <= 3 * series_before, (series_before, series_after)
    assert flood_seconds < 60


async def test_an_unknown_tool_gets_the_sdks_own_answer(harness: Harness) -> None:
    guard = Guard(metrics=False)
    async with harness.connect(Gate(), guard) as client:
        result = await client.call("no-such-tool")
    assert result.is_error
    if harness.sdk != "lowlevel":  # not an envelope: the SDK's text, the guard never involved
        assert "no-such-tool" in texts(result)
        assert "<tool_error" not in texts(result)


async def test_a_lowlevel_server_reads_its_tool_list_at_most_once_a_second(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mcp_types
    from mcp import Client
    from mcp.server.lowlevel import Server

    listed = {"alpha"}
    reads = 0

    async def list_tools(ctx: Any, params: object) -> mcp_types.ListToolsResult:
        nonlocal reads
        reads += ctx.method == "tools/call"  # the guard's reads (the client lists tools too)
        schema = {"type": "object", "properties": {}}
        return mcp_types.ListToolsResult(
            tools=[mcp_types.Tool(name=name, input_schema=schema) for name in sorted(listed)]
        )

    async def call_tool(ctx: object, params: mcp_types.CallToolRequestParams) -> object:
        text = f"ran {params.name}"
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=text)])

    clock = [1000.0]
    monkeypatch.setattr(mcp_integration.time, "monotonic", lambda: clock[0])
    server = Server("listed", on_list_tools=list_tools, on_call_tool=call_tool)
    guard = Guard(metrics=False)
    mcp_integration.install(server, guard)
    async with Client(server) as client:
        for index in range(50):
            await client.call_tool(f"invented-{index}", {})
        assert reads == 1  # the first unknown name read the list; the rest waited for the clock
        listed.add("beta")  # a tool added at run time
        await client.call_tool("beta", {})
        shared = guard.concurrency(UNKNOWN_TOOLS)
        assert shared is not None
        assert shared.statistics().admitted == 51
        clock[0] += mcp_integration.LIST_REFRESH_SECONDS
        await client.call_tool("beta", {})
        assert reads == 2
        await client.call_tool("alpha", {})
    stats = guard.concurrency("beta")
    assert stats is not None
    assert stats.statistics().admitted == 1
