"""A small Redis-backed program, run by tests/guard/test_guard_lifecycle.py in a process of its
own under ``python -X dev -W error::ResourceWarning``: whatever it leaves open is reported on
its stderr when the process ends.

``python redis_lifecycle_program.py REDIS_URL MODE``, MODE one of:

- ``guard``: ``async with Guard(...)`` around calls with a fleet limit and a rate limit;
- ``mcp``: an ``MCPServer`` guarded by ``install`` (the guard never closed by the program),
  started twice by the in-memory client, as a test suite does;
- ``fastmcp``: the same with FastMCP's ``install``.

The program's connections use database 9 of the Redis at REDIS_URL, so that ``CLIENT LIST``
tells them apart from any other client's: none may be left once the program is done with the
guard (the server stopped, or the guard closed). Prints ``done`` once every call was answered
as expected and nothing is left open.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from typing import Any

from fusion_guard import Guard, GuardClosed

CALLS = 10
DATABASE = "9"


def _connected(url: str) -> list[dict[str, Any]]:
    """The clients connected to the program's database now (asked on another database)."""
    import redis

    with redis.Redis.from_url(url) as checker:
        return [client for client in checker.client_list() if client.get("db") == DATABASE]


def _guard(url: str) -> Guard:
    # A fleet limit (leases, their refresher) and a rate limit, on one Guard-made connection.
    return Guard(backend="redis", redis_url=url, max_active=2, rate=1000, metrics=False)


async def _guard_alone(url: str) -> None:
    async with _guard(url) as guard:

        async def work() -> str:
            await asyncio.sleep(0)
            return "ok"

        answers = await asyncio.gather(*(guard.call("search", work) for _ in range(CALLS)))
        assert all(answer.text == "ok" for answer in answers), answers
    try:
        await guard.call("search", work)
    except GuardClosed:
        return
    raise AssertionError("a closed guard admitted a call")


async def _served(app: Any, client_of: Any) -> None:
    for _ in range(2):  # the server starts and stops twice: the guard opens again
        async with client_of(app) as client:
            answers = [await client.call_tool("search", {}) for _ in range(CALLS)]
            assert all(not answer.is_error for answer in answers), answers


async def _mcp(url: str) -> None:
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    from fusion_guard.integrations.mcp import install

    app: MCPServer[Any] = MCPServer("lifecycle", log_level="CRITICAL")

    @app.tool()
    async def search() -> str:
        return "ok"

    install(app, _guard(url))
    await _served(app, Client)


async def _fastmcp(url: str) -> None:
    from fastmcp import Client, FastMCP

    from fusion_guard.integrations.fastmcp import install

    app = FastMCP("lifecycle")

    @app.tool
    async def search() -> str:
        return "ok"

    install(app, _guard(url))
    await _served(app, Client)


if __name__ == "__main__":
    url, mode = sys.argv[1:3]
    program = {"guard": _guard_alone, "mcp": _mcp, "fastmcp": _fastmcp}[mode]
    asyncio.run(program(url.rsplit("/", 1)[0] + "/" + DATABASE))
    left = _connected(url)
    assert not left, f"connections left open: {left}"
    # What the program dropped is collected now, while warnings can still be reported (an
    # object in a reference cycle might otherwise live until the interpreter is torn down).
    gc.collect()
    print("done")
