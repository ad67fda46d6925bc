"""Adapters for MCP server frameworks. Each is an optional extra, imported only when used."""
