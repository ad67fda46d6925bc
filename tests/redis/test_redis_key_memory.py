"""Client keys are bounded at the guard's door: 300 distinct 1 MB keys leave < 10 MiB once the
tool is idle, on both backends.

Before, the Redis backend cached every raw key for its digest (cleared only at 4,096 entries:
300 keys of 1 MB kept 300 MiB), fair queueing remembered up to 10,000 whole keys served from
the queue, and the memory backend kept each key with its budget.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import pytest

from fusion_guard import Guard, RateLimiter, RedisRateLimitBackend, Rejected
from fusion_guard._keys import MAX_KEY_CHARS, bounded_key

pytestmark = pytest.mark.anyio

KEYS = 300
KEY_BYTES = 2**20
AT_ONCE = 10  # keys in flight together, so that calls queue and are served in turn
KEPT_AT_MOST = 10 * 2**20


def _keys(start: int) -> Iterator[str]:
    """``AT_ONCE`` distinct keys of 1 MB each (made one batch at a time: the test's own
    copies are gone before memory is measured)."""
    for index in range(start, start + AT_ONCE):
        yield f"{index:06d}" + "k" * (KEY_BYTES - 6)


async def _call(guard: Guard, key: str) -> None:
    try:
        async with guard.admit("search", client=key):
            await anyio.lowlevel.checkpoint()
    except Rejected:  # a refusal keeps the key as much as an admission would
        pass


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_distinct_huge_keys_leave_little_once_idle(
    request: pytest.FixtureRequest, backend: str
) -> None:
    limits: dict[str, object] = {}
    if backend == "redis":
        limits = {"backend": "redis", "redis_url": request.getfixturevalue("redis_url")}
    guard = Guard(
        metrics=False,
        max_active=2,
        max_queue=AT_ONCE,
        rate=50,
        rate_scope="client",
        redis_timeout=1.0,
        **limits,  # type: ignore[arg-type]
    )
    await _call(guard, "warm-up")  # the gate, the connection, the scripts: made before measuring
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for start in range(0, KEYS, AT_ONCE):
            async with anyio.create_task_group() as tasks:
                for key in _keys(start):
                    tasks.start_soon(_call, guard, key)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    slots = guard.concurrency("search")
    assert slots is not None
    assert slots.statistics().admitted > KEYS / 2  # the calls ran (queued and served in turn)
    assert kept < KEPT_AT_MOST, f"{kept / 2**20:.1f} MiB kept"


def test_a_long_key_becomes_a_fixed_size_digest() -> None:
    short = "k" * MAX_KEY_CHARS
    assert bounded_key(short) is short
    assert bounded_key(None) is None
    long_key = short + "k"
    digest = bounded_key(long_key)
    assert len(digest) == 33
    assert digest == bounded_key("k" * (MAX_KEY_CHARS + 1))  # stable: replicas agree on it
    assert digest != bounded_key(short + "j")
    assert long_key not in digest


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_rate_limiter_given_huge_keys_directly_keeps_none_of_them(
    request: pytest.FixtureRequest, backend: str
) -> None:
    # Without the Guard's door: RateLimiter.decide and try_acquire take raw keys too.
    redis = None
    if backend == "redis":
        redis = RedisRateLimitBackend(request.getfixturevalue("redis_url"), timeout=1.0)
    limiter = RateLimiter(50, scope="client", backend=redis)
    await limiter.decide("warm-up")
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for start in range(0, 50, AT_ONCE):
            for key in _keys(start):
                assert (await limiter.decide(key)).allowed
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        if redis is not None:
            await redis.aclose()
    assert kept < KEPT_AT_MOST, f"{kept / 2**20:.1f} MiB kept"
