"""diff_contracts: each kind of change and its severity."""

from __future__ import annotations

from typing import Any

import pytest

from fusion_guard import ChangeSeverity, ContractChange, Lockfile, ToolContract, diff_contracts
from fusion_guard.contract._descriptions import description_meaning_changed

BREAKING, RISKY, SAFE, COSMETIC = (
    ChangeSeverity.BREAKING,
    ChangeSeverity.RISKY,
    ChangeSeverity.SAFE,
    ChangeSeverity.COSMETIC,
)


def schema(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required)}


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, ChangeSeverity, str]]:
    diff = diff_contracts([ToolContract("t", "", old)], [ToolContract("t", "", new)])
    return [(c.field, c.severity, c.description) for c in diff.changes]


INT = {"type": "integer"}
STR = {"type": "string"}


def test_identical_contracts_have_no_change() -> None:
    s = schema({"a": INT}, ("a",))
    diff = diff_contracts([ToolContract("t", "d", s)], [ToolContract("t", "d", s)])
    assert diff.changes == ()
    assert diff.worst is None
    assert not diff.breaking
    assert diff.table() == "No contract changes."


def test_tool_removed_is_breaking_and_tool_added_safe() -> None:
    diff = diff_contracts([ToolContract("old")], [ToolContract("new")])
    assert diff.changes == (
        ContractChange("new", "(tool)", SAFE, "tool added", None, "new"),
        ContractChange("old", "(tool)", BREAKING, "tool removed", "old", None),
    )
    assert diff.worst is BREAKING
    assert diff.breaking


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(
            schema({"a": INT, "b": INT}),
            schema({"a": INT}),
            [("b", BREAKING, "field removed")],
            id="field-removed",
        ),
        pytest.param(
            schema({"a": INT}),
            schema({"a": INT, "b": INT}, ("b",)),
            [("b", BREAKING, "new required field")],
            id="new-required-field",
        ),
        pytest.param(
            schema({"a": INT}),
            schema({"a": INT, "b": INT}),
            [("b", SAFE, "optional field added")],
            id="optional-field-added",
        ),
        pytest.param(
            schema({"a": INT}),
            schema({"a": INT}, ("a",)),
            [("a", BREAKING, "field became required")],
            id="became-required",
        ),
        pytest.param(
            schema({"a": INT}, ("a",)),
            schema({"a": INT}),
            [("a", SAFE, "field became optional")],
            id="became-optional",
        ),
        pytest.param(
            schema({"a": INT}),
            schema({"a": STR}),
            [("a", BREAKING, "type changed")],
            id="type-changed",
        ),
        pytest.param(
            schema({"a": INT}),
            schema({"a": {"anyOf": [INT, {"type": "null"}]}}),
            [("a", RISKY, "type widened")],
            id="type-widened",
        ),
        pytest.param(
            schema({"a": {"enum": ["x", "y"]}}),
            schema({"a": {"enum": ["x"]}}),
            [("a", BREAKING, "enum narrowed (options removed)")],
            id="enum-narrowed",
        ),
        pytest.param(
            schema({"a": {"enum": ["x"]}}),
            schema({"a": {"enum": ["x", "y"]}}),
            [("a", RISKY, "enum widened (options added)")],
            id="enum-widened",
        ),
        pytest.param(
            schema({"a": STR}),
            schema({"a": {**STR, "enum": ["x"]}}),
            [("a", BREAKING, "options restricted to an enum")],
            id="enum-added",
        ),
        pytest.param(
            schema({"a": {**INT, "maximum": 100}}),
            schema({"a": {**INT, "maximum": 50}}),
            [("a", BREAKING, "maximum tightened")],
            id="max-tightened",
        ),
        pytest.param(
            schema({"a": {**INT, "maximum": 50}}),
            schema({"a": {**INT, "maximum": 100}}),
            [("a", RISKY, "maximum loosened")],
            id="max-loosened",
        ),
        pytest.param(
            schema({"a": STR}),
            schema({"a": {**STR, "minLength": 3}}),
            [("a", BREAKING, "minLength tightened")],
            id="min-added",
        ),
        pytest.param(
            schema({"a": {**STR, "minLength": 3}}),
            schema({"a": STR}),
            [("a", RISKY, "minLength loosened")],
            id="min-removed",
        ),
        pytest.param(
            schema({"a": STR}),
            schema({"a": {**STR, "pattern": "^x$"}}),
            [("a", BREAKING, "pattern tightened")],
            id="pattern-added",
        ),
        pytest.param(
            schema({"a": {**INT, "multipleOf": 2}}),
            schema({"a": {**INT, "multipleOf": 4}}),
            [("a", BREAKING, "multipleOf tightened")],
            id="multiple-tightened",
        ),
        pytest.param(
            schema({"a": {**INT, "multipleOf": 4}}),
            schema({"a": {**INT, "multipleOf": 2}}),
            [("a", RISKY, "multipleOf loosened")],
            id="multiple-loosened",
        ),
        pytest.param(
            schema({"a": INT}),
            {**schema({"a": INT}), "additionalProperties": False},
            [("(root)", BREAKING, "unknown fields no longer accepted")],
            id="root-closed",
        ),
        pytest.param(
            schema({"a": {}}),
            schema({"a": INT}),
            [("a", BREAKING, "type changed")],
            id="any-to-integer",
        ),
        pytest.param(
            schema({"a": INT}),
            schema({"a": {"type": "number"}}),
            [("a", RISKY, "type widened")],
            id="integer-to-number",
        ),
        pytest.param(
            schema({"a": {"type": "number"}}),
            schema({"a": INT}),
            [("a", BREAKING, "type changed")],
            id="number-to-integer",
        ),
        pytest.param(
            schema({"a": {"const": 1}}),
            schema({"a": INT}),
            [("a", RISKY, "options no longer restricted")],
            id="const-dropped",
        ),
        pytest.param(
            schema({"a": {**INT, "multipleOf": 2}}),
            schema({"a": {**INT, "multipleOf": 0}}),
            [("a", BREAKING, "multipleOf tightened")],
            id="malformed-multiple",
        ),
        pytest.param(
            schema({"a": {**INT, "minimum": "x"}}),
            schema({"a": {**INT, "minimum": 1}}),
            [("a", BREAKING, "minimum tightened")],
            id="malformed-bound",
        ),
        pytest.param(
            schema({"a": {**INT, "default": 1}}),
            schema({"a": {**INT, "default": 2}}),
            [("a", RISKY, "default changed")],
            id="default-changed",
        ),
        pytest.param(
            schema({"a": {**INT, "description": "Number of rows to return"}}),
            schema({"a": {**INT, "description": "Number of rows to return, at most 50"}}),
            [("a", RISKY, "description changed in meaning")],
            id="description-meaning",
        ),
        pytest.param(
            schema({"a": {**INT, "description": "The number of rows to return"}}),
            schema({"a": {**INT, "description": "Number of rows to return."}}),
            [("a", COSMETIC, "description reworded")],
            id="description-wording",
        ),
    ],
)
def test_classification(
    old: dict[str, Any], new: dict[str, Any], expected: list[tuple[str, ChangeSeverity, str]]
) -> None:
    assert changes(old, new) == expected


def test_before_and_after_values_are_reported() -> None:
    diff = diff_contracts(
        [ToolContract("t", "", schema({"a": {"enum": ["x", "y"], "default": "x"}}))],
        [ToolContract("t", "", schema({"a": {"enum": ["x"], "default": "x"}}))],
    )
    assert diff.changes[0].before == '["x", "y"]'
    assert diff.changes[0].after == '["x"]'


def test_nested_fields_through_refs_optional_and_items() -> None:
    def order(sku: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "$defs": {"Item": schema({"sku": sku}, ("sku",))},
            "properties": {
                "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
                "main": {"anyOf": [{"$ref": "#/$defs/Item"}, {"type": "null"}]},
            },
        }

    assert changes(order(STR), order({**STR, "maxLength": 8})) == [
        ("items[].sku", BREAKING, "maxLength tightened"),
        ("main.sku", BREAKING, "maxLength tightened"),
    ]


def test_removing_an_object_reports_only_the_object() -> None:
    old = schema({"a": schema({"x": INT, "y": INT})})
    assert changes(old, schema({})) == [("a", BREAKING, "field removed")]


def test_recursive_schema_terminates() -> None:
    node = {
        "$defs": {"Node": schema({"child": {"$ref": "#/$defs/Node"}, "v": INT})},
        "$ref": "#/$defs/Node",
    }
    assert changes(node, node) == []


def test_tool_description_change_is_classified() -> None:
    diff = diff_contracts(
        [ToolContract("t", "List invoices.")], [ToolContract("t", "List the invoices")]
    )
    assert [(c.field, c.severity) for c in diff.changes] == [("(tool)", COSMETIC)]


def test_changes_are_ordered_by_tool_then_worst_first() -> None:
    old = [ToolContract("b", "", schema({"x": INT})), ToolContract("a", "", schema({"y": INT}))]
    new = [ToolContract("b", "", schema({"x": STR, "z": INT})), ToolContract("a", "", schema({}))]
    diff = diff_contracts(Lockfile.from_tools(old), new)
    assert [(c.tool, c.severity) for c in diff.changes] == [
        ("a", BREAKING),
        ("b", BREAKING),
        ("b", SAFE),
    ]
    assert diff.counts() == {BREAKING: 2, RISKY: 0, SAFE: 1, COSMETIC: 0}


def test_table_is_readable() -> None:
    diff = diff_contracts(
        [ToolContract("t", "", schema({"a": INT, "b": {**INT, "default": 1}}))],
        [ToolContract("t", "", schema({"b": {**INT, "default": 2}}))],
    )
    lines = diff.table().splitlines()
    assert lines[0].split() == ["SEVERITY", "TOOL", "FIELD", "CHANGE", "BEFORE", "AFTER"]
    assert lines[1].split() == ["BREAKING", "t", "a", "field", "removed", "integer", "-"]
    assert lines[2].split() == ["RISKY", "t", "b", "default", "changed", "1", "2"]
    assert lines[-1] == "2 changes: 1 BREAKING, 1 RISKY"


@pytest.mark.parametrize(
    ("before", "after", "meaning"),
    [
        ("Maximum rows returned.", "The maximum rows returned", False),
        ("Customer email address", "The customer's email address.", False),
        ("Timeout in seconds", "Timeout in milliseconds", True),
        ("Page size, at most 100", "Page size, at most 50", True),
        ("Include archived invoices", "Do not include archived invoices", True),
        ("Invoice id", "Customer id", True),
        ("Optional note", "Required note", True),
        ("Filter by status", "Filters by status", False),
    ],
)
def test_description_meaning_heuristic(before: str, after: str, meaning: bool) -> None:
    assert description_meaning_changed(before, after) is meaning
