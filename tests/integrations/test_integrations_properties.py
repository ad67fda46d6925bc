"""Property: whatever the burst and the limits, through every SDK adapter, exactly the calls that
fit (slots, then queue places) run and every other call is answered SERVER_BUSY with a retry
time; once released, every admitted call succeeds and every slot is free again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from integrations_support import Harness, texts

from fusion_guard import Guard, parse_tool_error
from holding_gate import Gate

pytestmark = pytest.mark.anyio


async def settle(condition: Callable[[], bool]) -> None:
    """Wait (without sleeping) until ``condition`` holds once every task is blocked."""
    with anyio.fail_after(10):
        while not condition():
            await anyio.wait_all_tasks_blocked()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # the harness is stateless
)
@given(
    calls=st.integers(min_value=1, max_value=6),
    max_active=st.integers(min_value=1, max_value=3),
    max_queue=st.integers(min_value=0, max_value=2),
)
async def test_a_burst_runs_what_fits_and_sheds_the_rest(
    harness: Harness, calls: int, max_active: int, max_queue: int
) -> None:
    gate = Gate()
    guard = Guard(max_active=max_active, max_queue=max_queue, queue_timeout="off")
    results: list[Any] = []
    async with harness.connect(gate, guard) as client:

        async def one_call() -> None:
            results.append(await client.call("slow"))

        running = min(calls, max_active)
        fits = min(calls, max_active + max_queue)
        async with anyio.create_task_group() as tg:
            for _ in range(calls):
                tg.start_soon(one_call)
            slots = guard.concurrency("slow")
            await settle(lambda: slots is not None and gate.inside == running)
            await settle(lambda: len(results) == calls - fits)
            assert slots is not None
            assert slots.queued == fits - running
            gate.release.set()
        assert slots.active == 0
    refused = [r for r in results if r.is_error]
    assert len(refused) == calls - fits
    for result in refused:
        busy = parse_tool_error(texts(result))
        assert busy is not None
        assert busy.code == "SERVER_BUSY"
        assert busy.retry_after is not None
        assert busy.retry_after > 0
    assert sorted(texts(r) for r in results if not r.is_error) == ["slow done"] * fits
