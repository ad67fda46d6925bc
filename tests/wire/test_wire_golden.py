"""Every vector of the contract's golden file, byte for byte, through every way to build it."""

from __future__ import annotations

from typing import Any

import pytest
from wire_vectors import load_vectors, xml_safe

from fusion_guard import ErrorBuilder, error, parse_tool_error, tool_error

VECTORS = load_vectors()


def _ids() -> list[str]:
    return [v["name"] for v in VECTORS]


def _via_builder(params: dict[str, Any]) -> ErrorBuilder:
    b = error(params["code"], params["message"])
    if "suggestion" in params:
        b.suggest(params["suggestion"])
    b.actions(*params.get("available_actions", ()))
    if "details" in params:
        b.details(params["details"])  # a mapping: golden keys are not all identifiers
    if "retry_after" in params:
        b.retry_after(params["retry_after"])
    if "severity" in params:
        b.severity(params["severity"])
    return b


def test_golden_file_is_the_contract_copy() -> None:
    assert len(VECTORS) == 22
    assert VECTORS[0]["name"] == "seed example, every section"


@pytest.mark.parametrize("vector", VECTORS, ids=_ids())
def test_tool_error_reproduces_vector(vector: dict[str, Any]) -> None:
    response = tool_error(**vector["input"])
    assert response.text == vector["text"]
    assert response.is_error is vector["isError"]
    assert response.to_dict() == {
        "content": [{"type": "text", "text": vector["text"]}],
        "isError": vector["isError"],
    }


@pytest.mark.parametrize("vector", VECTORS, ids=_ids())
def test_builder_reproduces_vector(vector: dict[str, Any]) -> None:
    builder = _via_builder(vector["input"])
    assert builder.text == vector["text"]
    assert builder.is_error is vector["isError"]
    built = builder.build()
    assert (built.text, built.is_error) == (vector["text"], vector["isError"])
    assert type(built) is not ErrorBuilder


@pytest.mark.parametrize("vector", VECTORS, ids=_ids())
def test_vector_parses_back(vector: dict[str, Any]) -> None:
    params = vector["input"]
    parsed = parse_tool_error(vector["text"])
    assert parsed is not None
    assert parsed.code == params["code"]
    assert parsed.message == xml_safe(params["message"])
    assert parsed.severity == params.get("severity", "error")
    assert parsed.available_actions == params.get("available_actions", [])
    assert parsed.recovery == (params.get("suggestion") or None)
    assert list(parsed.details) == list(params.get("details", {}))
