"""End to end over stdio: a guarded server in a subprocess, spoken to in raw JSON-RPC lines.

The test forces a shed and an internal error and checks that the envelopes arrive, and that every
line on the server's stdout is a JSON-RPC message: nothing the guard does (its log of the
internal error included) may write to stdout, which is the transport.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from fusion_guard import FusionClientError, parse_tool_error

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).with_name("stdio_guarded_server.py")
SECRET = "secret-token-4242"


class RawSession:
    """JSON-RPC over the subprocess's pipes; keeps every stdout line it read."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._process = process
        self._stdin = process.stdin
        self._stdout = BufferedByteReceiveStream(process.stdout)
        self.lines: list[bytes] = []
        self.messages: list[dict[str, Any]] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self._stdin.send(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

    async def request(self, id_: int, method: str, params: dict[str, Any]) -> None:
        await self.send({"id": id_, "method": method, "params": params})

    async def wait_for(self, matches: Any) -> dict[str, Any]:
        """Read lines until a message satisfies ``matches``; every line must be JSON-RPC."""
        for message in self.messages:
            if matches(message):
                return message
        while True:
            line = await self._stdout.receive_until(b"\n", 1 << 20)
            self.lines.append(line)
            message = json.loads(line)  # a non-JSON line fails the test here
            assert message.get("jsonrpc") == "2.0", line
            self.messages.append(message)
            if matches(message):
                return message

    async def response(self, id_: int) -> dict[str, Any]:
        return await self.wait_for(lambda m: m.get("id") == id_ and "method" not in m)

    async def initialize(self) -> None:
        """The MCP handshake, as request 1."""
        await self.request(
            1,
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "stdio-test", "version": "0"},
            },
        )
        assert "result" in await self.response(1)
        await self.send({"method": "notifications/initialized"})

    async def close(self) -> None:
        """Close stdin (the server shuts down) and read stdout to EOF, checking every line."""
        await self._stdin.aclose()
        rest = b""
        try:
            while True:
                rest += await self._stdout.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            pass
        for line in rest.splitlines():
            self.lines.append(line)
            assert json.loads(line).get("jsonrpc") == "2.0", line


def tool_text(response: dict[str, Any]) -> tuple[str, bool]:
    result = response["result"]
    return result["content"][0]["text"], bool(result.get("isError", False))


def call(name: str, progress_token: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": {}}
    if progress_token is not None:
        params["_meta"] = {"progressToken": progress_token}
    return params


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the subprocess is the system under test; one backend drives it


@pytest.mark.parametrize("sdk", ["mcpserver", "fastmcp"])
async def test_envelopes_arrive_over_stdio_and_stdout_stays_json_rpc(sdk: str) -> None:
    env = {
        **os.environ,
        "FUSION_GUARD_TOOLS": json.dumps({"slow": {"max_active": 1, "max_queue": 0}}),
        "FASTMCP_SHOW_SERVER_BANNER": "false",
    }
    stderr = bytearray()
    with anyio.fail_after(60):
        async with (
            await anyio.open_process([sys.executable, str(SERVER), sdk], env=env) as process,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(_collect, process, stderr)  # a full stderr pipe would stall the server
            session = RawSession(process)
            reference = await _exchange(session)
            await session.close()
    assert session.lines, "the server wrote nothing"
    assert SECRET.encode() not in b"".join(session.lines)
    assert reference.encode() in stderr  # the internal error was logged, on stderr


async def _collect(process: Process, into: bytearray) -> None:
    assert process.stderr is not None
    async for chunk in process.stderr:
        into += chunk


async def _exchange(session: RawSession) -> str:
    """Initialize, force a shed and an internal error; returns the internal error's reference."""
    await session.initialize()

    await session.request(2, "tools/call", call("slow", progress_token="slow-1"))
    await session.wait_for(
        lambda m: (
            m.get("method") == "notifications/progress" and m["params"]["progressToken"] == "slow-1"
        )
    )
    await session.request(3, "tools/call", call("slow"))  # beyond capacity: shed
    busy = envelope_of(await session.response(3))
    assert busy.code == "SERVER_BUSY"
    assert busy.retry_after is not None
    assert busy.retry_after > 0

    await session.request(4, "tools/call", call("boom"))
    crash = envelope_of(await session.response(4))
    assert crash.code == "INTERNAL_ERROR"

    await session.request(5, "tools/call", call("release"))
    assert tool_text(await session.response(5)) == ("released", False)
    assert tool_text(await session.response(2)) == ("slow done", False)

    await session.request(6, "tools/list", {})
    listed = await session.response(6)
    assert {tool["name"] for tool in listed["result"]["tools"]} >= {"slow", "boom", "release"}
    return crash.details["reference"]


def envelope_of(response: dict[str, Any]) -> FusionClientError:
    text, is_error = tool_text(response)
    parsed = parse_tool_error(text)
    assert is_error
    assert parsed is not None, text
    return parsed
