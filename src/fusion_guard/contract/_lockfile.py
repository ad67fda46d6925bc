"""The contract lockfile: each tool's description and input schema, as stable JSON.

Layout (keys sorted at every level, two-space indent, trailing newline, so that a lockfile kept in
git only shows real changes)::

    {
      "tools": {
        "billing.get_invoice": {
          "description": "...",
          "digest": "sha256:...",
          "inputSchema": {...}
        }
      },
      "version": 1
    }

``digest`` is the SHA-256 of the tool's canonical description and schema: two lockfiles agree on a
tool exactly when their digests do.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._exceptions import ConfigurationError

__all__ = ["DEFAULT_LOCKFILE", "LOCKFILE_VERSION", "Lockfile", "ToolContract", "tool_contracts"]

LOCKFILE_VERSION = 1
DEFAULT_LOCKFILE = "fusion-guard.lock.json"


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class ToolContract:
    """One tool's contract: its name, description and JSON input schema."""

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """``sha256:`` and the hex digest of the canonical description and schema."""
        payload = _canonical({"description": self.description, "inputSchema": self.input_schema})
        return "sha256:" + hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "digest": self.digest,
            "inputSchema": dict(self.input_schema),
        }


def _contract_of(tool: object) -> ToolContract:
    """A ``ToolContract`` from a ``tools/list`` entry (dict), an mcp ``Tool`` or a fastmcp tool."""
    if isinstance(tool, ToolContract):
        return tool
    if isinstance(tool, Mapping):
        get = tool.get
    else:
        # fastmcp tools convert to the MCP wire shape; mcp's own Tool already is it.
        to_mcp = getattr(tool, "to_mcp_tool", None)
        if callable(to_mcp):
            tool = to_mcp()

        def get(key: str, default: object = None) -> object:
            return getattr(tool, key, default)

    name = get("name")
    schema = get("input_schema") or get("inputSchema") or get("parameters") or {}
    if not isinstance(name, str) or not isinstance(schema, Mapping):
        raise ConfigurationError(
            f"cannot read a tool contract from {type(tool).__name__} {tool!r:.80}: expected a "
            "tools/list entry {'name': str, 'inputSchema': {...}} or an MCP / fastmcp Tool"
        )
    description = get("description")
    return ToolContract(name, description if isinstance(description, str) else "", dict(schema))


def tool_contracts(tools: object) -> dict[str, ToolContract]:
    """Tool contracts by name from any accepted shape.

    Accepted: a ``tools/list`` result (``{"tools": [...]}``), a list of its entries, mcp
    ``Tool`` objects, fastmcp tools, ``ToolContract`` objects, a ``Lockfile``, or a mapping of
    names to ``ToolContract``. A name listed twice keeps its first entry.
    """
    if isinstance(tools, Lockfile):
        return dict(tools.tools)
    if isinstance(tools, Mapping):
        if "tools" in tools:
            return tool_contracts(tools["tools"])
        if all(isinstance(v, ToolContract) for v in tools.values()):
            return {str(k): v for k, v in tools.items()}
    if isinstance(tools, str | bytes) or not isinstance(tools, Iterable):
        raise ConfigurationError(
            f"tools must be a tools/list result or a list of tools, not {type(tools).__name__}"
        )
    contracts: dict[str, ToolContract] = {}
    for tool in tools:
        contract = _contract_of(tool)
        contracts.setdefault(contract.name, contract)
    return contracts


@dataclass(frozen=True, slots=True)
class Lockfile:
    """The known-good contracts of a server's tools (``version`` is the file format's)."""

    tools: Mapping[str, ToolContract]
    version: int = LOCKFILE_VERSION

    @classmethod
    def from_tools(cls, tools: object) -> Lockfile:
        """A lockfile of ``tools`` (any shape ``tool_contracts`` accepts)."""
        return cls(tool_contracts(tools))

    def to_json(self) -> str:
        """The lockfile text: sorted keys, two-space indent, trailing newline."""
        document = {
            "tools": {name: c.to_json_dict() for name, c in self.tools.items()},
            "version": self.version,
        }
        return json.dumps(document, sort_keys=True, indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "lockfile") -> Lockfile:
        """Parse a lockfile; ``ConfigurationError`` (naming ``source``) when it is not one."""
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{source} is not valid JSON: {exc}") from exc
        if not isinstance(document, dict) or not isinstance(document.get("tools"), dict):
            raise ConfigurationError(
                f'{source} is not a fusion-guard lockfile: expected {{"version": '
                f'{LOCKFILE_VERSION}, "tools": {{...}}}}'
            )
        version = document.get("version")
        if not isinstance(version, int) or not 1 <= version <= LOCKFILE_VERSION:
            raise ConfigurationError(
                f"{source} has lockfile version {version!r}; this fusion-guard reads version "
                f"{LOCKFILE_VERSION} (re-create it with `fusion-guard contract lock`)"
            )
        tools = {
            name: _contract_of({"name": name, **entry})
            for name, entry in document["tools"].items()
            if isinstance(entry, dict)
        }
        return cls(tools, version)

    @classmethod
    def read(cls, path: str | Path) -> Lockfile:
        """Read a lockfile; ``ConfigurationError`` when it is missing or malformed."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the contract lockfile {str(path)!r}: {exc.strerror or exc} "
                "(create it with `fusion-guard contract lock`)"
            ) from exc
        return cls.from_json(text, source=f"contract lockfile {str(path)!r}")

    def write(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")
