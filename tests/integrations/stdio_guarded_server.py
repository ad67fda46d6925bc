"""A guarded MCP server on stdio, run as a subprocess by test_integrations_stdio.py.

``python stdio_guarded_server.py mcpserver|fastmcp``. The limits come from the environment
(``FUSION_GUARD_*``, read by ``Guard.from_env()``). ``slow`` reports progress once it is
running (so the test knows it holds its slot without sleeping) and waits until ``release`` is
called; ``boom`` raises an exception whose text is a secret.
"""

import sys
from typing import Any

import anyio

from fusion_guard import Guard

SECRET = "secret-token-4242"
_released: list[anyio.Event] = []


def _release_event() -> anyio.Event:
    if not _released:  # created inside the server's event loop
        _released.append(anyio.Event())
    return _released[0]


async def _slow(report_progress: Any) -> str:
    await report_progress(0, 1)
    await _release_event().wait()
    return "slow done"


def _boom() -> str:
    raise RuntimeError(SECRET)


def run_mcpserver() -> None:
    from mcp.server.mcpserver import Context, MCPServer

    from fusion_guard.integrations.mcp import install

    app: MCPServer[Any] = MCPServer("stdio-guarded", log_level="WARNING")

    @app.tool()
    async def slow(ctx: Context) -> str:
        return await _slow(ctx.report_progress)

    @app.tool()
    async def release() -> str:
        _release_event().set()
        return "released"

    @app.tool()
    async def boom() -> str:
        return _boom()

    install(app, Guard.from_env())
    app.run("stdio")


def run_fastmcp() -> None:
    from fastmcp import Context, FastMCP

    from fusion_guard.integrations.fastmcp import GuardMiddleware

    app = FastMCP("stdio-guarded")

    @app.tool
    async def slow(ctx: Context) -> str:
        return await _slow(ctx.report_progress)

    @app.tool
    async def release() -> str:
        _release_event().set()
        return "released"

    @app.tool
    async def boom() -> str:
        return _boom()

    app.add_middleware(GuardMiddleware(Guard.from_env()))
    app.run("stdio", show_banner=False)


if __name__ == "__main__":
    {"mcpserver": run_mcpserver, "fastmcp": run_fastmcp}[sys.argv[1]]()
