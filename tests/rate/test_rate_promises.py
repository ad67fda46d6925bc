"""Staggered RATE_LIMITED promises: callers refused while a budget is exhausted are told its
successive openings, one emission interval apart, without spending budget; the promises lapse
when nobody comes back, and callers who come back at their promise are admitted in turn."""

from __future__ import annotations

import heapq
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_guard import CallContext, MemoryBackend, RateLimiter, RateLimits
from fusion_guard.testing import FakeClock

limit_params = st.tuples(
    st.integers(min_value=1, max_value=20),
    st.sampled_from([1.0, 2.0, 0.5, 3.0]),
    st.integers(min_value=1, max_value=6),
)
gaps_ms = st.lists(st.integers(min_value=0, max_value=400), min_size=1, max_size=120)


def _as(limiter: RateLimiter, caller: int, tool: str = "t") -> float:
    """One call by a known caller (its client key): 0.0 when admitted, else its retry_after."""
    refusal = limiter.check(CallContext(tool, client=f"caller-{caller}"))
    return 0.0 if refusal is None else refusal.retry_after or 0.0


@settings(max_examples=300, deadline=None)
@given(limit_params, gaps_ms)
def test_between_admissions_each_new_caller_is_promised_one_interval_later(
    params: tuple[int, float, int], gaps: list[int]
) -> None:
    rate, per, burst = params
    clock = FakeClock()
    limiter = RateLimiter(rate, per=per, burst=burst, clock=clock)
    previous: float | None = None  # the opening promised by the last refusal, since an admission
    for caller, gap in enumerate(gaps):
        clock.advance(gap / 1000)
        wait = _as(limiter, caller)
        if not wait:
            previous = None
            continue
        promised = clock.now + wait
        if previous is not None:
            assert promised == pytest.approx(previous + limiter.limit.emission_interval, abs=1e-6)
        previous = promised


def test_the_first_refusal_is_told_the_budgets_own_opening() -> None:
    clock = FakeClock()
    limiter = RateLimiter(5, burst=5, clock=clock)
    assert all(limiter.try_acquire().allowed for _ in range(5))
    clock.advance(0.05)
    waits = [limiter.try_acquire().retry_after for _ in range(3)]
    assert waits == pytest.approx([0.15, 0.35, 0.55])


@settings(max_examples=200, deadline=None)
@given(limit_params, st.integers(min_value=1, max_value=50))
def test_promises_lapse_when_nobody_comes_back(
    params: tuple[int, float, int], refusals: int
) -> None:
    rate, per, burst = params
    clock = FakeClock()
    limiter = RateLimiter(rate, per=per, burst=burst, clock=clock)
    for _ in range(burst):
        assert limiter.try_acquire().allowed
    last = max(limiter.try_acquire().retry_after for _ in range(refusals))
    # Every promised opening comes and goes unused, and the budget refills.
    clock.advance(last + burst * limiter.limit.emission_interval)
    for _ in range(burst):
        assert limiter.try_acquire().allowed
    # A fresh exhaustion: the budget's own next opening again, not one after the old promises.
    assert limiter.try_acquire().retry_after == pytest.approx(limiter.limit.emission_interval)


@settings(max_examples=200, deadline=None)
@given(
    limit_params,
    st.integers(min_value=1, max_value=60),
    st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=60, max_size=60),
)
def test_a_crowd_coming_back_at_its_promises_is_admitted_in_turn(
    params: tuple[int, float, int], crowd: int, lateness: list[float]
) -> None:
    """``crowd`` known callers at once; each refused one comes back at its promise, late by any
    fraction of the tolerance (a burst's slack absorbs that much jitter): every first retry is
    admitted, and the last call runs at the ideal time, its promise."""
    rate, per, burst = params
    clock = FakeClock()
    limiter = RateLimiter(rate, per=per, burst=burst, clock=clock)
    returns: list[tuple[float, int]] = []
    for caller in range(crowd):
        wait = _as(limiter, caller)
        if wait:
            late = lateness[caller] * limiter.limit.tolerance
            heapq.heappush(returns, (wait + late, caller))
    while returns:
        at, caller = heapq.heappop(returns)
        clock.now = at
        assert _as(limiter, caller) == 0.0
    ideal = max(0, crowd - burst) * limiter.limit.emission_interval
    assert clock.now <= ideal + limiter.limit.tolerance + 1e-9


def test_composed_limits_advise_the_latest_opening_and_advance_each_refusing_cursor() -> None:
    clock = FakeClock()
    backend = MemoryBackend(clock)
    server = RateLimiter(2, burst=1, backend=backend, name="server")  # every 0.5 s
    tool = RateLimiter(1, per=2.0, burst=1, scope="tool", backend=backend)  # every 2 s
    limits = RateLimits([server, tool])
    assert limits.check(CallContext("a", client="x")) is None

    both = limits.check(CallContext("a", client="x"))  # both refuse: server at 0.5, tool at 2
    assert both is not None
    assert (both.scope, both.retry_after) == ("tool", pytest.approx(2.0))
    # Each refusing limit's next promise is one of its intervals past the promised 2 s: the
    # server's openings before it stay free for other tools' callers.
    tool_only = limits.check(CallContext("a", client="y"))
    assert tool_only is not None
    assert tool_only.retry_after == pytest.approx(4.0)
    other_tool = limits.check(CallContext("b", client="z"))
    assert other_tool is not None
    assert (other_tool.scope, other_tool.retry_after) == ("global", pytest.approx(4.5))

    clock.advance(2.0)  # the first caller comes back at its promise, and is admitted
    assert limits.check(CallContext("a", client="x")) is None


def test_an_admission_that_does_not_refuse_leaves_the_promises() -> None:
    clock = FakeClock()
    limiter = RateLimiter(1, burst=2, scope="client", clock=clock)
    assert limiter.try_acquire("a").allowed
    assert limiter.try_acquire("a").allowed
    assert limiter.try_acquire("a").retry_after == pytest.approx(1.0)
    assert limiter.try_acquire("b").allowed  # another key: its own budget and cursor
    clock.advance(1.0)
    assert limiter.try_acquire("a").allowed  # the promised caller
    assert limiter.try_acquire("a").retry_after == pytest.approx(1.0)


@pytest.mark.anyio
async def test_acquire_staggers_like_try_acquire() -> None:
    clock = FakeClock()
    limiter = RateLimiter(10, burst=1, clock=clock)
    decisions = [await limiter.decide() for _ in range(4)]
    # Anonymous: at most `burst` (1) opening past the budget's own (0.1 s).
    assert [d.retry_after for d in decisions] == pytest.approx([0.0, 0.1, 0.2, 0.2])


def test_exact_fractions_keep_the_promises_on_the_interval_grid() -> None:
    """A long run of refusals accumulates no float drift beyond the admission slack."""
    clock = FakeClock()
    limiter = RateLimiter(3, burst=1, clock=clock)
    limiter.try_acquire()
    waits = [_as(limiter, caller) for caller in range(3000)]
    exact = [Fraction(k, 3) for k in range(1, 3001)]
    assert max(abs(Fraction(w) - e) for w, e in zip(waits, exact, strict=True)) < 1e-9
