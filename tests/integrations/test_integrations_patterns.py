"""A per-tool pattern that matches none of the server's tools gives no tool its limits: both
adapters say so (a warning naming the pattern and the tools that exist, or with ``strict_tools``
an error), checked against the tools the server really has, through the real SDKs."""

from __future__ import annotations

import functools
import logging
from typing import Any

import pytest
from integrations_support import Harness
from mcp.shared.exceptions import MCPError

from fusion_guard import ConfigurationError, Guard
from holding_gate import Gate

pytestmark = pytest.mark.anyio

# The trap: the README named the tool "billing.get_invoice", the SDKs send "get_invoice".
_MISNAMED = {"billing.*": {"rate": 5}, "fast": {"max_active": 2}}


def _unmatched(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        r.fields  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "fusion_guard" and getattr(r, "event", None) == "tool_pattern_unmatched"
    ]


async def _list_and_call(harness: Harness, app: Any) -> None:
    """What a client does first: list the tools, call one (each adapter checks by then)."""
    async with harness.session(app) as client:
        assert "fast" in await client.list_tools()
        assert not (await client.call("fast")).is_error


async def test_a_pattern_that_matches_no_tool_is_a_warning_naming_the_tools(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="fusion_guard")
    app = harness.build(Gate(), Guard(metrics=False, tools=_MISNAMED))
    await _list_and_call(harness, app)
    await _list_and_call(harness, app)  # once per pattern, not once per session or listing

    [warning] = _unmatched(caplog)
    assert warning["pattern"] == "billing.*"  # "fast" matches a tool: no word about it
    assert {"fast", "slow", "boom", "conflict", "refuse"} <= set(warning["tools"].split(", "))
    assert warning["adapter"] == ("fastmcp" if harness.sdk == "fastmcp" else "mcp")


async def test_a_bare_name_pattern_is_no_warning(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="fusion_guard")
    guard = Guard(metrics=False, tools={"fast": {"rate": 5}, "s*": {"max_active": 1}})
    await _list_and_call(harness, harness.build(Gate(), guard))
    assert _unmatched(caplog) == []


@pytest.mark.parametrize("sdk", ["mcpserver", "fastmcp"])
async def test_a_tool_registered_after_the_guard_counts(
    sdk: str, anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Tools registered after ``install`` / ``add_middleware`` are the server's tools too: the
    check runs once the server serves, not when the guard is attached."""
    caplog.set_level(logging.WARNING, logger="fusion_guard")
    harness = Harness(sdk, anyio_backend)
    app = harness.build(Gate(), Guard(metrics=False, tools={"get_*": {"rate": 5}}))

    async def get_invoice(invoice_id: str) -> str:
        return f"invoice {invoice_id}"

    app.add_tool(get_invoice)
    await _list_and_call(harness, app)
    assert _unmatched(caplog) == []


async def test_strict_tools_stops_an_mcpserver_from_starting(anyio_backend: str) -> None:
    harness = Harness("mcpserver", anyio_backend)
    guard = Guard(metrics=False, strict_tools=True, tools=_MISNAMED)
    with pytest.raises(ConfigurationError) as raised:
        async with harness.connect(Gate(), guard):
            pytest.fail("the server started")
    message = str(raised.value)
    assert "'billing.*'" in message
    assert "add, boom, conflict, fast, refuse, slow" in message
    assert "\n" not in message


@pytest.mark.parametrize("sdk", ["lowlevel", "fastmcp"])
async def test_strict_tools_fails_every_request_the_check_sees(
    sdk: str, anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Where the tools are known only once a request lists them (the low-level ``Server``'s
    first call, FastMCP's ``tools/list``), that request fails, and so does the next one."""
    harness = Harness(sdk, anyio_backend)
    guard = Guard(metrics=False, strict_tools=True, tools=_MISNAMED)
    async with harness.connect(Gate(), guard) as client:
        checked = client.list_tools if sdk == "fastmcp" else functools.partial(client.call, "fast")
        with pytest.raises(MCPError):
            await checked()
        with pytest.raises(MCPError):
            await checked()
    logged = [r.exc_info[1] for r in caplog.records if r.exc_info]
    assert any(isinstance(e, ConfigurationError) and "'billing.*'" in str(e) for e in logged)
    assert _unmatched(caplog) == []  # an error instead of the warning


def test_strict_tools_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_STRICT_TOOLS", "true")
    assert Guard.from_env(metrics=False).settings.strict_tools is True


async def test_the_warning_lists_twenty_tools_at_most(caplog: pytest.LogCaptureFixture) -> None:
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    from fusion_guard.integrations.mcp import install

    caplog.set_level(logging.WARNING, logger="fusion_guard")
    server: MCPServer[Any] = MCPServer("many", log_level="CRITICAL")

    async def tool() -> str:
        return "done"

    for number in range(25):
        server.add_tool(tool, name=f"tool_{number:02}")
    install(server, Guard(metrics=False, tools={"billing.*": {"rate": 5}}))
    async with Client(server):
        pass
    [warning] = _unmatched(caplog)
    assert warning["tools"].startswith("tool_00, tool_01, ")
    assert warning["tools"].endswith("tool_19, and 5 more")
