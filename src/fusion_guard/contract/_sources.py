"""Where live tool contracts come from: a server object found by import path, or a JSON file
holding a ``tools/list`` result. The MCP SDKs are only imported by the user's own module."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from pathlib import Path

from .._exceptions import ConfigurationError
from ._lockfile import ToolContract, tool_contracts

__all__ = ["import_server", "server_tools", "tools_from_json_file"]


def import_server(spec: str) -> object:
    """The object named by ``module:attr`` (``attr`` may be dotted), importing ``module``.

    The current directory is searched first, as ``python -m`` would, so ``app:mcp`` finds
    ``./app.py``.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(
            f"--server must be MODULE:ATTRIBUTE (for example 'myapp.server:mcp'), not {spec!r}"
        )
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, "")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"--server {spec!r}: cannot import {module_name!r}: {exc}"
        ) from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigurationError(
                f"--server {spec!r}: {module_name!r} has no attribute {attr!r}"
            ) from None
    return target


async def server_tools(server: object) -> dict[str, ToolContract]:
    """The tools an mcp ``MCPServer`` or a fastmcp ``FastMCP`` lists (its ``list_tools()``)."""
    list_tools = getattr(server, "list_tools", None)
    if not callable(list_tools):
        raise ConfigurationError(
            f"cannot list the tools of {type(server).__name__}: expected an mcp MCPServer or a "
            "fastmcp FastMCP (an object with an async list_tools()); or pass --tools-json"
        )
    listed = list_tools()
    if inspect.isawaitable(listed):
        listed = await listed
    return tool_contracts(listed)


def tools_from_json_file(path: str | Path) -> dict[str, ToolContract]:
    """The tools of a JSON file holding a ``tools/list`` result (or just its list of tools)."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read --tools-json {str(path)!r}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"--tools-json {str(path)!r} is not valid JSON: {exc}") from exc
    if isinstance(document, dict) and isinstance(document.get("result"), dict):
        document = document["result"]  # a whole JSON-RPC response
    return tool_contracts(document)
