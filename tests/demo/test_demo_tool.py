"""The simulated tool's workers hold their slot for the drawn time, however late the event
loop wakes them (``PunctualSleep``). Run in trio's virtual time, where an event loop that wakes
late is made by hand: deterministic."""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable

import pytest
import trio
from trio.testing import MockClock

from fusion_guard.demo._tool import PunctualSleep

LATE_S = 0.001


async def _late_sleep_until(deadline: float) -> None:
    """An event loop that wakes every sleeper 1 ms late."""
    await trio.sleep_until(deadline + LATE_S)


async def _held(sleep: PunctualSleep, seconds: float) -> float:
    begun = trio.current_time()
    await sleep(seconds)
    return trio.current_time() - begun


def _run_virtual(fn: Callable[[], Awaitable[list[float]]]) -> list[float]:
    return trio.run(fn, clock=MockClock(autojump_threshold=0))


def test_a_late_event_loop_is_made_up_for_after_a_few_sleeps() -> None:
    async def main() -> list[float]:
        sleep = PunctualSleep(sleep_until=_late_sleep_until)
        return [await _held(sleep, 0.020) - 0.020 for _ in range(200)]

    errors = _run_virtual(main)
    # The first sleep, nothing learned yet, is as late as the loop.
    assert errors[0] == pytest.approx(LATE_S, abs=1e-12)
    assert abs(statistics.fmean(errors[100:])) < 0.01 * LATE_S


def test_a_sleep_shorter_than_the_lateness_returns_at_once() -> None:
    async def main() -> list[float]:
        sleep = PunctualSleep(sleep_until=_late_sleep_until)
        for _ in range(200):
            await _held(sleep, 0.020)
        return [await _held(sleep, LATE_S / 4)]

    assert _run_virtual(main) == [0.0]


def test_on_time_event_loop_sleeps_are_the_plain_ones() -> None:
    async def main() -> list[float]:
        sleep = PunctualSleep()
        return [await _held(sleep, seconds) for seconds in (0.020, 0.003, 0.2)]

    assert _run_virtual(main) == pytest.approx([0.020, 0.003, 0.2], abs=1e-12)
