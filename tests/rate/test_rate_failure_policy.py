"""A rate limiter used on its own applies a failure policy when its backend fails: its own, or
the backend's (RedisRateLimitBackend(failure_policy=...)), or it lets the error through."""

from __future__ import annotations

import socket

import pytest

from fusion_guard import (
    BackendError,
    CallContext,
    ConfigurationError,
    RateLimiter,
    RedisRateLimitBackend,
    ServerBusy,
)
from fusion_guard.testing import FailingBackend

pytestmark = pytest.mark.anyio


async def test_open_admits_the_call_when_the_backend_fails() -> None:
    limiter = RateLimiter(1, backend=FailingBackend(), failure_policy="open")
    assert await limiter.acheck(CallContext("search")) is None
    assert (await limiter.decide("k")).allowed


async def test_closed_refuses_with_server_busy_and_a_retry_after() -> None:
    limiter = RateLimiter(1, backend=FailingBackend(), failure_policy="closed")
    with pytest.raises(ServerBusy) as refused:
        await limiter.acheck(CallContext("search"))
    assert refused.value.reason == "backend_unavailable"
    assert refused.value.retry_after is not None
    assert refused.value.retry_after > 0
    assert "redis unreachable" not in refused.value.response.text  # no exception text
    decision = await limiter.decide("k")
    assert not decision.allowed
    assert decision.retry_after > 0


async def test_raise_and_a_backend_without_a_policy_let_the_error_through() -> None:
    for limiter in (
        RateLimiter(1, backend=FailingBackend()),
        RateLimiter(1, backend=FailingBackend(), failure_policy="raise"),
    ):
        assert limiter.failure_policy == "raise"
        with pytest.raises(BackendError):
            await limiter.acheck(CallContext("search"))


def _closed_port() -> int:
    with socket.socket() as probe:  # a loopback port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # redis-py's client is asyncio-only
@pytest.mark.parametrize("policy", ["open", "closed"])
async def test_the_redis_backends_failure_policy_is_the_default(policy: str) -> None:
    backend = RedisRateLimitBackend(
        f"redis://127.0.0.1:{_closed_port()}/0",
        timeout=0.05,
        connect_timeout=0.2,
        failure_policy=policy,  # type: ignore[arg-type]
    )
    limiter = RateLimiter(1, backend=backend)
    assert limiter.failure_policy == policy
    try:
        if policy == "open":
            assert await limiter.acheck(CallContext("search")) is None
        else:
            with pytest.raises(ServerBusy):
                await limiter.acheck(CallContext("search"))
    finally:
        await backend.aclose()


def test_a_bad_policy_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="failure_policy='sometimes' is invalid"):
        RateLimiter(1, failure_policy="sometimes")  # type: ignore[arg-type]
