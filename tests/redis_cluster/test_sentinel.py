"""Limits through a primary found by Sentinel (one primary, one replica, three sentinels on
loopback): the same keys and the same one-round-trip decisions as a single Redis."""

from __future__ import annotations

import asyncio
import time

import pytest
from topology import SentinelSet, client

from fusion_guard import DistributedConcurrencyGuard, RateLimiter, RedisRateLimitBackend

# The Redis clients' timeouts, both of them (``connect_timeout`` bounds a client's first
# connections, at 1 s by default): a loaded machine is no outage (these are no failovers).
TIMEOUT = 5.0

pytestmark = pytest.mark.anyio


async def test_the_primary_found_through_sentinel_admits_exactly_the_budget(
    sentinel: SentinelSet,
) -> None:
    backend = RedisRateLimitBackend(sentinel.url, timeout=TIMEOUT, connect_timeout=TIMEOUT)
    limiter = RateLimiter(5, burst=5, name="sentinel", backend=backend, failure_policy="raise")
    try:
        asked = time.monotonic()
        decisions = [await limiter.decide() for _ in range(6)]
        taken = time.monotonic() - asked
        assert [d.allowed for d in decisions] == [True] * 5 + [False], taken
        # The next opening is one interval (0.2 s) after the burst started, less the time the
        # decisions took (a loaded machine's cold first call: tenths of a second).
        assert 0.2 - taken - 0.001 <= decisions[-1].retry_after <= 0.2
        await asyncio.sleep(decisions[-1].retry_after)
        assert (await limiter.decide()).allowed
    finally:
        await backend.aclose()


async def test_leases_live_on_the_primary_with_one_node_keys(sentinel: SentinelSet) -> None:
    slots = DistributedConcurrencyGuard(
        2, redis=sentinel.url, name="search", timeout=TIMEOUT, connect_timeout=TIMEOUT
    )
    try:
        assert slots.key == "{fusion_guard}:lease:search"
        async with slots.slot(timeout=5):
            with client(sentinel.current_primary()) as primary:
                assert primary.zcard(slots.key) == 1
    finally:
        await slots.connection.aclose()
