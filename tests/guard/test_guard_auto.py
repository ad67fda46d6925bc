"""Guard(max_active="auto") end to end on asyncio and trio: calls through a tool with a hidden
pool of 2 workers; every call is answered once, nothing leaks, the limit stays in its bounds and
learns the tool's uncrowded latency."""

from __future__ import annotations

import anyio
import pytest
from prometheus_client import CollectorRegistry

from fusion_guard import ErrorCode, Guard
from virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

# Virtual time, the guard on the loop's clock: the pool's calls take 2 ms exactly, so what the
# limit learns and how many calls are served repeat exactly (on the real clock a loaded
# machine's lag read as latency, and the count served followed the machine's load).
anyio_backend = virtual_time_backends()


async def test_an_automatic_limit_answers_every_call_and_leaks_nothing() -> None:
    registry = CollectorRegistry()
    guard = Guard(
        max_active="auto", registry=registry, auto_max_active=16, clock=anyio.current_time
    )
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
    # Nearly all served (194 on asyncio, 200 on trio): on the real clock a loaded machine's lag
    # read as latency the limit backed off from (57 of 200 at a load of 12 on two cores).
    assert answers.count(None) >= 190
    assert (slots.active, slots.queued) == (0, 0)
    assert 1 <= slots.limit <= 16
    assert limit.baseline == pytest.approx(0.002)  # learnt from the calls that ran uncrowded
    # The gauge follows the limit in force.
    shown = registry.get_sample_value("fusion_guard_concurrency_limit", {"tool": "t"})
    assert shown == slots.limit
