"""A primary killed (SIGKILL) under load, three fail-closed replicas sharing 4 fleet slots: calls
are shed while the shard is gone, and once the cluster (or Sentinel) has promoted the replica the
fleet runs 4 calls again within a second, never more than 4, without a restart. Calls of 0.3 s
run across the kill: leases the replica never received are registered again by their calls."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable

import anyio
import pytest
from redis.crc import key_slot
from topology import ClusterSet, SentinelSet, client

from fleet_runs import full_again, result, running
from fusion_guard import CallContext, RateLimiter, RedisRateLimitBackend, ServerBusy
from fusion_guard.backends import key_digest

WORKERS = 3
LIMIT = 4
STARTUP = 2.0  # seconds for the workers to import before their load starts together
HOLD = 0.3
REDIS_TIMEOUT = 0.1  # a dead shard is an outage; a loaded two-core machine is not
SECONDS = 1.5 + 6.0 + 2.5  # full load, room for the failover, then the recovery watched

# Failovers on the real clock, seconds each: once, in make test (the lowest-version runs check
# the cluster and Sentinel clients on the healthy topologies, test_cluster.py, test_sentinel.py).
pytestmark = pytest.mark.slow


def _under_load(
    spawn: Callable[..., subprocess.Popen[str]], url: str, fail: Callable[[], float]
) -> tuple[list[tuple[float, int]], float]:
    """The fleet's running calls over time, and when the promotion was seen; prints the
    figures docs/redis-cluster.md quotes (``pytest -s`` shows them)."""
    start_at = time.monotonic() + STARTUP
    workers = [
        spawn("chaos", url, start_at, SECONDS, LIMIT, 4, HOLD, REDIS_TIMEOUT)
        for _ in range(WORKERS)
    ]
    time.sleep(max(0.0, start_at + 1.5 - time.monotonic()))  # at full capacity by then
    killed = time.monotonic()
    promoted = fail()
    results = [result(worker) for worker in workers]
    assert time.monotonic() > promoted + 2.0  # the load went on long enough after
    assert sum(outcome["shed"] for outcome in results) > 0  # fail-closed shed in the gap
    steps = running([tuple(span) for outcome in results for span in outcome["ran"]])
    # Calls that entered before the kill may still be running just after it.
    full = full_again(steps, killed + HOLD, LIMIT) + HOLD
    print(
        f"\npromoted {promoted - killed:.2f} s after the kill (as polled), fleet full again"
        f" {full:.2f} s after the kill, {full_again(steps, promoted, LIMIT):.2f} s after the poll"
    )
    return steps, promoted


def test_a_killed_cluster_primary_is_replaced_within_a_second_of_promotion(
    fresh_cluster: ClusterSet, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    slot = key_slot(b"fusion_guard:lease:{chaos}")

    def kill_primary() -> float:
        primary = fresh_cluster.primary_of(slot)
        fresh_cluster.kill(primary)
        return fresh_cluster.wait_promoted(slot, primary)

    steps, promoted = _under_load(spawn, fresh_cluster.url, kill_primary)
    assert max(count for _, count in steps) <= LIMIT
    assert full_again(steps, promoted, LIMIT) <= 1.0, full_again(steps, promoted, LIMIT)


def test_a_sentinel_failover_is_followed_within_a_second(
    fresh_sentinel: SentinelSet, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    def kill_primary() -> float:
        return fresh_sentinel.wait_promoted(fresh_sentinel.kill_primary())

    steps, promoted = _under_load(spawn, fresh_sentinel.url, kill_primary)
    assert max(count for _, count in steps) <= LIMIT
    assert full_again(steps, promoted, LIMIT) <= 1.0, full_again(steps, promoted, LIMIT)


def _slot(backend: RedisRateLimitBackend, limiter: RateLimiter) -> int:
    budget = backend.connection.key("rate", key_digest(limiter.limit.namespace))
    return key_slot(budget.encode())


# Alone (after make test's parallel run): the claim is that with the default 50 ms decision
# timeout the first decisions after a promotion fit it (re-learning the slot map included),
# which a busy neighbour breaks: each re-learning then times out, and the next, for seconds.
@pytest.mark.alone
@pytest.mark.anyio
async def test_rate_decisions_follow_the_policy_in_the_gap_then_resume(
    fresh_cluster: ClusterSet,
) -> None:
    # Without full coverage required, the shards not failing over keep answering meanwhile.
    for port in fresh_cluster.ports:
        client(port).config_set("cluster-require-full-coverage", "no")
    backend = RedisRateLimitBackend(fresh_cluster.url)  # the default timeout, 50 ms
    closed = RateLimiter(1000, burst=1000, name="gap", backend=backend, failure_policy="closed")
    opened = RateLimiter(1000, burst=1000, name="gap", backend=backend, failure_policy="open")
    slot = _slot(backend, closed)
    elsewhere = next(
        limiter
        for limiter in (
            RateLimiter(
                1000, burst=1000, name=f"other-{n}", backend=backend, failure_policy="raise"
            )
            for n in range(100)
        )
        if fresh_cluster.primary_of(_slot(backend, limiter)) != fresh_cluster.primary_of(slot)
    )
    ctx = CallContext("gap.tool")
    outcomes: list[tuple[float, str]] = []  # (when, what the closed limiter answered)
    opened_refused = 0

    async def load(until: float) -> None:
        nonlocal opened_refused
        while time.monotonic() < until:
            try:
                refusal = await closed.acheck(ctx)
                outcomes.append((time.monotonic(), "allowed" if refusal is None else "limited"))
            except ServerBusy as busy:
                outcomes.append((time.monotonic(), busy.reason))
            opened_refused += (await opened.acheck(ctx)) is not None
            assert (await elsewhere.decide()).allowed  # "raise": a failure fails the test
            await anyio.sleep(0.01)

    def kill_primary() -> float:
        primary = fresh_cluster.primary_of(slot)
        fresh_cluster.kill(primary)
        return fresh_cluster.wait_promoted(slot, primary)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(load, time.monotonic() + 30)
            await anyio.sleep(0.5)
            promoted = await anyio.to_thread.run_sync(kill_primary)
            await anyio.sleep(2.0)
            group.cancel_scope.cancel()
    finally:
        await backend.aclose()

    reasons = Counter(what for _, what in outcomes)
    assert reasons["backend_unavailable"] > 0  # fail-closed shed in the gap
    assert set(reasons) <= {"allowed", "backend_unavailable"}
    assert opened_refused == 0  # fail-open admitted throughout
    last_failure = max(when for when, what in outcomes if what == "backend_unavailable")
    assert last_failure - promoted <= 1.0, last_failure - promoted
    assert all(what == "allowed" for when, what in outcomes if when > last_failure)


@pytest.mark.anyio
async def test_a_sentinel_switchover_costs_no_decision(fresh_sentinel: SentinelSet) -> None:
    # The old primary is demoted, not killed: pooled connections to it meet READONLY, and
    # redis-py's Sentinel connection turns that into a reconnect to the new primary, retried.
    backend = RedisRateLimitBackend(fresh_sentinel.url, timeout=REDIS_TIMEOUT)
    limiter = RateLimiter(1000, burst=1000, name="switch", backend=backend, failure_policy="raise")
    old = fresh_sentinel.current_primary()

    def switch_over() -> float:
        client(fresh_sentinel.sentinels[0]).sentinel_failover(fresh_sentinel.SERVICE)
        return fresh_sentinel.wait_promoted(old)

    decided = 0

    async def load() -> None:
        nonlocal decided
        while True:
            assert (await limiter.decide()).allowed  # "raise": a failure fails the test
            decided += 1
            await anyio.sleep(0.01)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(load)
            await anyio.to_thread.run_sync(switch_over)
            await anyio.sleep(0.5)
            group.cancel_scope.cancel()
    finally:
        await backend.aclose()
    assert fresh_sentinel.current_primary() != old
    assert decided > 50
