"""retry_after for fail-closed refusals grows with the outage and is jittered (no Redis needed)."""

from __future__ import annotations

import pytest

from fusion_guard.backends._redis import Outage
from fusion_guard.testing import FakeClock


def test_advice_grows_with_the_outage_and_resets_after_a_gap() -> None:
    clock = FakeClock(100.0)
    outage = Outage(min_retry_after=1.0, max_retry_after=30.0, gap=5.0, clock=clock)
    assert 0.8 <= outage.retry_after() <= 1.2  # a fresh outage: the minimum
    for _ in range(12):  # failing for 12 s, a failure every second
        clock.now += 1.0
        outage.retry_after()
    assert 12 * 0.8 <= outage.retry_after() <= 12 * 1.2
    clock.now += 1000.0
    for _ in range(40):
        clock.now += 1.0
        assert outage.retry_after() <= 30.0 * 1.2  # capped
    clock.now += 6.0  # quiet for longer than the gap: the next failure starts a new outage
    assert 0.8 <= outage.retry_after() <= 1.2


def test_refused_callers_are_spread_out() -> None:
    outage = Outage(min_retry_after=1.0, clock=FakeClock(100.0))
    advice = {outage.retry_after() for _ in range(50)}
    assert len(advice) > 40
    assert min(advice) == pytest.approx(0.8, abs=0.1)
    assert max(advice) == pytest.approx(1.2, abs=0.1)
