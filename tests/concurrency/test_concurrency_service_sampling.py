"""The service time's sample (``admission/_service_time.py``): of the calls of a fixed limit that
found the guard empty, one in ``SAMPLE_EVERY`` is measured once ``SAMPLED_FROM`` holds are; every
other call is measured, observers hear every call's exact hold, and the advice the mean gives is
what it was when every hold was measured."""

from __future__ import annotations

import anyio
import pytest

from fusion_guard import ConcurrencyGuard, GradientLimit, ServerBusy
from fusion_guard.admission._service_time import SAMPLE_EVERY, SAMPLED_FROM
from fusion_guard.testing import FakeClock, ToolRecorder

pytestmark = pytest.mark.anyio


async def alone(guard: ConcurrencyGuard, clock: FakeClock, seconds: float, calls: int) -> None:
    """``calls`` calls one after the other, each alone in ``guard``, each ``seconds`` long."""
    for _ in range(calls):
        async with guard.slot():
            clock.advance(seconds)


async def retry_afters(guard: ConcurrencyGuard, count: int) -> list[float]:
    out: list[float] = []
    for n in range(count):
        with pytest.raises(ServerBusy) as info:
            await guard.acquire(f"caller-{n}")
        assert info.value.retry_after is not None
        out.append(info.value.retry_after)
    return out


async def test_calls_alone_in_the_guard_are_sampled_once_the_mean_has_settled(
    clock: FakeClock,
) -> None:
    guard = ConcurrencyGuard(1, clock=clock)
    await alone(guard, clock, 0.25, SAMPLED_FROM)
    assert guard.statistics().service_samples == SAMPLED_FROM  # every one while it is young
    await alone(guard, clock, 0.25, 3 * SAMPLE_EVERY)
    stats = guard.statistics()
    assert stats.service_samples == SAMPLED_FROM + 3
    assert stats.mean_service_time == pytest.approx(0.25)


async def test_the_advice_of_a_sampled_mean_is_the_advice_of_every_hold(clock: FakeClock) -> None:
    # Two slots, holds of 0.4 s: one slot frees every 0.2 s, however many holds were measured.
    sampled = ConcurrencyGuard(2, max_queue=0, clock=clock)
    measured = ConcurrencyGuard(2, max_queue=0, clock=clock)
    await alone(sampled, clock, 0.4, SAMPLED_FROM + 10 * SAMPLE_EVERY)
    await alone(measured, clock, 0.4, SAMPLED_FROM)
    assert sampled.statistics().service_samples < SAMPLED_FROM + 10 * SAMPLE_EVERY
    for guard in (sampled, measured):
        held = [guard.acquire_nowait(), guard.acquire_nowait()]
        assert await retry_afters(guard, 4) == pytest.approx([0.2, 0.4, 0.6, 0.8])
        for slot in held:
            slot.release()


async def test_predictive_shedding_of_a_sampled_mean_is_unchanged(clock: FakeClock) -> None:
    # Holds of 1 s, a queue timeout of 0.5 s: the call queued behind a fresh hold is shed at once.
    for calls in (1, SAMPLED_FROM + 10 * SAMPLE_EVERY):
        guard = ConcurrencyGuard(1, max_queue=10, queue_timeout=0.5, clock=clock)
        await alone(guard, clock, 1.0, calls)
        held = guard.acquire_nowait()
        with pytest.raises(ServerBusy) as info:
            await guard.acquire()
        assert info.value.retry_after == pytest.approx(1.0)
        assert guard.statistics().shed_predicted == 1
        held.release()


async def test_calls_that_waited_or_found_others_in_the_guard_are_all_measured(
    clock: FakeClock,
) -> None:
    queued = 2 * SAMPLE_EVERY
    guard = ConcurrencyGuard(
        1, max_queue=queued, queue_timeout=30, standing_limit=queued, clock=clock
    )
    await alone(guard, clock, 0.1, SAMPLED_FROM)

    async def caller() -> None:
        async with guard.slot() as slot:
            assert slot.queue_wait > 0.0
            clock.advance(0.1)

    holder = guard.acquire_nowait()  # alone, the first after SAMPLED_FROM: not measured
    async with anyio.create_task_group() as tg:
        for _ in range(queued):
            tg.start_soon(caller)
        await anyio.wait_all_tasks_blocked()
        clock.advance(0.1)
        holder.release()
    assert guard.statistics().service_samples == SAMPLED_FROM + queued

    two = ConcurrencyGuard(2, clock=clock)
    await alone(two, clock, 0.1, SAMPLED_FROM)
    first = two.acquire_nowait()  # alone: not measured
    for _ in range(queued):  # each beside the first: measured
        beside = two.acquire_nowait()
        clock.advance(0.1)
        beside.release()
    first.release()
    assert two.statistics().service_samples == SAMPLED_FROM + queued


async def test_an_adaptive_limit_measures_every_hold(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(limit=GradientLimit(), clock=clock)
    calls = SAMPLED_FROM + 4 * SAMPLE_EVERY
    await alone(guard, clock, 0.01, calls)
    assert guard.statistics().service_samples == calls


async def test_observers_hear_every_hold_sampled_or_not(clock: FakeClock) -> None:
    recorder = ToolRecorder()
    guard = ConcurrencyGuard(1, observer=recorder, clock=clock)
    calls = SAMPLED_FROM + 2 * SAMPLE_EVERY
    await alone(guard, clock, 0.25, calls)
    ends = [event for event in recorder.events if event[0] == "finished"]
    assert ends == [("finished", "ok", pytest.approx(0.25))] * calls
    # The observer changes nothing of the sample: a guard without one samples the same calls.
    assert guard.statistics().service_samples == SAMPLED_FROM + 2


async def test_a_hold_that_never_reached_the_tool_leaves_the_next_one_measured(
    clock: FakeClock,
) -> None:
    # The countdown is the estimator's (``skips``): a hold due to be measured that tells nothing
    # of the tool (its arguments failed validation) is not measured, and the next one is.
    guard = ConcurrencyGuard(1, clock=clock)
    await alone(guard, clock, 0.1, SAMPLED_FROM)  # the last one measured starts the countdown
    await alone(guard, clock, 0.1, SAMPLE_EVERY - 1)  # ... which these use up
    slot = guard.slot()
    async with slot:
        slot.invalid_arguments()
        clock.advance(0.1)
    assert guard.statistics().service_samples == SAMPLED_FROM
    await alone(guard, clock, 0.1, 1)
    assert guard.statistics().service_samples == SAMPLED_FROM + 1
