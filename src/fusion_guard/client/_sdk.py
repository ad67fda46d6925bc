"""The one thing the wrappers read of the SDKs that the SDKs do not publish: a session's read
timeout, which bounds a retried call as a whole (see ``wrap``).

- The MCP SDK's ``Client``: ``read_timeout_seconds``, a public field.
- The MCP SDK's ``ClientSession`` (mcp 2.3): no public reader; the timeout given to its
  constructor is kept in ``_session_read_timeout_seconds`` (the SDK's own subscriptions module
  reads it there too).
- FastMCP's ``Client`` (fastmcp 4.2): no public reader; its ``timeout`` is kept, converted to
  seconds, in ``_session_kwargs["read_timeout_seconds"]`` (the options it opens sessions with).

Were an SDK to move one of these, the wrapper would no longer know that session's timeout and a
retried call could outlast it (each attempt still would not):
``tests/client/test_client_sdk_private.py`` fails, naming the SDK, when these readers stop
finding a timeout given to the SDK.
"""

from __future__ import annotations

from typing import Any

__all__ = ["fastmcp_read_timeout", "mcp_read_timeout"]


def mcp_read_timeout(session: Any) -> float | None:
    """The read timeout of the MCP SDK's ``Client`` or ``ClientSession`` (None: none)."""
    timeout = getattr(session, "read_timeout_seconds", None)  # Client: public
    if timeout is None:
        timeout = getattr(session, "_session_read_timeout_seconds", None)  # ClientSession
    return timeout if isinstance(timeout, int | float) else None


def fastmcp_read_timeout(client: Any) -> float | None:
    """The read timeout of FastMCP's ``Client`` (None: none)."""
    options = getattr(client, "_session_kwargs", None)
    timeout = options.get("read_timeout_seconds") if isinstance(options, dict) else None
    return timeout if isinstance(timeout, int | float) else None
