"""Arguments that fail the SDK's validation never reached the tool: under ``max_active="auto"``
the adaptive limit learns nothing from them (their hold of a few microseconds would read as a
tool that answers at once, and the limit would swing). Through both validating SDKs' real
clients, asyncio and trio."""

from __future__ import annotations

import math

import pytest
from integrations_support import Harness, envelope

from fusion_guard import GradientLimit, Guard
from fusion_guard.admission._adaptive_tuning import FIRST_SAMPLES
from holding_gate import Gate

pytestmark = pytest.mark.anyio


def _adaptive(guard: Guard, tool: str) -> GradientLimit:
    slots = guard.concurrency(tool)
    assert slots is not None
    limit = slots.adaptive_limit
    assert isinstance(limit, GradientLimit)
    return limit


async def test_validation_failures_leave_the_adaptive_limit_where_it_was(
    validating: Harness,
) -> None:
    guard = Guard(max_active="auto", metrics=False)
    async with validating.connect(Gate(), guard) as client:
        for _ in range(2 * FIRST_SAMPLES):  # enough to measure a baseline, were they fed
            assert envelope(await client.call("add", {"a": "three", "b": 4})).code == (
                "VALIDATION_ERROR"
            )
        limit = _adaptive(guard, "add")
        assert math.isnan(limit.baseline)  # not one of them taught the uncrowded latency
        assert limit.limit == 4  # the initial limit, untouched
        # A call with good arguments is learnt from as before: the tool ran it.
        assert not (await client.call("add", {"a": 3, "b": 4})).is_error
        slots = guard.concurrency("add")
        assert slots is not None
        assert (slots.active, slots.statistics().admitted) == (0, 2 * FIRST_SAMPLES + 1)
