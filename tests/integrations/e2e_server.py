"""A guarded MCP server with one tool per answer kind, run as a subprocess by
test_integrations_answers.py.

``python e2e_server.py mcpserver|fastmcp stdio`` or ``... http PORT`` (streamable HTTP on
127.0.0.1). The limits come from the environment (``FUSION_GUARD_*``, via ``from_env``), set by
the test: ``hold`` has one slot and no queue, ``stuck`` a short deadline, ``limited`` one call a
minute. ``hold`` reports progress once it holds its slot (so the test knows, without sleeping)
and waits until ``release`` is called.
"""

import sys
from typing import Any

import anyio
from stdio_guarded_server import SECRET, _release_event  # this script's folder is on sys.path

from fusion_guard import error, tool_error


def _conflict() -> Any:
    return tool_error("CONFLICT", "Invoice already paid", available_actions=["billing.list"])


def _stale() -> Any:
    return error("STALE_DATA", "Served from a cached copy").severity("warning")


def register(add: Any, progress: Any) -> None:
    """The tools, on either SDK: ``add`` is its decorator, ``progress(ctx)`` its reporter."""

    @add
    async def ok() -> str:
        return "fine"

    @add
    async def conflict() -> str:
        raise _conflict()

    @add
    async def returns_conflict() -> str:
        return _conflict()  # type: ignore[no-any-return]

    @add
    async def stale() -> str:
        raise _stale()

    @add
    async def stale_untyped():  # type: ignore[no-untyped-def]
        return _stale()

    @add
    async def boom() -> str:
        raise RuntimeError(SECRET)

    @add
    async def stuck() -> str:
        await anyio.sleep_forever()  # ended by the tool's deadline
        return "never"

    @add
    async def limited() -> str:
        return "counted"

    @add
    async def add_numbers(a: int, b: int) -> int:
        return a + b

    @add
    async def release() -> str:
        _release_event().set()
        return "released"

    async def hold(ctx: Any) -> str:
        await progress(ctx)
        await _release_event().wait()
        return "held"

    add(hold)


def main() -> None:
    sdk, transport = sys.argv[1], sys.argv[2]
    port = int(sys.argv[3]) if transport == "http" else 0
    if sdk == "mcpserver":
        from mcp.server.mcpserver import Context, MCPServer

        from fusion_guard import Guard
        from fusion_guard.integrations.mcp import install

        server: Any = MCPServer("answers", log_level="WARNING")

        async def report(ctx: Context) -> None:
            await ctx.report_progress(0, 1)

        def add(fn: Any) -> Any:
            if fn.__name__ == "hold":

                async def hold(ctx: Context) -> str:
                    return await fn(ctx)  # type: ignore[no-any-return]

                return server.tool(name="hold")(hold)
            return server.tool()(fn)

        register(add, report)
        install(server, Guard.from_env())
        if transport == "stdio":
            server.run("stdio")
        else:
            import uvicorn

            app = server.streamable_http_app()  # SSE responses: progress arrives mid-call
            uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
        return
    from fastmcp import Context as FastMCPContext
    from fastmcp import FastMCP

    from fusion_guard.integrations.fastmcp import GuardMiddleware

    app = FastMCP("answers")

    async def fastmcp_report(ctx: FastMCPContext) -> None:
        await ctx.report_progress(0, 1)

    def fastmcp_add(fn: Any) -> Any:
        if fn.__name__ == "hold":

            async def hold(ctx: FastMCPContext) -> str:
                return await fn(ctx)  # type: ignore[no-any-return]

            return app.tool(name="hold")(hold)
        return app.tool(fn)

    register(fastmcp_add, fastmcp_report)
    app.add_middleware(GuardMiddleware.from_env())
    if transport == "stdio":
        app.run("stdio", show_banner=False)
    else:
        app.run("http", host="127.0.0.1", port=port, show_banner=False, log_level="warning")


if __name__ == "__main__":
    main()
