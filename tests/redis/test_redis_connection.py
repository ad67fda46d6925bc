"""The one boundary to Redis: timeouts, error translation, scripts after a restart, trio."""

from __future__ import annotations

import logging
import math
import os
import signal
import time

import pytest
import redis.asyncio
import redis.exceptions
import trio

from fusion_guard import (
    BackendError,
    CallContext,
    ConfigurationError,
    RateLimiter,
    RedisRateLimitBackend,
)
from fusion_guard.backends._redis import RedisConnection
from fusion_guard.backends._redis_lease import FleetSemaphore
from redis_testserver import RedisServer

pytestmark = pytest.mark.anyio

SECOND_US = 1_000_000


async def _gcra(conn: RedisConnection, *limits: tuple[str, int, int]) -> list[int]:
    # Two keys per limit: its TAT and its promise cursor (gcra.lua).
    keys = [conn.key_prefix + key + part for key, _, _ in limits for part in ("", ":p")]
    args: list[str | int] = []
    for _, interval, tolerance in limits:
        args += [interval, tolerance]
    reply = int(await conn.run(conn.scripts["gcra"], keys, args))
    if reply == 0:
        return [1, 0, 0]
    wait_us, index = divmod(reply, 64)  # gcra.lua: retry_after * 64 + index
    return [0, wait_us, index]


async def test_gcra_burst_then_exact_retry_after(redis_url: str) -> None:
    conn = RedisConnection(redis_url, timeout=1.0)
    # 1 call per second, burst 3: tolerance = 2 intervals.
    replies = [await _gcra(conn, ("a", SECOND_US, 2 * SECOND_US)) for _ in range(4)]
    assert [r[0] for r in replies] == [1, 1, 1, 0]
    _, retry_after_us, index = replies[3]
    # Exactly one interval after the first call, minus the few microseconds that have passed.
    assert SECOND_US - 200_000 < retry_after_us <= SECOND_US
    assert index == 1
    await conn.aclose()


async def test_gcra_refusal_spends_no_other_budget(redis_url: str) -> None:
    conn = RedisConnection(redis_url, timeout=1.0)
    # The wide budget's key lives as long as its TAT is ahead (10 s): a 1 ms interval let it
    # expire between the two calls on a slow machine.
    wide = ("wide", 10 * SECOND_US, 100 * SECOND_US)
    assert (await _gcra(conn, wide, ("narrow", SECOND_US, 0)))[0]
    before = await conn.client.get(conn.key_prefix + "wide")
    refused = await _gcra(conn, wide, ("narrow", SECOND_US, 0))
    assert refused[0] == 0
    assert refused[2] == 2  # the narrow limit refused
    assert await conn.client.get(conn.key_prefix + "wide") == before
    await conn.aclose()


async def test_gcra_keys_expire_when_full_again(redis_url: str) -> None:
    conn = RedisConnection(redis_url, timeout=1.0)
    await _gcra(conn, ("idle", 2 * SECOND_US, 0))  # 2 s: a loaded machine's look still finds it
    ttl_ms = await conn.client.pttl(conn.key_prefix + "idle")
    assert 0 < ttl_ms <= 2000
    await conn.aclose()


async def test_all_keys_share_one_hash_tag(redis_url: str) -> None:
    conn = RedisConnection(redis_url, timeout=1.0, prefix="fleet-a")
    sem = FleetSemaphore(conn, "tool", limit=1, lease=1.0)
    assert sem.key.startswith("{fleet-a}:")
    assert conn.key_prefix == "{fleet-a}:"
    await conn.aclose()


async def test_scripts_are_registered_again_after_a_restart(
    redis_server: RedisServer, redis_url: str
) -> None:
    conn = RedisConnection(redis_url, timeout=1.0)
    assert (await _gcra(conn, ("k", SECOND_US, 0)))[0] == 1
    redis_server.stop()
    redis_server.start()  # empty: no keys, no scripts
    # The pooled connection is dead and the script unknown: one call still succeeds.
    assert (await _gcra(conn, ("k", SECOND_US, 0)))[0] == 1
    await conn.aclose()


async def test_stopped_redis_is_a_backend_error_with_cause(
    redis_server: RedisServer, redis_url: str
) -> None:
    conn = RedisConnection(redis_url, timeout=0.2)
    redis_server.stop()
    try:
        with pytest.raises(BackendError) as caught:
            await _gcra(conn, ("k", SECOND_US, 0))
        assert caught.value.__cause__ is not None
    finally:
        redis_server.start()
    await conn.aclose()


class _ClientWithABug(redis.asyncio.Redis):
    """Fails as redis-py 8.0's cluster client did on a connection closed under it in a
    failover: not a RedisError."""

    async def execute_command(self, *args: object, **options: object) -> object:
        raise AttributeError("'NoneType' object has no attribute 'writelines'")


async def test_any_failure_of_the_client_is_an_outage_not_a_crash(redis_url: str) -> None:
    backend = RedisRateLimitBackend(_ClientWithABug.from_url(redis_url))
    closed = RateLimiter(5, backend=backend, failure_policy="closed")
    decision = await closed.decide("k")  # the failure policy answers
    assert not decision.allowed
    assert decision.retry_after > 0
    with pytest.raises(BackendError, match="AttributeError") as caught:
        await RateLimiter(5, backend=backend, failure_policy="raise").decide("k")
    assert isinstance(caught.value.__cause__, AttributeError)
    await backend.aclose()


@pytest.mark.parametrize("ready_made", [False, True], ids=["url-client", "ready-made-client"])
async def test_a_hung_redis_never_hangs_the_caller(
    redis_server: RedisServer, redis_url: str, ready_made: bool
) -> None:
    # A client made from the URL is bounded by its socket timeouts (redis-py's TimeoutError);
    # a ready-made one, here without any timeout of its own, by an asyncio.timeout.
    target = redis.asyncio.Redis.from_url(redis_url) if ready_made else redis_url
    timeout_error = TimeoutError if ready_made else redis.exceptions.TimeoutError
    conn = RedisConnection(target, timeout=0.1)
    assert (await _gcra(conn, ("k", SECOND_US, 0)))[0] == 1
    os.kill(redis_server.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(BackendError) as caught:
            await _gcra(conn, ("k", SECOND_US, 0))
        # Its 0.1 s, with room for a loaded machine: unbounded, the call would hang for ever.
        assert time.monotonic() - start < 1.0
        assert isinstance(caught.value.__cause__, timeout_error)
        # asyncio's TimeoutError has no message: the error still says what happened.
        assert str(caught.value).endswith(("timed out", f"127.0.0.1:{redis_server.port}"))
    finally:
        os.kill(redis_server.pid, signal.SIGCONT)
    # Recovers by itself once Redis answers again.
    assert (await _gcra(conn, ("other", SECOND_US, 0)))[0] == 1
    await conn.aclose()


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"timeout": 0}, "timeout=0 is invalid: expected a positive number of seconds"),
        ({"timeout": math.nan}, "timeout=nan is invalid: expected a positive number of seconds"),
        ({"timeout": math.inf}, "timeout=inf is invalid: expected a positive number of seconds"),
        ({"timeout": True}, "timeout=True is invalid: expected a positive number of seconds"),
        ({"prefix": "a{b}"}, "prefix='a{b}' is invalid"),
        ({"prefix": ""}, "prefix='' is invalid"),
    ],
)
def test_bad_configuration_is_a_clear_error(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        RedisConnection("redis://127.0.0.1:1/0", **kwargs)  # type: ignore[arg-type]
    assert fragment in str(caught.value)


def test_bad_url_is_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="redis_url='http://x'"):
        RedisConnection("http://x")


@pytest.mark.parametrize(
    "url",
    [
        "redis://:hunter2@127.0.0.1:abc/0",
        "redis://user:hunter2@127.0.0.1:99999/0",
        "redis://:hunter2/x@127.0.0.1:6379/0",  # the parser reads 'hunter2' as the port
        "redis://127.0.0.1:abc/0?password=hunter2",
    ],
)
def test_a_bad_url_error_never_shows_the_password(url: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        RedisConnection(url)
    assert "hunter2" not in str(caught.value)
    assert "127.0.0.1" in str(caught.value)
    assert "***" in str(caught.value)


def test_the_backend_repr_shows_host_and_port_but_not_the_password() -> None:
    backend = RedisRateLimitBackend("redis://:hunter2@127.0.0.1:6380/0?password=hunter3")
    text = repr(backend)
    assert "127.0.0.1:6380" in text
    assert "hunter2" not in text
    assert "hunter3" not in text


async def test_a_failing_url_logs_host_and_port_but_not_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Valid, but nothing listens there: every decision fails, the backend's policy (open)
    # admits the call and logs the failure, and the error itself names no secret either.
    backend = RedisRateLimitBackend("redis://:hunter2@127.0.0.1:1/0?password=hunter3")
    with caplog.at_level(logging.WARNING, logger="fusion_guard"):
        assert await RateLimiter(5, backend=backend).acheck(CallContext(tool="t")) is None
    raising = RateLimiter(5, backend=backend, failure_policy="raise")
    with pytest.raises(BackendError) as caught:
        await raising.acheck(CallContext(tool="t"))
    logged = caplog.text + str(caught.value)
    assert "backend_error" in logged
    assert "127.0.0.1:1" in logged
    assert "hunter2" not in logged
    assert "hunter3" not in logged
    await backend.aclose()


def test_a_target_of_the_wrong_type_is_not_echoed() -> None:
    with pytest.raises(ConfigurationError, match=r"redis \(a dict\) is invalid") as caught:
        RedisConnection({"password": "hunter2"})  # type: ignore[arg-type]
    assert "hunter2" not in str(caught.value)


def test_under_trio_the_error_says_asyncio_is_needed() -> None:
    conn = RedisConnection("redis://127.0.0.1:1/0")

    async def main() -> None:
        await _gcra(conn, ("k", SECOND_US, 0))

    with pytest.raises(ConfigurationError, match="needs asyncio"):
        trio.run(main)
