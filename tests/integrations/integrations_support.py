"""Test support for tests/integrations: servers of each SDK with the same small tools, and real
in-memory client sessions to them.

Every server has: ``slow`` (holds until the test releases it: anyio Events, no sleeps), ``fast``,
``boom`` (raises an exception whose text is a secret), ``conflict`` (raises an envelope; the
low-level server returns it), ``refuse`` (the SDK's own deliberate tool error) and ``add`` (typed
arguments, for validation failures; not on the low-level server, which validates nothing).
``Harness.connect`` yields a client whose ``call`` returns the SDK's ``CallToolResult`` and
``list_tools`` the tool names.

The FastMCP client needs asyncio (it calls ``asyncio.create_task``); under trio the FastMCP
server is reached with the MCP SDK's client instead, so the middleware still runs on both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import mcp_types
from mcp import Client
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from fusion_guard import FusionClientError, Guard, parse_tool_error, tool_error
from fusion_guard.integrations.mcp import install
from holding_gate import Gate

SECRET = "secret-token-4242"
REFUSAL = "Invoice 42 is locked by another payment run"


class ToolClient(Protocol):
    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> Any: ...

    async def list_tools(self) -> list[str]: ...

    async def list_tool_definitions(self) -> list[Any]: ...


# -- the same tools on each SDK -----------------------------------------------------------------


def mcpserver_app(gate: Gate) -> MCPServer[Any]:
    app: MCPServer[Any] = MCPServer("guarded", log_level="CRITICAL")

    @app.tool()
    async def slow() -> str:
        return await gate.hold()

    @app.tool()
    async def fast() -> str:
        return "fast done"

    @app.tool()
    async def boom() -> str:
        raise RuntimeError(SECRET)

    @app.tool()
    async def conflict() -> str:
        raise tool_error("CONFLICT", "Invoice already paid")

    @app.tool()
    async def add(a: int, b: int) -> int:
        return a + b

    @app.tool()
    async def refuse() -> str:
        raise ToolError(REFUSAL)

    return app


_TOOL_SCHEMAS = {
    "slow": {"type": "object", "properties": {}},
    "fast": {"type": "object", "properties": {}},
    "boom": {"type": "object", "properties": {}},
    "conflict": {"type": "object", "properties": {}},
    "refuse": {"type": "object", "properties": {}},
}


def lowlevel_app(gate: Gate) -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        tools = [mcp_types.Tool(name=n, input_schema=s) for n, s in _TOOL_SCHEMAS.items()]
        return mcp_types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> Any:
        if params.name == "slow":
            text = await gate.hold()
        elif params.name == "fast":
            text = "fast done"
        elif params.name == "boom":
            raise RuntimeError(SECRET)
        elif params.name == "conflict":
            return tool_error("CONFLICT", "Invoice already paid")  # returned, not raised
        else:  # "refuse": a plain error result, the low-level SDK's deliberate failure
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(type="text", text=REFUSAL)], is_error=True
            )
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=text)])

    return Server("guarded", on_list_tools=list_tools, on_call_tool=call_tool)


def fastmcp_app(gate: Gate) -> Any:
    from fastmcp import FastMCP

    app = FastMCP("guarded")

    @app.tool
    async def slow() -> str:
        return await gate.hold()

    @app.tool
    async def fast() -> str:
        return "fast done"

    @app.tool
    async def boom() -> str:
        raise RuntimeError(SECRET)

    @app.tool
    async def conflict() -> str:
        raise tool_error("CONFLICT", "Invoice already paid")

    @app.tool
    async def add(a: int, b: int) -> int:
        return a + b

    @app.tool
    async def refuse() -> str:
        from fastmcp.exceptions import ToolError as FastMCPToolError

        raise FastMCPToolError(REFUSAL)

    return app


# -- clients ------------------------------------------------------------------------------------


class _MCPClient:
    def __init__(self, client: Client) -> None:
        self._client = client

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return await self._client.call_tool(name, arguments or {})

    async def list_tools(self) -> list[str]:
        return [tool.name for tool in await self.list_tool_definitions()]

    async def list_tool_definitions(self) -> list[Any]:
        return list((await self._client.list_tools()).tools)


class _FastMCPClient:
    def __init__(self, client: Any) -> None:
        self._client = client

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return await self._client.call_tool(name, arguments or {}, raise_on_error=False)

    async def list_tools(self) -> list[str]:
        return [tool.name for tool in await self.list_tool_definitions()]

    async def list_tool_definitions(self) -> list[Any]:
        return list(await self._client.list_tools())


class Harness:
    """One SDK: builds its server, guards it, and connects a real client session."""

    def __init__(self, sdk: str, backend: str, mode: str = "auto") -> None:
        self.sdk = sdk
        self.backend = backend
        self.mode = mode

    def __repr__(self) -> str:
        return f"Harness({self.sdk})"

    def build(self, gate: Gate, guard: Guard, **options: Any) -> Any:
        if self.sdk == "fastmcp":
            from fusion_guard.integrations.fastmcp import GuardMiddleware

            app = fastmcp_app(gate)
            app.add_middleware(GuardMiddleware(guard, **options))
            return app
        app = mcpserver_app(gate) if self.sdk == "mcpserver" else lowlevel_app(gate)
        install(app, guard, **options)
        return app

    @asynccontextmanager
    async def connect(self, gate: Gate, guard: Guard, **options: Any) -> AsyncIterator[ToolClient]:
        """A client session to a fresh server guarded with ``options`` (``client_key``,
        ``awareness``)."""
        async with self.session(self.build(gate, guard, **options)) as client:
            yield client

    @asynccontextmanager
    async def session(self, app: Any) -> AsyncIterator[ToolClient]:
        """A client session to ``app``, a server ``build`` made (and the test changed since)."""
        if self.sdk == "fastmcp" and self.backend == "asyncio" and self.mode == "auto":
            from fastmcp import Client as FastMCPClient

            async with FastMCPClient(app) as client:
                yield _FastMCPClient(client)
            return
        if self.sdk == "fastmcp":
            # The FastMCP client is asyncio-only (and always modern); its server runs fine
            # under trio, and on a legacy session, with the MCP SDK's client.
            app = app._mcp_server
        async with Client(app, mode=self.mode) as mcp_client:
            yield _MCPClient(mcp_client)


def texts(result: Any) -> str:
    return "\n".join(block.text for block in result.content if hasattr(block, "text"))


def envelope(result: Any) -> FusionClientError:
    """The parsed envelope of an error result (failing the test when it is not one)."""
    assert result.is_error, texts(result)
    parsed = parse_tool_error(texts(result))
    assert parsed is not None, texts(result)
    return parsed
