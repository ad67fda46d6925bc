"""MCPServer specifics: the SDK's argument validation is told from a tool's own ToolError raised
from a ValidationError of the tool's making. Asyncio and trio."""

from __future__ import annotations

from typing import Any

import pytest
from integrations_support import envelope, texts
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ValidationError

from fusion_guard import Guard
from fusion_guard.integrations.mcp import install

pytestmark = pytest.mark.anyio


class Invoice(BaseModel):
    amount: int


def app() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("invoices", log_level="CRITICAL")

    @server.tool()
    async def import_invoice(raw: str) -> str:
        try:
            Invoice.model_validate_json(raw)  # upstream data, not the caller's arguments
        except ValidationError as exc:
            raise ToolError("The stored invoice is corrupt") from exc
        return "imported"

    install(server, Guard())
    return server


async def test_a_tools_own_tool_error_from_a_validation_error_stays_its_message() -> None:
    async with Client(app()) as client:
        result = await client.call_tool("import_invoice", {"raw": "{}"})
    assert result.is_error
    # The SDK's own wording for a deliberate ToolError, untouched: no <validation_error>.
    assert texts(result) == "Error executing tool import_invoice: The stored invoice is corrupt"


async def test_the_sdks_argument_validation_is_a_validation_error() -> None:
    async with Client(app()) as client:
        result = await client.call_tool("import_invoice", {"raw": 42})
    invalid = envelope(result)
    assert invalid.code == "VALIDATION_ERROR"
    assert invalid.details["action"] == "import_invoice"
