"""Every kind of answer, end to end, as a user's client receives it: a guarded server in a real
subprocess (MCPServer or FastMCP), over stdio and over streamable HTTP on 127.0.0.1, spoken to by
the official MCP SDK client and by FastMCP's client.

Each answer arrives as documented: the text (the envelope the model reads), ``isError``, and the
same facts as JSON in the result's ``_meta``.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from fusion_guard import parse_tool_error
from fusion_guard.wire._meta import META_KEY

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).with_name("e2e_server.py")
SECRET = "secret-token-4242"
LIMITS = {
    "FUSION_GUARD_TOOLS": json.dumps(
        {
            "hold": {"max_active": 1, "max_queue": 0},
            "stuck": {"timeout": 0.3},
            "limited": {"rate": 1, "rate_per": 60, "burst": 1},
        }
    )
}
STARTUP_SECONDS = 60


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # FastMCP's client is asyncio-only; the servers are subprocesses anyway


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@asynccontextmanager
async def _http_server(sdk: str) -> AsyncIterator[str]:
    port = _free_port()
    command = [sys.executable, str(SERVER), sdk, "http", str(port)]
    env = {**_base_env(), **LIMITS}
    async with await anyio.open_process(command, env=env, stdout=None, stderr=None) as process:
        try:
            with anyio.fail_after(STARTUP_SECONDS):
                while True:  # the server's own start-up: wait until it listens
                    try:
                        stream = await anyio.connect_tcp("127.0.0.1", port)
                    except OSError:
                        await anyio.sleep(0.05)
                        continue
                    await stream.aclose()
                    break
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()


def _base_env() -> dict[str, str]:
    import os

    return {key: value for key, value in os.environ.items() if not key.startswith("FUSION_GUARD_")}


class _Session:
    """One client: ``call(name, arguments, on_progress)`` returns the SDK's result object."""

    def __init__(self, kind: str, client: Any) -> None:
        self._kind = kind
        self._client = client

    async def call(self, name: str, arguments: dict[str, Any] | None = None, **extra: Any) -> Any:
        if self._kind == "fastmcp":
            progress = extra.pop("on_progress", None)
            return await self._client.call_tool(
                name, arguments or {}, raise_on_error=False, progress_handler=progress
            )
        progress = extra.pop("on_progress", None)
        return await self._client.call_tool(name, arguments or {}, progress_callback=progress)


@asynccontextmanager
async def _session(server: str, transport: str, client: str) -> AsyncIterator[_Session]:
    async with _target(server, transport, client) as target:
        if client == "fastmcp":
            from fastmcp import Client as FastMCPClient

            async with FastMCPClient(target) as fastmcp_client:
                yield _Session("fastmcp", fastmcp_client)
            return
        from mcp import Client

        async with Client(target) as mcp_client:
            yield _Session("mcp", mcp_client)


@asynccontextmanager
async def _target(server: str, transport: str, client: str) -> AsyncIterator[Any]:
    if transport == "http":
        async with _http_server(server) as url:
            yield url
        return
    args = [str(SERVER), server, "stdio"]
    if client == "fastmcp":
        from fastmcp.client.transports import StdioTransport

        yield StdioTransport(sys.executable, args, env=LIMITS)
        return
    from mcp import StdioServerParameters

    yield StdioServerParameters(command=sys.executable, args=args, env=LIMITS)


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if hasattr(block, "text"))


def _answer(result: Any) -> tuple[str, str, dict[str, Any]]:
    """(code, severity) of the envelope in the text, checked against the facts in ``_meta``."""
    parsed = parse_tool_error(_text(result))
    assert parsed is not None, _text(result)
    facts = (result.meta or {}).get(META_KEY)
    assert facts is not None, result.meta
    assert (facts["code"], facts["severity"], facts["message"]) == (
        parsed.code,
        parsed.severity,
        parsed.message,
    )
    assert facts.get("retry_after") == parsed.retry_after
    return parsed.code, parsed.severity, facts


MATRIX = [
    (server, transport, client)
    for server in ("mcpserver", "fastmcp")
    for transport in ("stdio", "http")
    for client in ("mcp", "fastmcp")
]


@pytest.mark.parametrize(("server", "transport", "client"), MATRIX)
async def test_every_answer_arrives_as_documented(server: str, transport: str, client: str) -> None:
    async with _session(server, transport, client) as session:
        ok = await session.call("ok")
        assert (ok.is_error, _text(ok)) == (False, "fine")
        assert META_KEY not in (ok.meta or {})

        for tool in ("conflict", "returns_conflict"):
            result = await session.call(tool)
            assert result.is_error, tool
            code, severity, facts = _answer(result)
            assert (code, severity) == ("CONFLICT", "error")
            assert facts["available_actions"] == ["billing.list"]

        for tool in ("stale", "stale_untyped"):
            result = await session.call(tool)  # typed or not: the client accepts it
            assert not result.is_error, tool
            assert _answer(result)[:2] == ("STALE_DATA", "warning")

        crashed = await session.call("boom")
        assert crashed.is_error
        assert _answer(crashed)[0] == "INTERNAL_ERROR"
        assert SECRET not in _text(crashed)

        timed_out = await session.call("stuck")
        assert timed_out.is_error
        assert _answer(timed_out)[0] == "TIMEOUT"

        assert _text(await session.call("limited")) == "counted"
        limited = await session.call("limited")
        assert limited.is_error
        code, _, facts = _answer(limited)
        assert code == "RATE_LIMITED"
        assert 0 < facts["retry_after"] <= 60

        invalid = await session.call("add_numbers", {"a": "one", "b": 2})
        assert invalid.is_error
        assert _answer(invalid)[0] == "VALIDATION_ERROR"

        holding = anyio.Event()

        async def on_progress(*_: Any) -> None:
            holding.set()

        async with anyio.create_task_group() as tg:
            first: list[Any] = []

            async def hold() -> None:
                first.append(await session.call("hold", on_progress=on_progress))

            tg.start_soon(hold)
            with anyio.fail_after(30):
                await holding.wait()
            busy = await session.call("hold")
            await session.call("release")
        assert busy.is_error
        code, _, facts = _answer(busy)
        assert code == "SERVER_BUSY"
        assert facts["details"]["max_active"] == "1"
        assert _text(first[0]) == "held"
