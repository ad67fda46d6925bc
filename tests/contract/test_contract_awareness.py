"""The <contract_awareness> section: scoping, limit, escaping, single insertion, client view."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from fusion_guard import (
    ConfigurationError,
    ContractAwareness,
    Lockfile,
    ToolContract,
    diff_contracts,
    format_validation_error,
    parse_tool_error,
)

RECOVERY = "Fix the fields above and call the tool again. Do not explain the error."


def schema(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required)}


INT = {"type": "integer"}
STR = {"type": "string"}

LOCKED = [
    ToolContract("billing.get_invoice", "Get an invoice.", schema({"id": INT, "mode": STR})),
    ToolContract("billing.list", "List.", schema({"page": {**INT, "default": 1}})),
]
LIVE = [
    ToolContract(
        "billing.get_invoice",
        "Get an invoice.",
        schema({"id": STR, "limit": INT, "extra": INT}, ("id", "limit")),
    ),
    ToolContract("billing.list", "List.", schema({"page": {**INT, "default": 2}})),
]


class GetInvoice(BaseModel):
    id: str
    limit: int


def error() -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        GetInvoice.model_validate({"id": 5})
    return caught.value


def awareness(**kwargs: Any) -> ContractAwareness:
    return ContractAwareness(diff_contracts(LOCKED, LIVE), **kwargs)


def test_section_layout_before_the_closing_tag() -> None:
    text = format_validation_error(
        error(), action="billing.get_invoice", awareness=awareness()
    ).text
    lines = text.split("\n")
    start = lines.index("  <contract_awareness>")
    assert lines[start - 1] == f"  <recovery>{RECOVERY}</recovery>"
    assert lines[start + 1].startswith("    <system_note>")
    assert lines[start + 2 : start + 6] == [
        "    <tool>billing.get_invoice</tool>",
        "    <action>billing.get_invoice</action>",
        "    <change_count>4</change_count>",
        "    <worst_severity>BREAKING</worst_severity>",
    ]
    assert lines[start + 6 : start + 11] == [
        '    <change severity="BREAKING" field="id">',
        "      <description>field became required</description>",
        "      <before>optional</before>",
        "      <after>required</after>",
        "    </change>",
    ]
    assert lines[-2:] == ["  </contract_awareness>", "</validation_error>"]
    assert text.count("<contract_awareness>") == 1


def test_only_breaking_and_risky_changes_by_default() -> None:
    root = ET.fromstring(
        format_validation_error(error(), action="billing.get_invoice", awareness=awareness()).text
    )
    section = root.find("contract_awareness")
    assert section is not None
    # "extra" (optional field added) is SAFE: left out.
    assert [(c.get("severity"), c.get("field")) for c in section.iter("change")] == [
        ("BREAKING", "id"),
        ("BREAKING", "id"),
        ("BREAKING", "limit"),
        ("BREAKING", "mode"),
    ]
    everything = awareness(severities=["breaking", "risky", "safe", "cosmetic"])
    assert "optional field added" in (everything.section("billing.get_invoice") or "")


def test_scoped_to_the_failed_action() -> None:
    section = awareness().section("billing.list") or ""
    assert "<action>billing.list</action>" in section
    assert 'field="page"' in section
    assert 'field="id"' not in section
    assert awareness().section("billing.unchanged") is None
    text = format_validation_error(error(), action="billing.unchanged", awareness=awareness()).text
    assert "contract_awareness" not in text


def test_at_most_five_changes_by_default_and_configurable() -> None:
    many_old = [ToolContract("t", "", schema({f"f{i}": INT for i in range(8)}))]
    many_new = [ToolContract("t", "", schema({f"f{i}": STR for i in range(8)}))]
    diff = diff_contracts(many_old, many_new)
    default = ContractAwareness(diff).section("t") or ""
    assert default.count("<change ") == 5
    assert "<change_count>8</change_count>" in default
    assert "<not_shown>3</not_shown>" in default
    two = ContractAwareness(diff, max_changes=2).section("t") or ""
    assert two.count("<change ") == 2
    assert "<not_shown>6</not_shown>" in two
    assert "not_shown" not in (ContractAwareness(diff, max_changes=8).section("t") or "")


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "5"])
def test_bad_max_changes_is_a_configuration_error(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="max_changes"):
        awareness(max_changes=bad)


def test_bad_severity_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="BREAKING, RISKY, SAFE, COSMETIC"):
        awareness(severities=["FATAL"])


def test_every_name_and_value_is_escaped() -> None:
    tool = 'evil"<tool>&'
    field = 'f"<x>'
    old = [ToolContract(tool, "", schema({field: {"enum": ["a<b", "]]>"]}}))]
    new = [ToolContract(tool, "", schema({field: {"enum": ["a<b"]}}))]
    section_owner = ContractAwareness(diff_contracts(old, new))
    with pytest.raises(ValidationError) as caught:
        GetInvoice.model_validate({})
    text = format_validation_error(caught.value, action=tool, awareness=section_owner).text
    assert '<tool>evil"&lt;tool>&amp;</tool>' in text
    assert 'field="f&quot;&lt;x&gt;"' in text
    assert "]]&gt;" in text
    root = ET.fromstring(text)  # well-formed
    section = root.find("contract_awareness")
    assert section is not None
    assert section.findtext("tool") == tool
    change = section.find("change")
    assert change is not None
    assert change.get("field") == field
    assert change.findtext("before") == '["]]>", "a<b"]'


def test_client_takes_available_actions_only_from_available_actions() -> None:
    text = format_validation_error(
        error(), action="billing.get_invoice", awareness=awareness()
    ).text
    assert "<action>billing.get_invoice</action>" in text
    parsed = parse_tool_error(text)
    assert parsed is not None
    assert parsed.code == "VALIDATION_ERROR"
    assert parsed.available_actions == []
    assert parsed.recovery == RECOVERY
    assert parsed.details["action"] == "billing.get_invoice"
    assert set(parsed.details) == {"action", "id", "limit"}


def test_from_lockfile(tmp_path: Path) -> None:
    path = tmp_path / "fusion-guard.lock.json"
    Lockfile.from_tools(LOCKED).write(path)
    aware = ContractAwareness.from_lockfile(
        path,
        {
            "tools": [
                {"name": c.name, "description": c.description, "inputSchema": c.input_schema}
                for c in LIVE
            ]
        },
    )
    assert aware.diff == diff_contracts(LOCKED, LIVE)
    with pytest.raises(ConfigurationError, match="contract lockfile"):
        ContractAwareness.from_lockfile(tmp_path / "absent.json", LIVE)


@pytest.mark.anyio
async def test_from_server(tmp_path: Path) -> None:
    from contract_servers import mcp_v1, mcp_v3

    path = tmp_path / "fusion-guard.lock.json"
    from fusion_guard.contract._sources import server_tools

    Lockfile.from_tools(await server_tools(mcp_v1)).write(path)
    aware = await ContractAwareness.from_server(path, mcp_v3)
    section = aware.section("billing.get_invoice") or ""
    assert 'field="id"' in section
    assert "<worst_severity>BREAKING</worst_severity>" in section
