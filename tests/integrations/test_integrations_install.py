"""Installing the adapters: what is accepted, what is refused with which message, and the
error naming the extra to install when an SDK is missing."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import mcp_types
import pytest
from integrations_support import lowlevel_app, mcpserver_app, texts
from mcp import Client
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from fusion_guard import ConfigurationError, Guard, parse_tool_error, tool_error
from fusion_guard.integrations.mcp import install, to_call_tool_result
from holding_gate import Gate


def test_install_refuses_a_server_without_a_tools_call_handler() -> None:
    with pytest.raises(ConfigurationError, match="no tools/call handler"):
        install(Server("empty"), Guard())


def test_install_refuses_what_is_not_an_mcp_server() -> None:
    with pytest.raises(ConfigurationError, match="MCPServer or a low-level mcp Server, not dict"):
        install({}, Guard())  # type: ignore[arg-type]


@pytest.mark.parametrize("build", [mcpserver_app, lowlevel_app])
def test_install_twice_is_refused(build: Any) -> None:
    app = build(None)
    install(app, Guard())
    with pytest.raises(ConfigurationError, match="guarded already"):
        install(app, Guard())


def test_without_the_mcp_sdk_install_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp.server.lowlevel", None)  # as if mcp were missing
    with pytest.raises(ImportError, match=r'pip install "fusion-guard\[mcp\]"') as caught:
        install(object(), Guard())  # type: ignore[arg-type]
    assert isinstance(caught.value.__cause__, ImportError)


def test_without_fastmcp_the_module_import_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['fastmcp'] = None\n"  # as if fastmcp were missing
        "try:\n"
        "    import fusion_guard.integrations.fastmcp\n"
        "except ImportError as exc:\n"
        "    print(exc, '|', type(exc.__cause__).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert 'pip install "fusion-guard[fastmcp]"' in out
    assert out.strip().endswith("| ModuleNotFoundError")


def test_importing_the_mcp_adapter_does_not_import_the_sdk() -> None:
    code = (
        "import sys; sys.modules.pop('mcp', None); "
        "import fusion_guard.integrations.mcp; print('mcp' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


@pytest.mark.anyio
async def test_a_direct_call_tool_outside_a_request_keeps_the_sdk_behaviour() -> None:
    app = mcpserver_app(Gate())
    install(app, Guard())
    with pytest.raises(ToolError, match="Error executing tool boom"):
        await app.call_tool("boom", {})


@pytest.mark.anyio
async def test_an_mcpserver_tool_may_return_an_envelope_as_a_call_tool_result() -> None:
    app: MCPServer[Any] = MCPServer("returning", log_level="CRITICAL")

    @app.tool()
    async def pay() -> mcp_types.CallToolResult:
        return to_call_tool_result(tool_error("CONFLICT", "Invoice already paid"))

    install(app, Guard())
    async with Client(app) as client:
        result = await client.call_tool("pay", {})
    assert result.is_error
    parsed = parse_tool_error(texts(result))
    assert parsed is not None
    assert parsed.code == "CONFLICT"


@pytest.mark.anyio
@pytest.mark.parametrize("build", [mcpserver_app, lowlevel_app])
async def test_the_guard_runs_with_the_server_each_time_it_starts(build: Any) -> None:
    app = build(Gate())
    guard = Guard(metrics=False)
    install(app, guard)
    for _ in range(2):  # each in-memory client starts the server anew
        async with Client(app) as client:
            assert texts(await client.call_tool("fast", {})) == "fast done"
            assert guard._serving == 1  # inside the server's lifespan
        assert guard._serving == 0  # what it opened closed, the guard itself open
    assert not guard.closed
