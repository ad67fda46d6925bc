"""Guard(max_active="auto") end to end on asyncio and trio: calls through a tool with a hidden
pool of 2 workers; every call is answered once, nothing leaks, the limit stays in its bounds and
learns the tool's uncrowded latency."""

from __future__ import annotations

import anyio
import pytest
from prometheus_client import CollectorRegistry

from fusion_guard import ErrorCode, Guard

pytestmark = pytest.mark.anyio


async def test_an_automatic_limit_answers_every_call_and_leaks_nothing() -> None:
    registry = CollectorRegistry()
    guard = Guard(max_active="auto", registry=registry, auto_max_active=16)
    workers = anyio.CapacityLimiter(2)
    answers: list[str | None] = []

    async def tool() -> str:
        async with workers:
            await anyio.sleep(0.002)
        return "ok"

    async def caller() -> None:
        for _ in range(10):
            response = await guard.call("t", tool)
            answers.append(response.code)

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(caller)

    slots = guard.concurrency("t")
    assert slots is not None
    limit = slots.adaptive_limit
    assert limit is not None
    assert len(answers) == 200
    assert set(answers) <= {None, ErrorCode.SERVER_BUSY}  # served, or shed with advice
    # Served, most of them on a quiet machine; on a loaded one the event loop's lag reads as
    # latency the limit backs off from (57 of 200 at a load of 12 on two cores): a fifth.
    assert answers.count(None) >= 40
    assert (slots.active, slots.queued) == (0, 0)
    assert 1 <= slots.limit <= 16
    assert limit.baseline >= 0.002  # learnt from the calls that ran uncrowded
    # The gauge follows the limit in force.
    shown = registry.get_sample_value("fusion_guard_concurrency_limit", {"tool": "t"})
    assert shown == slots.limit
