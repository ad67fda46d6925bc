"""Real MCP server objects for the contract CLI tests (imported by ``--server`` paths)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastmcp import FastMCP
from mcp.server.mcpserver import MCPServer
from pydantic import Field

mcp_v1 = MCPServer("billing")


@mcp_v1.tool(name="billing.get_invoice", description="Get one invoice by its id.")
def get_invoice_v1(
    id: int,
    mode: Literal["summary", "full"] = "summary",
    limit: Annotated[int, Field(ge=1, le=100, description="Maximum number of lines")] = 10,
) -> str:
    return "ok"


mcp_v2 = MCPServer("billing")


@mcp_v2.tool(name="billing.get_invoice", description="Get one invoice by its id.")
def get_invoice_v2(
    id: int,
    mode: Literal["summary", "full"] = "summary",
    limit: Annotated[int, Field(ge=1, le=100, description="Maximum number of lines")] = 10,
    currency: str | None = None,
) -> str:
    return "ok"


mcp_v3 = MCPServer("billing")


@mcp_v3.tool(name="billing.get_invoice", description="Get one invoice by its id.")
def get_invoice_v3(
    id: str,
    mode: Literal["summary"] = "summary",
    limit: Annotated[int, Field(ge=1, le=50, description="Maximum number of lines")] = 10,
) -> str:
    return "ok"


fast_v1 = FastMCP("billing")


@fast_v1.tool(name="billing.list_invoices")
def list_invoices_v1(customer: str, page: int = 1) -> str:
    """List a customer's invoices."""
    return "ok"


fast_v2 = FastMCP("billing")


@fast_v2.tool(name="billing.list_invoices")
def list_invoices_v2(customer: str, page: int = 1, status: str = "open") -> str:
    """List a customer's invoices."""
    return "ok"


fast_breaking = FastMCP("billing")


@fast_breaking.tool(name="billing.list_invoices")
def list_invoices_breaking(customer: str, page: int, cursor: str) -> str:
    """List a customer's invoices."""
    return "ok"


not_a_server = object()
