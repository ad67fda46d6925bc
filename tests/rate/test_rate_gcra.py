"""One limit, timed exactly with a fake clock: bursts, refusals, retry_after, sustained rate."""

from __future__ import annotations

import math

import anyio
import pytest

from fusion_guard import (
    CallContext,
    ConfigurationError,
    MemoryBackend,
    RateDecision,
    RateLimit,
    RateLimiter,
)
from fusion_guard.backends import RateBackend
from fusion_guard.testing import FakeClock
from virtual_time import virtual_time_backends

anyio_backend = virtual_time_backends()


def test_burst_admitted_then_refused_with_exact_retry_after() -> None:
    clock = FakeClock(100.0)
    limiter = RateLimiter(10, per=1.0, burst=5, clock=clock)

    assert [limiter.try_acquire().allowed for _ in range(5)] == [True] * 5
    refused = limiter.try_acquire()

    assert not refused.allowed
    assert refused.retry_after == pytest.approx(0.1, abs=1e-9)


def test_admitted_again_exactly_when_retry_after_has_passed() -> None:
    clock = FakeClock()
    limiter = RateLimiter(3, per=2.0, burst=2, clock=clock)  # one call every 2/3 s
    limiter.try_acquire()
    limiter.try_acquire()
    clock.advance(0.25)

    wait = limiter.try_acquire().retry_after
    assert wait == pytest.approx(2 / 3 - 0.25, abs=1e-9)
    clock.advance(wait * (1 - 1e-6))
    assert not limiter.try_acquire().allowed  # a moment early: still refused
    clock.now = 0.25 + wait
    assert limiter.try_acquire() == RateDecision(True, 0.0)
    assert not limiter.try_acquire().allowed  # and that one call spent the opening


def test_refusals_spend_no_budget_and_are_told_successive_openings() -> None:
    clock = FakeClock()
    limiter = RateLimiter(1, per=1.0, burst=1, clock=clock)
    limiter.try_acquire()
    refusals = [limiter.check(CallContext("t", client=f"c{k}")) for k in range(100)]
    waits = [refusal.retry_after for refusal in refusals if refusal is not None]
    assert waits == pytest.approx([float(k) for k in range(1, 101)])  # one opening per caller
    clock.advance(1.0)
    assert limiter.try_acquire().allowed  # the budget's next opening was not spent


def test_retry_after_shrinks_as_time_passes() -> None:
    clock = FakeClock()
    limiter = RateLimiter(2, per=1.0, burst=1, clock=clock)
    limiter.try_acquire()
    clock.advance(0.2)
    assert limiter.try_acquire().retry_after == pytest.approx(0.3, abs=1e-9)


@pytest.mark.parametrize(("rate", "per", "burst"), [(10, 1.0, 1), (10, 1.0, 5), (7, 3.0, 4)])
def test_sustained_rate_matches_the_configuration(rate: int, per: float, burst: int) -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate, per=per, burst=burst, clock=clock)
    duration, step = 60.0, 0.001
    admitted = 0
    for _ in range(round(duration / step)):
        admitted += limiter.try_acquire().allowed
        clock.advance(step)
    expected = burst + rate * duration / per
    assert abs(admitted - expected) <= 1


def test_callers_who_follow_the_advice_are_all_admitted() -> None:
    clock = FakeClock()
    limiter = RateLimiter(5, per=1.0, burst=1, clock=clock)
    for _ in range(50):
        decision = limiter.try_acquire()
        if not decision.allowed:
            clock.advance(decision.retry_after)
            assert limiter.try_acquire().allowed
    assert clock.now == pytest.approx(49 * 0.2, abs=1e-6)


def test_keys_have_separate_budgets() -> None:
    limiter = RateLimiter(1, burst=1, scope="client", clock=FakeClock())
    assert limiter.try_acquire("alice").allowed
    assert limiter.try_acquire("bob").allowed
    assert not limiter.try_acquire("alice").allowed


def test_limiters_sharing_a_backend_keep_separate_budgets() -> None:
    backend = MemoryBackend(FakeClock())
    first = RateLimiter(1, backend=backend, name="first")
    second = RateLimiter(1, backend=backend, name="second")
    assert first.try_acquire("k").allowed
    assert second.try_acquire("k").allowed
    assert not first.try_acquire("k").allowed


@pytest.mark.anyio
async def test_acquire_decides_like_try_acquire() -> None:
    clock = FakeClock()
    limiter = RateLimiter(4, burst=2, clock=clock)
    results = [await limiter.decide("k") for _ in range(3)]
    assert [d.allowed for d in results] == [True, True, False]
    assert results[2].retry_after == pytest.approx(0.25)


def test_properties_and_repr() -> None:
    limit = RateLimit(10, per=2.0, burst=3, scope="tool")
    assert limit.emission_interval == pytest.approx(0.2)
    assert limit.tolerance == pytest.approx(0.4)
    assert limit.description == "10 calls per 2 seconds"
    assert limit.name == "tool/10/2/3"
    assert repr(limit) == "RateLimit(rate=10, per=2, burst=3, scope='tool', name='tool/10/2/3')"
    limiter = RateLimiter(10, per=2.0, burst=3, scope="tool")
    assert repr(limiter.limit) == repr(limit)
    assert repr(limiter).startswith(f"RateLimiter(limits=[{limit!r}], backend=")


def test_a_limiter_of_several_limits_names_them_and_has_no_single_limit() -> None:
    limits = (RateLimit(10), RateLimit(1, scope="client"))
    limiter = RateLimiter(limits=limits)
    assert limiter.limits == limits
    with pytest.raises(ValueError, match="enforces 2 limits"):
        _ = limiter.limit


def test_a_rate_and_limits_together_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="not both"):
        RateLimiter(10, limits=[RateLimit(1)])
    with pytest.raises(ConfigurationError, match="expected RateLimit instances"):
        RateLimiter(limits=[RateLimiter(1)])  # type: ignore[list-item]


@pytest.mark.anyio
async def test_acquire_waits_for_the_opening_promised() -> None:
    # On the event loop's clock, in virtual time: the waits are the openings', exactly.
    limiter = RateLimiter(20, burst=1, clock=anyio.current_time)  # one call per 50 ms
    await limiter.acquire("k")  # the burst: at once
    started = anyio.current_time()
    await limiter.acquire("k")
    await limiter.acquire("k")
    assert anyio.current_time() - started == pytest.approx(0.1, abs=1e-9)  # two openings
    assert not (await limiter.decide("k")).allowed  # each wait recorded its call


BAD_NUMBERS = [0, -1, -0.5, math.nan, math.inf, -math.inf, True, False, "10", None, [1]]


@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_bad_rate_is_a_configuration_error(value: object) -> None:
    with pytest.raises(
        ConfigurationError, match=r"rate=.* is invalid: expected a finite number > 0"
    ):
        RateLimiter(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_bad_per_is_a_configuration_error(value: object) -> None:
    with pytest.raises(
        ConfigurationError, match=r"per=.* is invalid: expected a finite number > 0"
    ):
        RateLimiter(1, per=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -3, 1.5, 2.0, math.nan, math.inf, True, "2", None])
def test_bad_burst_is_a_configuration_error(value: object) -> None:
    with pytest.raises(ConfigurationError, match=r"burst=.* is invalid: expected an integer >= 1"):
        RateLimiter(1, burst=value)  # type: ignore[arg-type]


def test_error_names_the_value() -> None:
    with pytest.raises(ConfigurationError) as info:
        RateLimiter(-2.5)
    assert "rate=-2.5" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("scope", ["", None, 3, "tenant"])
def test_bad_scope_is_a_configuration_error(scope: object) -> None:
    with pytest.raises(ConfigurationError, match="scope="):
        RateLimiter(1, scope=scope)  # type: ignore[arg-type]


def test_custom_scope_with_a_key_function() -> None:
    limiter = RateLimiter(1, scope="tenant", key=lambda ctx: ctx.client or "", clock=FakeClock())
    assert limiter.limit.scope == "tenant"
    assert limiter.limit.name == "tenant/1/1/1"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"key": "not callable"}, "key="),
        ({"name": "has space"}, "name="),
        ({"name": "a:b"}, "name="),
        ({"name": ""}, "name="),
        ({"clock": 5}, "clock="),
        ({"backend": object()}, "backend="),
        ({"backend": MemoryBackend(), "clock": FakeClock()}, "clock="),
    ],
)
def test_other_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        RateLimiter(1, **kwargs)  # type: ignore[arg-type]


def test_try_acquire_on_an_async_backend_says_what_to_use(
    async_only_backend: RateBackend,
) -> None:
    limiter = RateLimiter(1, backend=async_only_backend)
    with pytest.raises(ConfigurationError, match="await decide"):
        limiter.try_acquire()


@pytest.mark.anyio
async def test_acquire_works_with_an_async_only_backend(async_only_backend: RateBackend) -> None:
    limiter = RateLimiter(1, backend=async_only_backend)
    assert (await limiter.decide()).allowed
    refused = await limiter.decide()
    assert not refused.allowed
    assert refused.retry_after == pytest.approx(1.0)


def test_a_limit_is_read_only() -> None:
    limit = RateLimit(10)
    with pytest.raises(AttributeError, match="read-only"):
        limit.rate = 20  # type: ignore[misc]
    assert limit.emission_interval == pytest.approx(0.1)


def test_default_names_keep_the_exact_figures() -> None:
    assert RateLimit(1234567).name != RateLimit(1234568).name
    assert (
        RateLimit(0.5, per=0.25, burst=2, scope="my scope", key=str).name == "my_scope/0.5/0.25/2"
    )
