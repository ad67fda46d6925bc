"""Atomic decisions: concurrent callers against a burst of one admit exactly one."""

from __future__ import annotations

import anyio
import pytest

from fusion_guard import CallContext, RateLimiter, RateLimits
from fusion_guard.testing import FakeClock

pytestmark = pytest.mark.anyio

CALLERS = 100


async def _race(decide: object) -> list[bool]:
    """Start CALLERS tasks that all wait on one event, release them together, collect."""
    start = anyio.Event()
    outcomes: list[bool] = []

    async def caller() -> None:
        await start.wait()
        outcomes.append(await decide())  # type: ignore[operator]

    async with anyio.create_task_group() as tg:
        for _ in range(CALLERS):
            tg.start_soon(caller)
        await anyio.wait_all_tasks_blocked()
        start.set()
    return outcomes


async def test_a_hundred_concurrent_acquires_against_burst_one_admit_exactly_one() -> None:
    limiter = RateLimiter(1, per=60.0, burst=1, clock=FakeClock())

    async def decide() -> bool:
        return (await limiter.decide("shared")).allowed

    outcomes = await _race(decide)
    assert len(outcomes) == CALLERS
    assert outcomes.count(True) == 1


async def test_a_hundred_concurrent_composed_checks_admit_exactly_one() -> None:
    clock = FakeClock()
    limits = RateLimits(
        [RateLimiter(1, per=60.0, clock=clock), RateLimiter(5, scope="client", clock=clock)]
    )

    async def decide() -> bool:
        return await limits.acheck(CallContext("t", client="c")) is None

    outcomes = await _race(decide)
    assert outcomes.count(True) == 1


async def test_concurrent_callers_with_a_checkpoint_between_calls_keep_the_budget() -> None:
    # Tasks interleave between decisions (a real checkpoint each time): the count still holds.
    clock = FakeClock()
    limiter = RateLimiter(10, burst=7, clock=clock)
    admitted = 0

    async def caller() -> None:
        nonlocal admitted
        for _ in range(5):
            admitted += (await limiter.decide()).allowed
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(caller)
    assert admitted == 7
