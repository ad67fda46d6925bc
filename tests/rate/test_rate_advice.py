"""RATE_LIMITED advice nobody can poison: a known caller (a client key) holds one promise at a
time, told again when it comes back early and refused with it even when the budget has room;
anonymous refusals never run the promises more than ``burst`` openings past the budget's own
next opening and the known callers' (the anonymous bound), however many there are."""

from __future__ import annotations

import tracemalloc

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_guard import CallContext, Guard, RateLimited, RateLimiter
from fusion_guard.testing import FakeClock
from virtual_time import virtual_time_backends

TOOL = "search"


def _call(limiter: RateLimiter, client: str | None) -> float:
    """One call of the tool: 0.0 when admitted, else the retry_after it was told."""
    refusal = limiter.check(CallContext(TOOL, client=client))
    return 0.0 if refusal is None else refusal.retry_after or 0.0


def _poll(limiter: RateLimiter, clock: FakeClock, poller: str | None, gap: float, until: float):
    """The poller calls every ``gap`` seconds up to ``until`` (exclusive)."""
    while clock.now + gap < until:
        clock.advance(gap)
        _call(limiter, poller)


@pytest.mark.parametrize("gap", [0.0001, 0.001, 0.013, 0.05])  # 10,000 down to 20 calls/s
@pytest.mark.parametrize("honest", ["honest", None])
def test_a_known_poller_leaves_an_honest_callers_advice_true(
    gap: float, honest: str | None
) -> None:
    """A client polling a tool-wide 10/s limit (burst 5) at any rate, for a second and on: an
    honest caller, with a client key or none, is told at most a second and is admitted on its
    first retry, though the poller calls again at that very instant, just before it."""
    clock = FakeClock()
    limiter = RateLimiter(10, burst=5, scope="tool", clock=clock)
    _poll(limiter, clock, "poller", gap, 1.0)
    wait = _call(limiter, honest)
    assert 0.0 < wait <= 1.0
    back = clock.now + wait
    _poll(limiter, clock, "poller", gap, back)
    clock.now = back
    _call(limiter, "poller")  # first, at the instant promised to the honest caller
    assert _call(limiter, honest) == 0.0


@pytest.mark.parametrize("gap", [0.0001, 0.001, 0.013])
@pytest.mark.parametrize("honest", ["honest", None])
def test_an_anonymous_poller_cannot_push_the_advice_past_the_bound(
    gap: float, honest: str | None
) -> None:
    """Anonymous polling (nothing tells it from a crowd) takes a promise per refusal, but never
    one more than ``burst`` openings past the budget's own: the next caller is told at most
    (burst + 1) intervals (a known one: one more), and once the poller stops it is admitted
    when told. (While an anonymous poller goes on, it may take the opening first: nothing tells
    it from the caller the opening was promised to.)"""
    clock = FakeClock()
    limiter = RateLimiter(10, burst=5, scope="tool", clock=clock)
    _poll(limiter, clock, None, gap, 1.0)
    wait = _call(limiter, honest)
    # Anonymous: within the bound; known: the opening after it, at most.
    openings = 6 if honest is None else 7
    assert 0.0 < wait <= openings * limiter.limit.emission_interval + 1e-9
    clock.advance(wait)
    assert _call(limiter, honest) == 0.0


def test_a_limiter_polled_5000_times_tells_the_next_caller_under_a_second() -> None:
    clock = FakeClock()
    limiter = RateLimiter(10, burst=5, clock=clock)
    for _ in range(5000):  # 4 ms of polling, in the issue: 500 s of advice
        clock.advance(0.0000008)
        limiter.try_acquire()
    assert 0.0 < limiter.try_acquire().retry_after <= 1.0
    refusal = limiter.check(CallContext(TOOL, client="next"))
    assert refusal is not None
    assert 0.0 < (refusal.retry_after or 0.0) <= 1.0


def test_a_known_caller_is_told_its_own_promise_again_and_takes_no_other() -> None:
    clock = FakeClock()
    limiter = RateLimiter(10, burst=1, scope="tool", clock=clock)
    assert _call(limiter, "a") == 0.0
    first = _call(limiter, "a")
    assert first == pytest.approx(0.1)
    clock.advance(0.03)
    assert _call(limiter, "a") == pytest.approx(first - 0.03)  # the same opening, no new one
    assert _call(limiter, "b") == pytest.approx(0.17)  # the next opening is still free
    clock.advance(0.07)
    assert _call(limiter, "b") == pytest.approx(0.1)  # back before its promise: not served
    assert _call(limiter, "a") == 0.0  # at its promise


def test_a_known_caller_back_early_is_refused_even_when_the_budget_has_room() -> None:
    clock = FakeClock()
    limiter = RateLimiter(10, burst=2, scope="tool", clock=clock)
    assert _call(limiter, "x") == _call(limiter, "y") == 0.0
    assert _call(limiter, "a") == pytest.approx(0.1)  # the budget's next opening
    assert _call(limiter, "b") == pytest.approx(0.2)  # the one after
    clock.now = 0.15  # one opening is there, a's: b, early, does not take it
    assert _call(limiter, "b") == pytest.approx(0.05)
    assert _call(limiter, "a") == 0.0  # a, a little late, finds it


rates = st.integers(min_value=1, max_value=20)
bursts = st.integers(min_value=1, max_value=6)
gaps = st.integers(min_value=0, max_value=200)  # in 0.1 ms


@settings(max_examples=300, deadline=None)
@given(rates, bursts, st.lists(gaps, min_size=1, max_size=200))
def test_anonymous_promises_never_exceed_the_bound_whatever_the_refusals(
    rate: int, burst: int, calls: list[int]
) -> None:
    """Whatever the sequence of anonymous calls, nobody is told more than ``burst + 1``
    intervals: the budget's own next opening (at most one away) and ``burst`` more."""
    clock = FakeClock()
    limiter = RateLimiter(rate, burst=burst, scope="tool", clock=clock)
    for gap in calls:
        clock.advance(gap / 10_000)
        assert _call(limiter, None) <= (burst + 1) * limiter.limit.emission_interval + 1e-9


@settings(max_examples=300, deadline=None)
@given(
    rates,
    bursts,
    st.lists(st.tuples(gaps, st.sampled_from([None, None, "a", "b", "c"])), max_size=200),
)
def test_promises_never_exceed_the_bound_whatever_the_callers(
    rate: int, burst: int, calls: list[tuple[int, str | None]]
) -> None:
    """With k known callers among anonymous ones, nobody is told more than
    ``1 + (k + 1)(burst + 2)`` intervals: each known caller's one promise waits behind at most
    the anonymous bound, however often anyone polls."""
    clock = FakeClock()
    limiter = RateLimiter(rate, burst=burst, scope="tool", clock=clock)
    interval = limiter.limit.emission_interval
    known: set[str] = set()
    for gap, client in calls:
        clock.advance(gap / 10_000)
        if client is not None:
            known.add(client)
        wait = _call(limiter, client)
        assert wait <= (1 + (len(known) + 1) * (burst + 2)) * interval + 1e-9


def test_known_callers_promises_are_kept_in_bounded_memory_without_their_keys() -> None:
    clock = FakeClock()
    limiter = RateLimiter(10, burst=1, scope="tool", clock=clock)
    _call(limiter, None)
    tracemalloc.start()
    try:
        for n in range(50):  # 50 callers with 1 MB keys, each refused (its promise kept)
            assert _call(limiter, str(n) * 500_000) > 0.0
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept < 100_000  # a hash and a time per caller, never the key
    clock.advance(10.0)  # every promise has passed: a new key's arrival clears them all
    assert limiter.check(CallContext("another tool")) is None
    assert len(limiter.backend) == 1  # type: ignore[arg-type]


POLL_GAP = 0.0001
"""Seconds between a poller's calls through the Guard (10,000 a second)."""

anyio_backend = virtual_time_backends()


async def _guarded(guard: Guard, client: str | None) -> float:
    """One call through the Guard: 0.0 when admitted, else the retry_after of its envelope."""
    try:
        async with guard.admit(TOOL, client=client):
            return 0.0
    except RateLimited as limited:
        return limited.retry_after or 0.0


@pytest.mark.anyio
@pytest.mark.parametrize("poller", ["poller", None])
async def test_a_guard_polled_in_process_tells_the_next_caller_under_a_second(
    poller: str | None,
) -> None:
    """The issue's ``Guard(rate=10, burst=5)``, polled in a loop (one second of it advised 4.8
    hours): the honest caller is told under a second and, while a known poller goes on, is
    admitted when it comes back as told. In virtual time: the poller calls 10,000 times a
    second, more than a real loop does on a loaded machine, and the advice is judged exactly."""
    guard = Guard(
        max_active=None, timeout=None, rate=10, burst=5, metrics=False, clock=anyio.current_time
    )
    stop = anyio.Event()
    refused = anyio.Event()

    async def poll() -> None:
        while not stop.is_set():
            if await _guarded(guard, poller):
                refused.set()
            await anyio.sleep(POLL_GAP)  # virtual time passes only while every task waits

    async with anyio.create_task_group() as group:
        group.start_soon(poll)
        await anyio.sleep(0.3)  # the poller alone for 0.3 s ...
        await refused.wait()  # ... and at least until the budget is spent
        if poller is None:
            stop.set()  # an anonymous poller is told apart from nobody: it stops here
        wait = await _guarded(guard, "honest")
        assert 0.0 < wait <= 0.7  # the poller spent every opening: the honest caller waits
        await anyio.sleep(wait)
        assert await _guarded(guard, "honest") == 0.0
        stop.set()
