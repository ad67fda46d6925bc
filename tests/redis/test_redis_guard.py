"""The Guard on the Redis backend: configuration from the environment, Redis stopped and started
again mid-load under each failure policy."""

from __future__ import annotations

import anyio
import anyio.to_thread
import pytest
import trio
from prometheus_client import CollectorRegistry

from fusion_guard import (
    ConfigurationError,
    DistributedConcurrencyGuard,
    GradientLimit,
    Guard,
    InvalidSettings,
    RedisRateLimitBackend,
    ToolResponse,
    parse_tool_error,
)
from fusion_guard.backends._redis_lease import RECOVERY_GRACE
from redis_testserver import RedisServer

pytestmark = pytest.mark.anyio


def _redis_guard(url: str, policy: str, registry: CollectorRegistry, **limits: object) -> Guard:
    """A guard on Redis with a short timeout (the outage tests stop the server)."""
    return Guard(
        backend="redis",
        redis_url=url,
        redis_failure_policy=policy,
        redis_timeout=0.3,
        registry=registry,
        **limits,
    )


def _backend_errors(registry: CollectorRegistry, decision: str) -> float:
    labels = {"backend": "redis", "decision": decision}
    return registry.get_sample_value("fusion_guard_backend_errors_total", labels) or 0.0


async def test_env_variables_select_the_redis_backend(
    monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer, redis_url: str
) -> None:
    monkeypatch.setenv("FUSION_GUARD_BACKEND", "redis")
    monkeypatch.setenv("FUSION_GUARD_REDIS_URL", redis_url)
    monkeypatch.setenv("FUSION_GUARD_REDIS_TIMEOUT", "0.5")
    monkeypatch.setenv("FUSION_GUARD_REDIS_CONNECT_TIMEOUT", "2.5")
    monkeypatch.setenv("FUSION_GUARD_REDIS_LEASE", "2")
    monkeypatch.setenv("FUSION_GUARD_REDIS_PREFIX", "env-test")
    monkeypatch.setenv("FUSION_GUARD_RATE", "5")
    monkeypatch.setenv("FUSION_GUARD_RATE_PER", "60")  # its key outlives the look below
    guard = Guard.from_env(registry=CollectorRegistry())
    assert guard.settings.redis_connect_timeout == 2.5
    slots = guard.concurrency("search")
    assert isinstance(slots, DistributedConcurrencyGuard)
    assert slots.lease == 2.0
    assert slots.key.startswith("{env-test}:")

    seen_holders: list[int] = []

    async def handler() -> str:
        with redis_server.client() as client:
            seen_holders.append(client.zcard(slots.key))
        return "ok"

    response = await guard.call("search", handler)
    assert not response.is_error
    assert seen_holders == [1]
    with redis_server.client() as client:
        assert client.zcard(slots.key) == 0
        assert any(key.startswith(b"{env-test}:rate:") for key in client.keys("*"))


async def test_auto_on_redis_caps_the_fleet_at_the_automatic_ceiling(
    monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer, redis_url: str
) -> None:
    monkeypatch.setenv("FUSION_GUARD_BACKEND", "redis")
    monkeypatch.setenv("FUSION_GUARD_REDIS_URL", redis_url)
    monkeypatch.setenv("FUSION_GUARD_MAX_ACTIVE", "auto")
    monkeypatch.setenv("FUSION_GUARD_AUTO_MAX_ACTIVE", "3")
    monkeypatch.setenv("FUSION_GUARD_AUTO_INITIAL_ACTIVE", "2")
    guard = Guard.from_env(registry=CollectorRegistry())
    slots = guard.concurrency("search")
    assert isinstance(slots, DistributedConcurrencyGuard)
    assert isinstance(slots.adaptive_limit, GradientLimit)  # this process's own slots
    assert slots.fleet_max_active == 3  # the fleet's hard cap
    assert slots.limit == slots.adaptive_limit.limit
    assert "fleet_max_active=3" in repr(slots)
    assert redis_url not in repr(slots)

    seen_holders: list[int] = []

    async def handler() -> str:
        with redis_server.client() as client:
            seen_holders.append(client.zcard(slots.key))
        return "ok"

    for _ in range(3):
        response = await guard.call("search", handler)
        assert not response.is_error
    assert seen_holders == [1, 1, 1]  # each call held a fleet lease
    with redis_server.client() as client:
        assert client.zcard(slots.key) == 0
    await slots.connection.aclose()


def test_redis_settings_are_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_BACKEND", "redis")
    monkeypatch.setenv("FUSION_GUARD_REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("FUSION_GUARD_REDIS_FAILURE_POLICY", "sometimes")
    monkeypatch.setenv("FUSION_GUARD_REDIS_TIMEOUT", "-1")
    with pytest.raises(InvalidSettings) as caught:
        Guard.from_env()
    text = str(caught.value)
    assert "FUSION_GUARD_REDIS_FAILURE_POLICY='sometimes' is invalid" in text
    assert "'open'" in text
    assert "'closed'" in text
    assert "FUSION_GUARD_REDIS_TIMEOUT='-1' is invalid" in text


@pytest.mark.parametrize("policy", ["open", "closed"])
async def test_redis_stopped_mid_load_then_started_again(
    redis_server: RedisServer, redis_url: str, policy: str
) -> None:
    registry = CollectorRegistry()
    guard = _redis_guard(
        redis_url, policy, registry, max_active=4, max_queue=16, queue_timeout=1.0, rate=10_000
    )
    phase = "before"
    answers: dict[str, list[ToolResponse]] = {"before": [], "down": [], "after": []}
    done = anyio.Event()

    async def handler() -> str:
        await anyio.sleep(0.002)
        return "ok"

    async def client() -> None:
        while not done.is_set():
            seen = phase
            answer = await guard.call("billing.charge", handler)
            # A call that spanned a change of phase belongs to neither: on a loaded machine one
            # begun before the stop may meet the stopped server (a refusal "before" it).
            if phase == seen:
                answers[seen].append(answer)
            await anyio.sleep(0.002)

    # Any exception escaping Guard.call would fail the task group, and the test.
    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(client)
        await anyio.sleep(0.2)
        phase = "down"
        await anyio.to_thread.run_sync(redis_server.stop)
        await anyio.sleep(0.3)
        await anyio.to_thread.run_sync(redis_server.start)
        await anyio.sleep(0.05)
        phase = "after"
        # New leases wait RECOVERY_GRACE after a restart (running calls register theirs first).
        await anyio.sleep(0.3 + RECOVERY_GRACE)
        done.set()

    codes = {
        name: {parse_tool_error(r.text).code if r.is_error else "ok" for r in rs}  # type: ignore[union-attr]
        for name, rs in answers.items()
    }
    assert codes["before"] == {"ok"}
    assert answers["down"], "no call was made while Redis was down"
    if policy == "open":
        assert codes["down"] == {"ok"}
        assert _backend_errors(registry, "allowed") > 0
        assert _backend_errors(registry, "denied") == 0
    else:
        assert "SERVER_BUSY" in codes["down"]
        assert codes["down"] <= {"ok", "SERVER_BUSY"}  # calls admitted before the stop finish
        busy = next(r for r in answers["down"] if r.is_error)
        assert '<detail key="reason">backend_unavailable</detail>' in busy.text
        assert '<detail key="max_active">4</detail>' in busy.text  # the standard envelope
        assert _backend_errors(registry, "denied") > 0
        assert _backend_errors(registry, "allowed") == 0
    # Started again (empty: no keys, no scripts): no restart of this process needed. The first
    # calls after the start may still meet a dead pooled connection; the last ones are fine.
    assert answers["after"][-6:]
    assert {r.is_error for r in answers["after"][-6:]} == {False}
    await _limits_work_again(guard, redis_server)


async def _limits_work_again(guard: Guard, redis_server: RedisServer) -> None:
    slots = guard.concurrency("billing.charge")
    assert isinstance(slots, DistributedConcurrencyGuard)
    holders: list[int] = []

    async def handler() -> str:
        with redis_server.client() as client:
            holders.append(client.zcard(slots.key))
        return "ok"

    assert not (await guard.call("billing.charge", handler)).is_error
    assert holders == [1]  # the lease is in Redis again


async def test_rate_limit_refusals_come_back_after_a_restart(
    redis_server: RedisServer, redis_url: str
) -> None:
    backend = RedisRateLimitBackend(redis_url, timeout=0.5)
    guard = Guard(rate=1, rate_per=60, burst=1, max_active=None, rate_backend=backend)

    async def handler() -> str:
        return "ok"

    assert not (await guard.call("t", handler)).is_error
    assert (await guard.call("t", handler)).is_error
    await anyio.to_thread.run_sync(redis_server.stop)
    await anyio.to_thread.run_sync(redis_server.start)
    assert not (await guard.call("t", handler)).is_error  # Redis lost the state: full again
    refused = await guard.call("t", handler)
    info = parse_tool_error(refused.text)
    assert info is not None
    assert info.code == "RATE_LIMITED"


@pytest.mark.parametrize("limits", [{"rate": 5, "max_active": None}, {"max_active": 2}])
def test_under_trio_the_guard_says_redis_needs_asyncio(
    redis_url: str, limits: dict[str, object]
) -> None:
    guard = Guard(backend="redis", redis_url=redis_url, registry=CollectorRegistry(), **limits)

    async def main() -> None:
        async with guard.admit("search"):
            pytest.fail("admitted under trio")

    with pytest.raises(ConfigurationError, match="needs asyncio"):
        trio.run(main)


@pytest.mark.parametrize("policy", ["open", "closed"])
async def test_a_rate_limited_tool_without_slots_under_each_policy(
    redis_server: RedisServer, redis_url: str, policy: str
) -> None:
    registry = CollectorRegistry()
    guard = _redis_guard(redis_url, policy, registry, rate=100, max_active=None)

    async def handler() -> str:
        return "ok"

    assert not (await guard.call("search", handler)).is_error
    await anyio.to_thread.run_sync(redis_server.stop)
    try:
        response = await guard.call("search", handler)
    finally:
        await anyio.to_thread.run_sync(redis_server.start)
    if policy == "open":
        assert not response.is_error
        assert _backend_errors(registry, "allowed") == 1
    else:
        info = parse_tool_error(response.text)
        assert info is not None
        assert info.code == "SERVER_BUSY"
        assert info.retry_after is not None
        assert info.retry_after > 0
        assert "backend_unavailable" in response.text
        assert "max_active" not in response.text  # no slots: no capacity figures to give
        assert _backend_errors(registry, "denied") == 1
    assert not (await guard.call("search", handler)).is_error
