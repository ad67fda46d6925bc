"""The overload detector: a burst at moderate load is not overload, a sustained excess is."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusion_guard.admission._overload import OverloadDetector

CAPACITY = 100.0
OPENING = 0.01  # two slots held 20 ms each: a slot opens every 10 ms, 100 calls per second


def _feed(detector: OverloadDetector, rate: float, start: float, seconds: float, step: float,
          count: int) -> tuple[float, int]:  # fmt: skip
    """Arrivals at ``rate`` per second, observed every ``step`` seconds."""
    t, steps = start, round(seconds / step)
    for i in range(1, steps + 1):
        t = start + i * step
        detector.observe(t, count + round(rate * i * step), OPENING)
    return t, count + round(rate * steps * step)


def test_steady_load_under_capacity_is_not_overload() -> None:
    detector = OverloadDetector(0.0)
    _feed(detector, 80.0, 0.0, 10.0, 0.01, 0)
    assert not detector.overloaded()
    assert detector.arrival_rate == pytest.approx(80.0, rel=0.01)


@pytest.mark.parametrize(("load", "within"), [(1.5, 1.5), (2.0, 0.5), (4.0, 0.2), (10.0, 0.1)])
def test_sustained_overload_is_seen_quickly(load: float, within: float) -> None:
    detector = OverloadDetector(0.0)
    t, count = _feed(detector, 50.0, 0.0, 5.0, 0.01, 0)
    assert not detector.overloaded()
    _feed(detector, load * CAPACITY, t, within, 0.01, count)
    assert detector.overloaded()


def test_a_streak_of_slow_calls_at_moderate_load_is_not_overload() -> None:
    detector = OverloadDetector(0.0)
    t, count = _feed(detector, 80.0, 0.0, 5.0, 0.01, 0)
    # The guard's mean hold jumps to 30 ms (capacity 67/s) for a quarter of a second.
    for i in range(1, 26):
        detector.observe(t + i * 0.01, count + round(80.0 * i * 0.01), 0.015)
    assert not detector.overloaded()


def test_no_measurable_hold_is_never_overload() -> None:
    detector = OverloadDetector(0.0)
    for i in range(1, 100):
        detector.observe(i * 0.01, i * 50, 0.0)
    assert not detector.overloaded()


def test_a_short_burst_at_moderate_load_is_not_overload() -> None:
    detector = OverloadDetector(0.0)
    t, count = _feed(detector, 80.0, 0.0, 5.0, 0.01, 0)
    # Ten extra calls at once, as a Poisson burst brings: the queue grows, the load does not.
    detector.observe(t + 0.01, count + 11, OPENING)
    assert not detector.overloaded()


@given(steps=st.lists(st.floats(0.001, 0.5), min_size=1, max_size=60), seed=st.integers(0, 99))
def test_rates_do_not_depend_on_how_often_it_looks(steps: list[float], seed: int) -> None:
    """Arrivals at a constant rate give that rate, whether observed often or rarely."""
    rng = random.Random(seed)
    rate = rng.uniform(10.0, 500.0)
    detector = OverloadDetector(0.0)
    t = 0.0
    for step in steps:
        t += step
        detector.observe(t, int(rate * t), OPENING)
    # Warm from zero: after t seconds the slow average has reached 1 - exp(-t) of the rate.
    expected = rate * (1.0 - pow(2.718281828459045, -t))
    assert detector.arrival_rate == pytest.approx(expected, rel=0.05, abs=rate * 0.02 + 2.0)
