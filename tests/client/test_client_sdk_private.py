"""The SDK internals the wrappers rely on (``fusion_guard.client._sdk``): a session's read
timeout, which neither the MCP SDK's ``ClientSession`` nor FastMCP's ``Client`` publishes. These
fail, naming the SDK and its version, the day an SDK moves it: the wrappers would then no longer
bound a retried call by the session's read timeout."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from typing import Any

import anyio
import pytest
from fastmcp import Client as FastMCPClient
from fastmcp import FastMCP
from mcp import Client, ClientSession
from mcp.server.mcpserver import MCPServer

from fusion_guard.client import wrap
from fusion_guard.client._sdk import fastmcp_read_timeout, mcp_read_timeout


@contextmanager
def client_session(read_timeout_seconds: float | None = None) -> Iterator[ClientSession]:
    """A ``ClientSession`` on a pair of memory streams (never opened: only made)."""
    send, receive = anyio.create_memory_object_stream[Any](1)
    with send, receive:
        yield ClientSession(receive, send, read_timeout_seconds=read_timeout_seconds)


def test_the_mcp_clients_read_timeout_is_public() -> None:
    client = Client(MCPServer("billing"), read_timeout_seconds=7.5)
    assert mcp_read_timeout(client) == 7.5
    assert mcp_read_timeout(Client(MCPServer("billing"))) is None


def test_the_mcp_client_sessions_read_timeout_is_where_the_wrapper_reads_it() -> None:
    with client_session(7.5) as session:
        assert mcp_read_timeout(session) == 7.5, (
            f"mcp {version('mcp')}: ClientSession no longer keeps its read timeout in"
            " _session_read_timeout_seconds; update fusion_guard/client/_sdk.py"
        )
    with client_session() as session:
        assert mcp_read_timeout(session) is None


@pytest.mark.parametrize("timeout", [7.5, 7])
def test_fastmcps_read_timeout_is_where_the_wrapper_reads_it(timeout: Any) -> None:
    client = FastMCPClient(FastMCP("billing"), timeout=timeout)
    assert fastmcp_read_timeout(client) == timeout, (
        f"fastmcp {version('fastmcp')}: Client no longer keeps its timeout in"
        " _session_kwargs['read_timeout_seconds']; update fusion_guard/client/_sdk.py"
    )
    assert fastmcp_read_timeout(FastMCPClient(FastMCP("billing"))) is None


def test_the_wrappers_read_it_when_they_wrap() -> None:
    with client_session(3.0) as session:
        assert wrap(session, server="billing")._session_timeout == 3.0
    client = wrap(FastMCPClient(FastMCP("billing"), timeout=4.0), server="billing")
    assert client._session_timeout == 4.0
