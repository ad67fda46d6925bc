"""Adapters for MCP server frameworks. Each is an optional extra, imported only when used.

- ``fusion_guard.integrations.mcp``: ``install(server, guard)`` for the official MCP SDK
  (``MCPServer`` and the low-level ``Server``); ``pip install "fusion-guard[mcp]"``.
- ``fusion_guard.integrations.fastmcp``: ``GuardMiddleware(guard)`` for FastMCP;
  ``pip install "fusion-guard[fastmcp]"``.
"""
