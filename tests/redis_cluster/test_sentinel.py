"""Limits through a primary found by Sentinel (one primary, one replica, three sentinels on
loopback): the same keys and the same one-round-trip decisions as a single Redis."""

from __future__ import annotations

import asyncio

import pytest
from topology import SentinelSet, client

from fusion_guard import DistributedConcurrencyGuard, RateLimiter, RedisRateLimitBackend

# The Redis clients' timeout: a loaded machine is no outage (these are no failovers); 2 s was
# once too short for a first call's connections to a cluster under a parallel `make test`.
TIMEOUT = 5.0

pytestmark = pytest.mark.anyio


async def test_the_primary_found_through_sentinel_admits_exactly_the_budget(
    sentinel: SentinelSet,
) -> None:
    backend = RedisRateLimitBackend(sentinel.url, timeout=TIMEOUT)
    limiter = RateLimiter(5, burst=5, name="sentinel", backend=backend, failure_policy="raise")
    try:
        decisions = [await limiter.decide() for _ in range(6)]
        assert [d.allowed for d in decisions] == [True] * 5 + [False]
        assert 0.1 < decisions[-1].retry_after <= 0.2
        await asyncio.sleep(decisions[-1].retry_after)
        assert (await limiter.decide()).allowed
    finally:
        await backend.aclose()


async def test_leases_live_on_the_primary_with_one_node_keys(sentinel: SentinelSet) -> None:
    slots = DistributedConcurrencyGuard(2, redis=sentinel.url, name="search", timeout=TIMEOUT)
    try:
        assert slots.key == "{fusion_guard}:lease:search"
        async with slots.slot(timeout=5):
            with client(sentinel.current_primary()) as primary:
                assert primary.zcard(slots.key) == 1
    finally:
        await slots.connection.aclose()
