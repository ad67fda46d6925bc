"""RATE_LIMITED advice nobody can poison, on Redis (decided in the Lua script, on the server's
clock): a known caller holds one promise, anonymous promises stay within the anonymous bound,
and a stored arrival time from before a backward clock step is clamped. Real time: the figures
are checked within the round trips of a busy machine."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_guard import CallContext, RateLimited, RateLimiter, RedisRateLimitBackend
from fusion_guard.backends import key_digest
from redis_testserver import RedisServer

pytestmark = pytest.mark.anyio

TOOL = "search"


@contextlib.asynccontextmanager
async def _backend(redis_url: str, prefix: str) -> AsyncIterator[RedisRateLimitBackend]:
    """A backend of its own (keys under ``prefix``), closed after the block."""
    backend = RedisRateLimitBackend(redis_url, timeout=1.0, prefix=prefix)
    try:
        yield backend
    finally:
        await backend.aclose()


async def _call(limiter: RateLimiter, client: str | None) -> float:
    """One call of the tool: 0.0 when admitted, else the retry_after it was told."""
    refusal = await limiter.acheck(CallContext(TOOL, client=client))
    return 0.0 if refusal is None else refusal.retry_after or 0.0


# Judged against the real clock of a Redis server (a stall of 0.1 s, one interval, lets a
# promise lapse): run alone, with no neighbour worker to stall it.
@pytest.mark.alone
@pytest.mark.parametrize("gap", [0.0, 0.001, 0.02])  # as fast as Redis answers, 1 kHz, 50/s
@pytest.mark.parametrize("honest", ["honest", None])
async def test_a_known_poller_leaves_an_honest_callers_advice_true(
    redis_url: str, gap: float, honest: str | None
) -> None:
    async with _backend(redis_url, f"poll{gap}{honest}") as backend:
        limiter = RateLimiter(10, burst=5, scope="tool", backend=backend)
        refused = anyio.Event()
        polls = 0

        async def poll() -> None:
            nonlocal polls
            while True:
                if await _call(limiter, "poller"):
                    refused.set()
                polls += 1
                await anyio.sleep(gap)

        async with anyio.create_task_group() as group:
            group.start_soon(poll)
            await anyio.sleep(0.6)  # the poller alone for 0.6 s ...
            await refused.wait()  # ... and at least until the budget is spent, promises taken
            asked = anyio.current_time()
            wait = await _call(limiter, honest)
            assert wait <= 1.0
            if wait:  # else served at once: an opening was free
                before = polls
                await anyio.sleep(wait)  # the poller goes on meanwhile ...
                assert polls > before  # ... truly: the opening was kept against it
                admitted = await _call(limiter, honest) == 0.0
                # A promise lapses an interval (0.1 s) after its opening: a caller back within
                # that is admitted; one a loaded machine kept longer may find it gone.
                late = anyio.current_time() - asked - wait
                assert admitted or late >= 0.1, late
            group.cancel_scope.cancel()


@pytest.mark.alone  # a stall of one interval (0.1 s) before the last decision frees an opening
async def test_a_limiter_polled_5000_times_tells_the_next_caller_under_a_second(
    redis_url: str,
) -> None:
    async with _backend(redis_url, "polled") as backend:
        limiter = RateLimiter(10, burst=5, backend=backend)
        for _ in range(5000):  # the issue: 497.8 s of advice after this, fleet-wide
            await limiter.decide()
        assert 0.0 < (await limiter.decide()).retry_after <= 0.6 + 0.02
        refusal = await limiter.acheck(CallContext(TOOL, client="next"))
        assert isinstance(refusal, RateLimited)
        assert 0.0 < (refusal.retry_after or 0.0) <= 0.7 + 0.02


async def test_a_known_callers_repeat_refusal_is_told_its_own_promise(redis_url: str) -> None:
    async with _backend(redis_url, "repeat") as backend:
        limiter = RateLimiter(1, per=10.0, burst=1, scope="tool", backend=backend)  # every 10 s
        start = anyio.current_time()
        assert await _call(limiter, "a") == 0.0
        first = await _call(limiter, "a")
        again = [await _call(limiter, "a") for _ in range(20)]
        b = await _call(limiter, "b")
        # Told less the time the calls took (the server's clock goes on while a loaded machine
        # keeps this process waiting), a millisecond for the scripts' rounding.
        taken = anyio.current_time() - start + 0.001
        assert 10.0 - taken <= first <= 10.0
        assert max(again) <= first  # the same opening, never a later one
        assert 20.0 - taken <= b <= 20.0  # the opening after a's


@pytest.mark.parametrize("client", [None, "known"])
async def test_a_stored_time_from_before_a_clock_step_back_is_clamped(
    redis_url: str, redis_server: RedisServer, client: str | None
) -> None:
    """Redis's TIME cannot be stepped here, so a budget's TAT, its promise cursor and a known
    caller's promise are written 60 s ahead of it, as a step back of 60 s leaves them: a caller
    at half the limit's rate is admitted but for its first call (told one interval), instead of
    refused for the whole 60 s. Redis's own clock: real time, so five calls, a second."""
    async with _backend(redis_url, "stepped") as backend:
        limiter = RateLimiter(10, burst=2, scope="tool", name="stepped", backend=backend)
        tat_key = backend.connection.key("rate", key_digest(f"stepped:{TOOL}"))
        with redis_server.client() as client_:
            seconds, micros = client_.time()
            ahead = (seconds + 60) * 1_000_000 + micros
            client_.set(tat_key, str(ahead))
            client_.set(tat_key + ":p", f"{ahead + 100_000} {ahead + 100_000}")
            if client is not None:
                ident = key_digest("\x00".join([client, f"stepped:{TOOL}"]))
                client_.set(f"{tat_key}:c:{ident}", f"{ahead} 1")
        admitted = 0
        for _ in range(5):  # refused for the stepped 60 s, every one of these would be
            wait = await _call(limiter, client)
            admitted += wait == 0.0
            assert wait <= 0.1 + 0.02
            await anyio.sleep(0.2)  # half the rate
        assert admitted >= 4
        with redis_server.client() as client_:
            assert client_.pttl(tat_key) <= 300  # the clamped time, not the stepped one


async def test_known_callers_promises_expire_with_their_time(
    redis_url: str, redis_server: RedisServer
) -> None:
    async with _backend(redis_url, "expiring") as backend:
        limiter = RateLimiter(4, burst=1, scope="tool", backend=backend)  # every 0.25 s
        assert await _call(limiter, "a" * 100_000) == 0.0
        wait = await _call(limiter, "b" * 100_000)
        with redis_server.client() as client:
            (promise,) = [key for key in client.keys("*") if b":c:" in key]
            assert len(promise) < 100  # a digest, never the key
            assert 0 < client.pttl(promise) <= round(wait * 1000) + 1
            await anyio.sleep(wait + 0.26)
            assert client.keys("*") == []


async def test_a_known_caller_back_early_is_refused_even_when_the_budget_has_room(
    redis_url: str,
) -> None:
    # The advice is judged within the time the calls took (the server's clock moves on while
    # this process waits for its turn on a loaded machine), and openings half a second apart
    # leave a stall of up to a quarter second room before b comes back "early" too late.
    async with _backend(redis_url, "early") as backend:
        limiter = RateLimiter(2, burst=2, scope="tool", backend=backend)  # an opening per 0.5 s
        spent = anyio.current_time()
        assert await _call(limiter, "x") == await _call(limiter, "y") == 0.0
        a = await _call(limiter, "a")  # the budget's next opening ...
        b = await _call(limiter, "b")  # ... and the one after
        told = anyio.current_time()
        taken = told - spent
        assert 0.5 - taken <= a <= 0.5
        assert 1.0 - taken <= b <= 1.0
        assert 0.5 - taken <= b - a <= 0.5
        # a's opening has passed (it came by ``told + a``), b's is 0.5 s after it: b is early.
        await anyio.sleep_until(told + a + 0.25)
        assert 0.0 < await _call(limiter, "b") <= 0.25
        assert await _call(limiter, "a") == 0.0


_prefixes = itertools.count()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.integers(min_value=5, max_value=50),
    st.integers(min_value=1, max_value=6),
    st.lists(st.tuples(st.booleans(), st.sampled_from([None, None, "a", "b"])), max_size=60),
)
def test_promises_never_exceed_the_bound_whatever_the_refusals(
    redis_url: str, rate: int, burst: int, calls: list[tuple[bool, str | None]]
) -> None:
    """The memory backend's property on the Lua script, on the server's clock: anonymous
    callers are told at most ``burst + 1`` intervals, and with k known callers among them
    nobody more than ``1 + (k + 1)(burst + 2)``; a pause between calls is one round trip or a
    few milliseconds."""

    async def run() -> None:
        async with _backend(redis_url, f"prop{next(_prefixes)}") as backend:
            limiter = RateLimiter(rate, burst=burst, scope="tool", backend=backend)
            interval = limiter.limit.emission_interval
            known: set[str] = set()
            for pause, client in calls:
                if pause:
                    await asyncio.sleep(0.003)
                if client is not None:
                    known.add(client)
                wait = await _call(limiter, client)
                openings = (1 + (len(known) + 1) * (burst + 2)) if known else burst + 1
                assert wait <= openings * interval + 0.002  # a round trip's rounding

    asyncio.run(run())
