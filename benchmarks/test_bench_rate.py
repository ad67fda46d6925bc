"""Rate-limit decisions against the ``limits`` and ``aiolimiter`` libraries, in the same run.

Like for like: the same limit (calls per second, burst = the moving window's size), the same
keys, each operation a full decision that records an admitted call. ``limits`` is a dev-only
dependency of this benchmark.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest
from aiolimiter import AsyncLimiter
from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from bench_support import Figures, async_batch, sync_batch
from fusion_guard import CallContext, RateLimit, RateLimiter

CLIENTS = [f"client-{i}" for i in range(10_000)]
OPS = 10_000
ROUNDS = 12


def _cycling(op: Callable[[str], object]) -> Callable[[], object]:
    """``op`` on the next client key, round-robin (each key sees a call every 10,000 ops)."""
    keys = itertools.cycle(CLIENTS)
    return lambda: op(next(keys))


def test_memory_decision_vs_limits_moving_window(
    benchmark: pytest.FixtureRequest, figures: Figures
) -> None:
    # 100 calls per second per client: every call in the run is admitted by both.
    ours = RateLimiter(100, per=1.0, burst=100, scope="client")
    theirs, item = MovingWindowRateLimiter(MemoryStorage()), RateLimitItemPerSecond(100)
    assert ours.try_acquire("warm-up").allowed
    assert theirs.hit(item, "warm-up")

    candidate, baseline = figures.time_batches(
        sync_batch(_cycling(ours.try_acquire)),
        sync_batch(_cycling(lambda key: theirs.hit(item, key))),
        ops=OPS,
        rounds=ROUNDS,
    )
    figures.faster_by("rate decision (memory) vs limits moving window", candidate, baseline, 10)
    benchmark(_cycling(ours.try_acquire))


def test_guard_path_one_limit_vs_limits_moving_window(
    benchmark: pytest.FixtureRequest, figures: Figures
) -> None:
    # What the Guard calls per call: RateLimiter.check(ctx), key function included.
    limits = RateLimiter(limits=[RateLimit(100, per=1.0, burst=100, scope="client")])
    theirs, item = MovingWindowRateLimiter(MemoryStorage()), RateLimitItemPerSecond(100)
    contexts = [CallContext("billing.pay", client=client) for client in CLIENTS]

    candidate, baseline = figures.time_batches(
        sync_batch(_cycling_contexts(contexts, limits.check)),
        sync_batch(_cycling_contexts(contexts, lambda ctx: theirs.hit(item, ctx.client or ""))),
        ops=OPS,
        rounds=ROUNDS,
    )
    figures.faster_by("RateLimiter.check, 1 limit vs limits moving window", candidate, baseline, 10)
    benchmark(_cycling_contexts(contexts, limits.check))


def test_composed_decision_vs_limits_moving_window(
    benchmark: pytest.FixtureRequest, figures: Figures
) -> None:
    # A server-wide limit plus one per client; ``limits`` composes by hitting both (not atomic).
    limits = RateLimiter(
        limits=[RateLimit(10**7, burst=10**7), RateLimit(100, burst=100, scope="client")]
    )
    theirs = MovingWindowRateLimiter(MemoryStorage())
    server, per_client = RateLimitItemPerSecond(10**7), RateLimitItemPerSecond(100)
    contexts = [CallContext("billing.pay", client=client) for client in CLIENTS]

    def both(ctx: CallContext) -> bool:
        return theirs.hit(server, "server") and theirs.hit(per_client, ctx.client or "")

    candidate, baseline = figures.time_batches(
        sync_batch(_cycling_contexts(contexts, limits.check)),
        sync_batch(_cycling_contexts(contexts, both)),
        ops=OPS // 2,
        rounds=ROUNDS,
    )
    figures.faster_by("2 composed limits (memory) vs limits, 2 hits", candidate, baseline, 5)
    benchmark(_cycling_contexts(contexts, limits.check))


def _cycling_contexts(
    contexts: list[CallContext], op: Callable[[CallContext], object]
) -> Callable[[], object]:
    it = itertools.cycle(contexts)
    return lambda: op(next(it))


def test_refusal_vs_limits_moving_window(
    benchmark: pytest.FixtureRequest, figures: Figures
) -> None:
    ours = RateLimiter(1, per=3600.0)
    theirs, item = MovingWindowRateLimiter(MemoryStorage()), RateLimitItemPerSecond(1)
    assert ours.try_acquire().allowed
    assert theirs.hit(item, "")

    candidate, baseline = figures.time_batches(
        sync_batch(ours.try_acquire),
        sync_batch(lambda: theirs.hit(item, "")),
        ops=OPS,
        rounds=ROUNDS,
    )
    assert not ours.try_acquire().allowed
    figures.faster_by("rate refusal (memory) vs limits moving window", candidate, baseline, 2)
    benchmark(ours.try_acquire)


class _PerLoop:
    """One limiter per event loop (aiolimiter warns when a limiter crosses loops, and each
    ``async_batch`` runs its own loop); both sides pay the same look-up."""

    def __init__(self, make: Callable[[], RateLimiter | AsyncLimiter]) -> None:
        self._make = make
        self._loop: asyncio.AbstractEventLoop | None = None
        self._limiter = make()

    def acquire(self) -> Awaitable[object]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._limiter = loop, self._make()
        return self._limiter.acquire()


def test_async_acquire_vs_aiolimiter(benchmark: pytest.FixtureRequest, figures: Figures) -> None:
    # Both wait for an opening when the budget is spent; here one bucket has room for the whole
    # run in both (aiolimiter has no keys), so neither waits: the cost of the decision.
    ours = _PerLoop(lambda: RateLimiter(10**9, per=1.0, burst=10**9))
    theirs = _PerLoop(lambda: AsyncLimiter(max_rate=10**9, time_period=1.0))

    candidate, baseline = figures.time_batches(
        async_batch(ours.acquire), async_batch(theirs.acquire), ops=OPS, rounds=ROUNDS
    )
    figures.faster_by("rate acquire (async, memory) vs aiolimiter", candidate, baseline, 1)
    benchmark(async_batch(ours.acquire), 1000)


def test_the_baselines_really_decide() -> None:
    """Sanity: the baselines refuse past their limits, so the figures compare real limiters."""
    theirs, item = MovingWindowRateLimiter(MemoryStorage()), RateLimitItemPerSecond(2)
    assert [theirs.hit(item, "k") for _ in range(3)] == [True, True, False]
    limiter = AsyncLimiter(max_rate=1, time_period=3600)

    async def run() -> bool:
        await limiter.acquire()
        return limiter.has_capacity()

    assert asyncio.run(run()) is False
