"""Limits through a real Redis Cluster (3 primaries, 3 replicas on loopback): any node serves as
the seed, limits are exact, keys spread over every shard, and a decision over budgets in
different slots is still all or nothing."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry
from redis.crc import key_slot
from topology import ClusterSet, client

from fleet_runs import result
from fusion_guard import (
    DistributedConcurrencyGuard,
    Guard,
    RateLimit,
    RateLimiter,
    RedisRateLimitBackend,
)
from fusion_guard.backends import key_digest

# The Redis clients' timeouts, both of them: a loaded machine is no outage (these are no
# failovers). A client's first call (learning the slot map, the command table, connecting to the
# key's node, loading the script) runs under ``connect_timeout``, not ``timeout``: left at its
# default (1 s), it ran out under two parallel `make test`s, most often while connecting to the
# key's node, the step the first call was at (read as a "hung connect"; the socket was fine).
TIMEOUT = 5.0

pytestmark = pytest.mark.anyio

STARTUP = 2.0  # seconds for worker processes to import before their load starts together


def _primary_of(cluster: ClusterSet, key: str) -> int:
    return cluster.primary_of(key_slot(key.encode()))


async def test_any_node_as_seed_admits_exactly_the_budget(cluster: ClusterSet) -> None:
    for port in cluster.ports:  # primaries and replicas alike
        backend = RedisRateLimitBackend(
            f"redis+cluster://127.0.0.1:{port}", timeout=TIMEOUT, connect_timeout=TIMEOUT
        )
        # "raise": a backend error fails the test instead of being admitted by a policy.
        limiter = RateLimiter(5, burst=5, name=f"seed-{port}", backend=backend,
                              failure_policy="raise")  # fmt: skip
        try:
            asked = time.monotonic()
            decisions = [await limiter.decide() for _ in range(6)]
            taken = time.monotonic() - asked
            assert [d.allowed for d in decisions[:5]] == [True] * 5
            if decisions[-1].allowed:
                # Only when the six calls took a whole interval (0.2 s, a cold client's first call
                # on a loaded machine): the next opening was then truly due.
                assert taken >= 0.2 - 0.001, taken
                continue
            # The next opening is one interval (0.2 s) after the burst started: a true promise,
            # told less the time the decisions took (a millisecond for the scripts' rounding).
            retry_after = decisions[-1].retry_after
            assert 0.2 - taken - 0.001 <= retry_after <= 0.2
            slept_from = time.monotonic()
            await asyncio.sleep(retry_after)
            assert (await limiter.decide()).allowed
            again = await limiter.decide()
            # One opening per interval: refused again, unless a loaded machine woke this task a
            # whole interval late (then the next opening is due, truly).
            late = time.monotonic() - slept_from - retry_after
            assert not again.allowed or late >= 0.2 - 0.01, late
        finally:
            await backend.aclose()


async def test_thirty_tools_spread_their_keys_over_every_primary(cluster: ClusterSet) -> None:
    tools = [f"tool.{index}" for index in range(30)]
    guard = Guard(
        backend="redis",
        redis_url=cluster.url,
        redis_failure_policy="closed",  # a backend error would be a refusal: none is allowed
        redis_timeout=TIMEOUT,
        redis_connect_timeout=TIMEOUT,
        redis_prefix="spread",
        max_active=2,
        tools={tool: {"rate": 1, "rate_per": 60} for tool in tools},
        registry=CollectorRegistry(),
    )

    async def handler() -> str:
        return "ok"

    for tool in tools:
        response = await guard.call(tool, handler)
        assert not response.is_error, response

    holders: dict[str, Counter[int]] = {"rate": Counter(), "fleet": Counter()}
    for port in cluster.primary_slots():
        for key in client(port).scan_iter("spread:*", count=1000):
            kind = key.decode().split(":")[1]
            if kind in holders:
                holders[kind][port] += 1
    for kind, per_primary in holders.items():
        assert sum(per_primary.values()) == len(tools), kind  # one budget / semaphore per tool
        assert len(per_primary) == 3, (kind, per_primary)  # every primary holds some
        assert max(per_primary.values()) <= len(tools) // 2, (kind, per_primary)
    await guard.concurrency(tools[0]).connection.aclose()  # type: ignore[union-attr]


async def test_budgets_in_two_slots_refuse_without_spending_either(cluster: ClusterSet) -> None:
    backend = RedisRateLimitBackend(cluster.url, timeout=TIMEOUT, connect_timeout=TIMEOUT)
    per_client = RateLimit(10, burst=10, scope="client", name="two-slots/client")
    shared = RateLimit(1, per=60, burst=1, name="two-slots/shared")
    both = RateLimiter(limits=[per_client, shared], backend=backend, failure_policy="raise")
    alone = RateLimiter(limits=[per_client], backend=backend, failure_policy="raise")
    budgets = [per_client.namespace + "acme", shared.namespace]
    tats = [backend.connection.key("rate", key_digest(budget)) for budget in budgets]
    assert len({key_slot(tat.encode()) for tat in tats}) == 2  # the case under test
    try:
        assert (await both.decide("acme")).allowed
        refused = await both.decide("acme")
        # The shared budget refused, after the client's slot had admitted: given back.
        assert not refused.allowed
        assert 59 < refused.retry_after <= 60
        admitted = [(await alone.decide("acme")).allowed for _ in range(10)]
        assert admitted == [True] * 9 + [False]  # 10, less the one call admitted by both
    finally:
        await backend.aclose()


# Alone: judged by processes' time stamps and throughput, which a busy neighbour delays.
@pytest.mark.alone
@pytest.mark.slow  # a fleet of processes on the real clock: once, in make test
def test_three_processes_seeded_by_different_nodes_share_one_rate_limit(
    cluster: ClusterSet, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    rate, burst, seconds = 20.0, 5, 2.0
    start_at = time.monotonic() + STARTUP
    workers = [
        spawn("rate", f"redis+cluster://127.0.0.1:{port}", start_at, seconds, rate, burst)
        for port in cluster.ports[3:]
    ]
    results = [result(worker, healthy=True) for worker in workers]

    stamps = sorted(stamp for outcome in results for stamp in outcome["admitted"])
    assert sum(outcome["attempts"] for outcome in results) > 3 * len(stamps)  # under pressure
    # GCRA admits `burst` at once, then one call per interval, whichever process asks.
    allowed = burst + (stamps[-1] - stamps[0]) * rate
    assert abs(len(stamps) - allowed) <= 1, (len(stamps), allowed)


# Alone: judged by processes' time stamps and throughput, which a busy neighbour delays.
@pytest.mark.alone
@pytest.mark.slow  # a fleet of processes on the real clock: once, in make test
def test_three_processes_share_one_fleet_limit_exactly(
    cluster: ClusterSet, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    max_active, tasks, hold, seconds = 4, 4, 0.02, 2.0
    start_at = time.monotonic() + STARTUP
    # Each replica is seeded with a different node: any one finds the whole cluster.
    args = (start_at, seconds, max_active, tasks, hold)
    workers = [
        spawn("concurrency", f"redis+cluster://127.0.0.1:{port}", *args)
        for port in cluster.ports[:3]
    ]
    key = "fusion_guard:lease:{fleet}"
    samples: list[int] = []
    with client(_primary_of(cluster, key)) as primary:
        while any(worker.poll() is None for worker in workers):
            samples.append(int(primary.zcard(key)))
            time.sleep(0.002)  # a sampling cadence, not a wait for an event
    results = [result(worker, healthy=True) for worker in workers]

    assert len(samples) > 200
    assert max(samples) == max_active  # reached, never passed
    assert all(outcome["ok"] > 0 for outcome in results)
    assert sum(outcome["ok"] for outcome in results) > seconds / hold


async def test_a_fleet_slot_lease_lives_on_its_own_shard(cluster: ClusterSet) -> None:
    slots = DistributedConcurrencyGuard(
        2, redis=cluster.url, name="billing.charge", timeout=TIMEOUT, connect_timeout=TIMEOUT
    )
    try:
        assert slots.key == "fusion_guard:lease:{billing.charge}"
        async with slots.slot(timeout=5):
            with client(_primary_of(cluster, slots.key)) as primary:
                assert primary.zcard(slots.key) == 1
    finally:
        await slots.connection.aclose()


async def test_a_ready_made_cluster_client_spreads_keys_too(cluster: ClusterSet) -> None:
    from redis.asyncio.cluster import RedisCluster

    ready = RedisCluster(host="127.0.0.1", port=cluster.ports[0])
    backend = RedisRateLimitBackend(ready, timeout=TIMEOUT, connect_timeout=TIMEOUT)
    limiter = RateLimiter(2, burst=2, name="ready-made", backend=backend, failure_policy="raise")
    try:
        assert [(await limiter.decide()).allowed for _ in range(3)] == [True, True, False]
        assert backend.connection.key("rate", "x") == "fusion_guard:rate:{x}"
    finally:
        await backend.aclose()
