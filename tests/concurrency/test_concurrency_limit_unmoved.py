"""A sample that moved nothing: ``Limit.on_sample`` may return False, and the limiter then reads
neither ``limit`` nor ``parallelism`` until a sample says otherwise.

Under an adaptive limit every finished call is a sample, and most move nothing (GradientLimit
moves once a window), so this is what keeps the uncontended slot under ``max_active="auto"``
cheap. It is only as right as the limit's word: ``GradientLimit`` must never say False after a
sample that moved either figure, which random streams of samples check here.
"""

from __future__ import annotations

import math
from random import Random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_guard import ConcurrencyGuard, GradientLimit
from fusion_guard.testing import FakeClock


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0.01, 0.1]), st.sampled_from([1, 20]))
def test_gradient_limit_says_unmoved_only_when_nothing_moved(
    seed: int, window: float, window_samples: int
) -> None:
    """Streams long enough to close windows, probe and drop: a tool whose latency jumps by a
    random factor every 500 calls, a crowd around the limit, a few overtakings and drops, and
    now and then a sample no clock gives."""
    random = Random(seed)
    limit = GradientLimit(window=window, window_samples=window_samples, probe_every=1.0)
    now, scale = 1000.0, 0.01
    moves = 0
    for call in range(3000):
        if call % 500 == 0:
            scale = random.choice([0.001, 0.01, 0.1])
        now += random.expovariate(200.0)
        duration = random.lognormvariate(math.log(scale), 0.5)
        if random.random() < 0.002:
            duration = random.choice([math.nan, math.inf, -1.0])
        inflight = random.randint(1, limit.limit + 2)
        overtook = random.randint(1, 4) if random.random() < 0.05 else 0
        before = (limit.limit, limit.parallelism)
        moved = limit.on_sample(now, duration, inflight, random.random() < 0.005, overtook=overtook)
        assert isinstance(moved, bool)
        if not moved:
            assert (limit.limit, limit.parallelism) == before
        moves += (limit.limit, limit.parallelism) != before
    assert moves  # the stream moved it: the assertions above were put to the test


class ToldLimit:
    """A limit whose figures the test sets, and whose samples say what the test tells them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.says: bool | None = None
        self.fails = False

    def on_sample(self, start: float, duration: float, inflight: int, dropped: bool) -> bool | None:
        if self.fails:
            raise RuntimeError("a bug in the limit")
        return self.says


def _one_call(guard: ConcurrencyGuard, clock: FakeClock) -> None:
    slot = guard.acquire_nowait()
    clock.advance(0.01)
    slot.release()


@pytest.mark.parametrize("first", [None, True])
def test_a_limit_that_says_unmoved_is_not_read_again_until_it_says_otherwise(
    first: bool | None, clock: FakeClock
) -> None:
    told = ToldLimit(2)
    guard = ConcurrencyGuard(limit=told, clock=clock)
    told.says = first
    _one_call(guard, clock)  # read after it: it said nothing, or that it moved
    told.limit, told.says = 5, False
    _one_call(guard, clock)
    assert guard.limit == 2  # its word taken: not read
    told.says = None
    _one_call(guard, clock)
    assert guard.limit == 5


def test_a_limit_that_failed_is_read_after_its_next_sample_whatever_it_says(
    clock: FakeClock,
) -> None:
    told = ToldLimit(2)
    guard = ConcurrencyGuard(limit=told, clock=clock)
    _one_call(guard, clock)
    told.fails = True
    _one_call(guard, clock)  # its state is not known: what it says next is not taken as read
    told.limit, told.says, told.fails = 3, False, False
    _one_call(guard, clock)
    assert guard.limit == 3
