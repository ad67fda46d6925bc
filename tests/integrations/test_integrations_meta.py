"""Every envelope answer carries its facts as JSON in the result's ``_meta`` (one key), through
both SDKs' real clients, equal to what the text says."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from integrations_support import Harness, envelope, texts

from fusion_guard import FusionClientError, Guard, raise_for_tool_error
from fusion_guard.wire._meta import META_KEY
from holding_gate import Gate

pytestmark = pytest.mark.anyio


def _facts(result: Any) -> dict[str, Any]:
    meta = result.meta or {}
    assert META_KEY in meta, meta
    facts = meta[META_KEY]
    assert isinstance(facts, dict)
    return facts


def _agrees(result: Any) -> dict[str, Any]:
    """The facts in ``_meta``, checked against the envelope in the text."""
    facts = _facts(result)
    parsed = envelope(result)
    assert facts["code"] == parsed.code
    assert facts["severity"] == parsed.severity
    assert facts["message"] == parsed.message
    assert facts.get("retry_after") == parsed.retry_after
    assert facts.get("details", {}) == parsed.details
    assert facts.get("available_actions", []) == parsed.available_actions
    return facts


async def test_refusals_and_failures_carry_their_facts(harness: Harness) -> None:
    guard = Guard(
        metrics=False,
        tools={"slow": {"max_active": 1, "max_queue": 0}, "fast": {"rate": 1, "rate_per": 60}},
    )
    gate = Gate()
    async with harness.connect(gate, guard) as client:
        ok = await client.call("fast")
        limited = await client.call("fast")
        crashed = await client.call("boom")
        conflict = await client.call("conflict")
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call, "slow")
            await gate.wait_inside(1)
            busy = await client.call("slow")
            gate.release.set()
    assert texts(ok) == "fast done"
    assert META_KEY not in (ok.meta or {})  # a plain success carries nothing of ours
    rate = _agrees(limited)
    assert rate["code"] == "RATE_LIMITED"
    assert isinstance(rate["retry_after"], float)
    assert rate["retry_after"] > 0
    assert _agrees(crashed)["code"] == "INTERNAL_ERROR"
    assert _agrees(conflict)["code"] == "CONFLICT"
    shed = _agrees(busy)
    assert shed["code"] == "SERVER_BUSY"
    assert shed["details"]["max_active"] == "1"
    assert isinstance(shed["retry_after"], float)
    with pytest.raises(FusionClientError) as raised:  # the client side reads the same facts
        raise_for_tool_error(busy)
    assert (raised.value.code, raised.value.retry_after) == ("SERVER_BUSY", shed["retry_after"])


async def test_validation_errors_carry_their_facts(validating: Harness) -> None:
    async with validating.connect(Gate(), Guard(metrics=False)) as client:
        result = await client.call("add", {"a": "one", "b": 2})
    facts = _agrees(result)
    assert facts["code"] == "VALIDATION_ERROR"
    assert "a" in facts["details"]
