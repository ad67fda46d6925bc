"""Rate limits and the fleet concurrency limit on a real Redis, within one process.

Two guards with the same name stand for two replicas (each has its own lease owner id and
refresher, exactly as separate processes would).
"""

from __future__ import annotations

import asyncio

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from fusion_guard import (
    CallContext,
    ConfigurationError,
    DistributedConcurrencyGuard,
    HandlerTimeout,
    RateLimited,
    RateLimiter,
    RateLimits,
    RedisRateLimitBackend,
    ServerBusy,
)
from redis_testserver import RedisServer

pytestmark = pytest.mark.anyio

CTX = CallContext(tool="billing.charge", client="client-secret-42")


def _limits(backend: RedisRateLimitBackend, *limiters: RateLimiter) -> RateLimits:
    return RateLimits(limiters, backend=backend)


async def test_burst_then_refusal_with_exact_retry_after(redis_url: str) -> None:
    backend = RedisRateLimitBackend(redis_url, timeout=1.0)
    limits = _limits(backend, RateLimiter(2, 1.0, 3, scope="client"))
    assert [await limits.acheck(CTX) for _ in range(3)] == [None, None, None]
    refusal = await limits.acheck(CTX)
    assert isinstance(refusal, RateLimited)
    assert refusal.retry_after is not None
    assert 0.4 < refusal.retry_after <= 0.5  # one interval (0.5 s) after the first call
    assert "client-secret-42" not in refusal.response.text
    await backend.aclose()


async def test_caller_keys_are_stored_as_digests(redis_url: str, redis_server: RedisServer) -> None:
    backend = RedisRateLimitBackend(redis_url, timeout=1.0, prefix="fg-test")
    # One call per minute: the key lives a minute, not the 0.2 s of 5/s that a loaded machine
    # can spend before the look below.
    limits = _limits(backend, RateLimiter(1, per=60.0, scope="client"))
    assert await limits.acheck(CTX) is None
    with redis_server.client() as client:
        keys = [key.decode() for key in client.keys("*")]
    assert len(keys) == 1
    assert keys[0].startswith("{fg-test}:rate:")
    assert "client-secret-42" not in keys[0]
    await backend.aclose()


async def test_a_refusal_spends_no_other_limit(redis_url: str) -> None:
    backend = RedisRateLimitBackend(redis_url, timeout=1.0)
    wide = RateLimiter(10, 100.0, 10, name="wide")  # no refill within the test
    narrow = RateLimiter(1, 10.0, 1, name="narrow")
    limits = _limits(backend, wide, narrow)
    assert await limits.acheck(CTX) is None
    for _ in range(5):
        refusal = await limits.acheck(CTX)
        assert isinstance(refusal, RateLimited)
        assert refusal.scope == "global"
    # The wide limit recorded the first call only: 9 more fit in its burst.
    wide_only = _limits(backend, wide)
    admitted = [await wide_only.acheck(CTX) for _ in range(9)]
    assert admitted == [None] * 9
    assert isinstance(await wide_only.acheck(CTX), RateLimited)
    await backend.aclose()


def test_bad_failure_policy_is_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="failure_policy='maybe' is invalid"):
        RedisRateLimitBackend("redis://127.0.0.1:1/0", failure_policy="maybe")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="lease"):
        DistributedConcurrencyGuard(2, redis="redis://127.0.0.1:1/0", lease=0)
    with pytest.raises(ConfigurationError, match="at most 86400 seconds"):
        DistributedConcurrencyGuard(2, redis="redis://127.0.0.1:1/0", lease=1e16)


async def test_fleet_slots_are_shared_between_replicas(redis_url: str) -> None:
    one = DistributedConcurrencyGuard(2, redis=redis_url, name="t", timeout=1.0)
    two = DistributedConcurrencyGuard(2, redis=redis_url, name="t", timeout=1.0)
    released = anyio.Event()
    entered: list[str] = []

    async def run(
        guard: DistributedConcurrencyGuard,
        label: str,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with guard.slot():
            entered.append(label)
            task_status.started()
            await released.wait()

    async with anyio.create_task_group() as tg:
        await tg.start(run, one, "a")
        await tg.start(run, two, "b")
        tg.start_soon(run, one, "c")  # the fleet is full: c polls Redis
        await anyio.sleep(0.1)
        assert entered == ["a", "b"]
        assert one.active == 2  # c holds a local slot while it waits for a lease
        released.set()
    assert sorted(entered) == ["a", "b", "c"]


async def test_fleet_full_past_queue_timeout_is_server_busy(redis_url: str) -> None:
    one = DistributedConcurrencyGuard(1, redis=redis_url, name="t", timeout=1.0)
    two = DistributedConcurrencyGuard(1, redis=redis_url, name="t", queue_timeout=0.1, timeout=1.0)
    async with one.slot():
        with anyio.fail_after(2):
            with pytest.raises(ServerBusy) as caught:
                async with two.slot():
                    pytest.fail("admitted beyond the fleet limit")
    assert caught.value.reason == "queue_timeout"
    assert caught.value.response.code == "SERVER_BUSY"
    assert two.active == 0  # the local slot was given back


async def test_local_queue_full_is_server_busy(redis_url: str) -> None:
    guard = DistributedConcurrencyGuard(1, max_queue=0, redis=redis_url, name="t", timeout=1.0)
    async with guard.slot():
        with pytest.raises(ServerBusy) as caught:
            async with guard.slot():
                pytest.fail("admitted beyond the local limit")
    assert caught.value.reason == "queue_full"


async def test_fleet_full_and_local_queue_full_is_server_busy_at_once(redis_url: str) -> None:
    holder = DistributedConcurrencyGuard(1, redis=redis_url, name="t", timeout=1.0)
    replica = DistributedConcurrencyGuard(
        1, max_queue=1, queue_timeout=60.0, redis=redis_url, name="t", timeout=1.0
    )

    async def wait_for_slot() -> None:
        async with replica.slot():
            pass

    async with holder.slot(), anyio.create_task_group() as tg:
        tg.start_soon(wait_for_slot)  # takes the local slot, then polls the full fleet
        tg.start_soon(wait_for_slot)  # queues locally behind it
        await anyio.wait_all_tasks_blocked()
        assert (replica.active, replica.queued) == (1, 1)
        start = anyio.current_time()
        with pytest.raises(ServerBusy) as caught:
            async with replica.slot():
                pytest.fail("admitted beyond the fleet limit")
        assert caught.value.reason == "queue_full"
        # Shed at once, not after queue_timeout: the bound is gross, a loaded machine may keep
        # this process waiting (0.1 s was within one stall of a busy two-core machine).
        assert anyio.current_time() - start < 5.0
        tg.cancel_scope.cancel()
    assert (replica.active, replica.queued, replica.held_leases) == (0, 0, 0)


async def test_handler_timeout_gives_the_lease_back(
    redis_url: str, redis_server: RedisServer
) -> None:
    guard = DistributedConcurrencyGuard(1, redis=redis_url, name="t", timeout=1.0)
    with pytest.raises(HandlerTimeout):
        async with guard.slot(timeout=0.05):
            await anyio.sleep(5)
    with redis_server.client() as client:
        assert client.zcard(guard.key) == 0
    assert guard.active == 0


def _refreshers() -> int:
    return sum(
        1
        for task in asyncio.all_tasks()
        if task.get_name() == "fusion_guard lease refresher" and not task.done()
    )


async def test_one_refresher_keeps_every_tool_s_leases_while_calls_run(
    redis_url: str, redis_server: RedisServer
) -> None:
    backend = RedisRateLimitBackend(redis_url, timeout=1.0)  # one connection for both tools
    guards = [
        DistributedConcurrencyGuard(1, redis=backend, name=name, lease=0.3)
        for name in ("search", "billing.charge")
    ]
    refresher = backend.connection.refresher
    assert not refresher.active  # an idle process runs nothing
    async with guards[0].slot(), guards[1].slot():
        assert refresher.active
        await anyio.sleep(0.7)  # more than two leases
        with redis_server.client() as client:
            assert [client.zcard(guard.key) for guard in guards] == [1, 1]
    # A round may be in flight as the calls end (one every 0.1 s here): it ends with its round
    # trip and schedules nothing more.
    in_flight = [t for t in asyncio.all_tasks() if t.get_name() == "fusion_guard lease refresher"]
    if in_flight:
        with anyio.fail_after(2.0):
            await asyncio.wait(in_flight)
    assert not refresher.active
    await anyio.lowlevel.checkpoint()
    assert _refreshers() == 0
    with redis_server.client() as client:
        assert [client.zcard(guard.key) for guard in guards] == [0, 0]
    await backend.aclose()
