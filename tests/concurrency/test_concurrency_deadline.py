"""The handler deadline (admission/_deadline.py): one timer per deadline length on asyncio,
an anyio CancelScope on trio. Checked directly, under both backends where both apply."""

from __future__ import annotations

import asyncio
import contextlib

import anyio
import pytest

from fusion_guard.admission import _deadline
from fusion_guard.admission._deadline import COMPACT_SLACK, Deadline
from virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

# Virtual time: on the real clock a loaded machine that stalls past 50 ms between a 1 ms body
# and its 50 ms deadline wakes with both timers due, and the deadline cuts the short body too.
anyio_backend = virtual_time_backends()


async def _run_under(limit: float, body_seconds: float) -> tuple[bool, bool]:
    """(expired, cancelled): whether the deadline cut a body of ``body_seconds`` short."""
    deadline = Deadline(limit)
    try:
        await anyio.sleep(body_seconds)
    except anyio.get_cancelled_exc_class() as exc:
        return deadline.expired(type(exc), exc, exc.__traceback__), True
    return deadline.expired(None), False


async def test_a_body_past_its_deadline_is_cancelled_and_told_apart() -> None:
    assert await _run_under(0.01, 5) == (True, True)


async def test_a_body_within_its_deadline_is_left_alone() -> None:
    assert await _run_under(5, 0) == (False, False)


async def test_many_deadlines_of_one_length_each_fire_for_their_own_body() -> None:
    fired: dict[int, bool] = {}

    async def call(index: int, body_seconds: float) -> None:
        fired[index] = (await _run_under(0.05, body_seconds))[0]

    async with anyio.create_task_group() as tg:
        for index in range(20):
            tg.start_soon(call, index, 5 if index % 2 else 0.001)
    assert fired == {index: bool(index % 2) for index in range(20)}


async def test_an_outer_cancellation_is_not_mistaken_for_the_deadline() -> None:
    outcome: list[bool] = []
    with anyio.CancelScope() as outer:

        async def body() -> None:
            deadline = Deadline(60)
            try:
                outer.cancel()
                await anyio.sleep(5)
            except anyio.get_cancelled_exc_class() as exc:
                outcome.append(deadline.expired(type(exc), exc, exc.__traceback__))
                raise

        await body()
    assert outcome == [False]
    assert outer.cancelled_caught


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_deadline_and_an_outer_cancel_together_leave_the_outer_one_standing() -> None:
    task = asyncio.current_task()
    assert task is not None
    deadline = Deadline(0.001)
    asyncio.get_running_loop().call_at(deadline.at, task.cancel)  # someone else, same moment
    with pytest.raises(asyncio.CancelledError) as raised:
        await asyncio.sleep(5)
    assert deadline.expired(raised.type, raised.value, None) is False
    assert task.uncancel() == 0  # the outer request is still counted, ours is undone


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_body_that_swallows_the_deadline_keeps_its_task_uncancelled() -> None:
    task = asyncio.current_task()
    assert task is not None
    deadline = Deadline(0.001)
    with contextlib.suppress(asyncio.CancelledError):  # a body that carries on
        await asyncio.sleep(5)
    assert deadline.expired(None) is False  # it ended by returning: that stands
    assert task.cancelling() == 0
    await asyncio.sleep(0)  # and no cancellation is left pending for the task


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_finished_deadlines_behind_a_long_call_do_not_pile_up() -> None:
    long_call = Deadline(30)
    queue = _deadline._queue(asyncio.get_running_loop(), 30)
    for _ in range(10_000):
        Deadline(30).expired(None)
        assert len(queue) <= 2 * 1 + COMPACT_SLACK + 1
    long_call.expired(None)
    assert len(queue) == 0


def test_each_event_loop_gets_its_own_timer() -> None:
    async def main() -> tuple[bool, bool]:
        return await _run_under(0.01, 5)

    assert asyncio.run(main()) == (True, True)
    assert asyncio.run(main()) == (True, True)  # the queue of the closed loop is not reused


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_per_call_lengths_beyond_the_cache_still_fire() -> None:
    results = []
    for index in range(_deadline.MAX_QUEUES + 5):
        results.append(await _run_under(0.001 + index * 1e-6, 5))
    assert results == [(True, True)] * (_deadline.MAX_QUEUES + 5)
