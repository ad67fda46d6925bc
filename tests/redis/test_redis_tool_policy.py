"""Per-tool failure policies through one Guard on a real Redis: with Redis stopped, a fail-open
tool is admitted (and counted) while a fail-closed tool is shed with SERVER_BUSY, for the rate
limit (one backend shared by both tools) and for the fleet slots alike."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.to_thread
import pytest
from prometheus_client import CollectorRegistry

from fusion_guard import DistributedConcurrencyGuard, Guard, parse_tool_error
from redis_testserver import RedisServer

pytestmark = pytest.mark.anyio

LIMITS: dict[str, dict[str, Any]] = {
    # Only the rate limit touches Redis: both tools share the Guard's one rate backend.
    "rate": {"rate": 10_000, "max_active": None},
    # Only the fleet slots touch Redis (no rate limit).
    "slots": {"max_active": 4, "max_queue": 8},
}


def _errors(registry: CollectorRegistry, decision: str) -> float:
    labels = {"backend": "redis", "decision": decision}
    return registry.get_sample_value("fusion_guard_backend_errors_total", labels) or 0.0


async def _ok() -> str:
    return "ok"


@pytest.mark.parametrize("limited_by", sorted(LIMITS))
async def test_two_tools_with_their_own_policies_while_redis_is_down(
    redis_server: RedisServer, redis_url: str, limited_by: str
) -> None:
    registry = CollectorRegistry()
    guard = Guard(
        backend="redis",
        redis_url=redis_url,
        redis_failure_policy="open",
        redis_timeout=0.3,
        registry=registry,
        tools={"billing.*": {"failure_policy": "closed"}},
        **LIMITS[limited_by],
    )
    assert not (await guard.call("search", _ok)).is_error
    assert not (await guard.call("billing.charge", _ok)).is_error
    if limited_by == "slots":
        for tool, policy in (("search", "open"), ("billing.charge", "closed")):
            slots = guard.concurrency(tool)
            assert isinstance(slots, DistributedConcurrencyGuard)
            assert slots.failure_policy == policy

    await anyio.to_thread.run_sync(redis_server.stop)
    try:
        admitted = await guard.call("search", _ok)
        shed = await guard.call("billing.charge", _ok)
    finally:
        await anyio.to_thread.run_sync(redis_server.start)

    assert admitted.text == "ok"  # fail-open: the global policy
    assert _errors(registry, "allowed") == 1
    info = parse_tool_error(shed.text)  # fail-closed: the tool's own policy
    assert info is not None
    assert info.code == "SERVER_BUSY"
    assert info.retry_after is not None
    assert info.retry_after > 0
    assert '<detail key="reason">backend_unavailable</detail>' in shed.text
    assert _errors(registry, "denied") == 1
    # Redis is back: both tools are admitted again, with no restart.
    assert not (await guard.call("billing.charge", _ok)).is_error
    assert not (await guard.call("search", _ok)).is_error


class _RaisingObserver:
    """A user's observer that fails at every event."""

    def __getattr__(self, name: str) -> Any:
        def fail(*_: object) -> None:
            raise RuntimeError(f"observer bug in {name}")

        return fail


@pytest.mark.parametrize("policy", ["open", "closed"])
async def test_a_failing_observer_does_not_change_the_failure_policys_answer(
    policy: str,
) -> None:
    from fusion_guard import ServerBusy

    slots = DistributedConcurrencyGuard(
        2,
        redis="redis://127.0.0.1:1/0",  # nothing listens: every lease fails at once
        failure_policy=policy,  # type: ignore[arg-type]
        observer=_RaisingObserver(),  # type: ignore[arg-type]
        name="lookup",
    )
    if policy == "open":
        async with slots.slot():  # admitted unleased, despite the observer
            pass
    else:
        with pytest.raises(ServerBusy):  # the policy's refusal, not the observer's error
            async with slots.slot():
                pass
