"""The contract lockfile: stable JSON, version field, round trip, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fusion_guard import ConfigurationError, Lockfile, ToolContract

SCHEMA = {
    "type": "object",
    "properties": {"b": {"type": "integer"}, "a": {"type": "string", "description": "é"}},
    "required": ["b"],
}
TOOLS_LIST = {
    "tools": [
        {"name": "zeta", "description": "Last.", "inputSchema": SCHEMA},
        {"name": "alpha", "inputSchema": {"type": "object", "properties": {}}},
    ]
}


def test_round_trip_through_a_file(tmp_path: Path) -> None:
    lock = Lockfile.from_tools(TOOLS_LIST)
    path = tmp_path / "fusion-guard.lock.json"
    lock.write(path)
    again = Lockfile.read(path)
    assert again == lock
    assert again.tools["zeta"] == ToolContract("zeta", "Last.", SCHEMA)
    assert again.tools["alpha"].description == ""
    assert again.to_json() == path.read_text(encoding="utf-8")


def test_json_is_stable_sorted_and_versioned() -> None:
    text = Lockfile.from_tools(TOOLS_LIST).to_json()
    document = json.loads(text)
    assert document["version"] == 1
    assert list(document["tools"]) == ["alpha", "zeta"]
    assert list(document["tools"]["zeta"]["inputSchema"]["properties"]) == ["a", "b"]
    assert document["tools"]["zeta"]["digest"].startswith("sha256:")
    assert text.endswith("}\n")
    assert '"é"' in text  # kept readable, not \u-escaped
    # Listing order does not matter: the same tools give the same bytes.
    reordered = {"tools": list(reversed(TOOLS_LIST["tools"]))}
    assert Lockfile.from_tools(reordered).to_json() == text


def test_digest_follows_the_contract() -> None:
    a = ToolContract("t", "d", SCHEMA)
    assert a.digest == ToolContract("t", "d", json.loads(json.dumps(SCHEMA))).digest
    assert a.digest != ToolContract("t", "d2", SCHEMA).digest
    assert a.digest != ToolContract("t", "d", {**SCHEMA, "required": []}).digest


def test_reads_mcp_tool_objects() -> None:
    from mcp_types import Tool

    tool = Tool(name="t", description="d", input_schema=SCHEMA)
    assert Lockfile.from_tools([tool]).tools["t"] == ToolContract("t", "d", SCHEMA)


def test_missing_lockfile_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigurationError, match=r"cannot read the contract lockfile .*contract lock"
    ):
        Lockfile.read(tmp_path / "absent.json")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ("[]", "not a fusion-guard lockfile"),
        ('{"tools": {}}', "lockfile version None"),
        ('{"version": 99, "tools": {}}', "lockfile version 99"),
    ],
)
def test_malformed_lockfile_names_the_problem(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Lockfile.from_json(text)


def test_rejects_what_is_no_tool_list() -> None:
    with pytest.raises(ConfigurationError, match="tools/list"):
        Lockfile.from_tools("tools")
    with pytest.raises(ConfigurationError, match="cannot read a tool contract"):
        Lockfile.from_tools([{"description": "no name"}])
