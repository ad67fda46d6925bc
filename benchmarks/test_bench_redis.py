"""A Redis rate-limit decision against a PING on the same connection, and against the ``limits``
library's Redis moving-window limiter, in the same run on the same ``redis-server``.

A decision is one ``EVALSHA`` round trip (the GCRA script reads the server's clock, decides and
records), so it should cost about what any one-command round trip costs: the target is at most
1.3x a ``PING``. Every call is admitted (the limits are far above the rate reached), keys cycle
over 1,000 clients, and everything runs in one event loop (redis-py connections are bound to it).

A fleet slot's Redis work (acquire, then release: two scripts, two round trips) is set against
two PINGs on the same connection: the lease scripts' bookkeeping (purging expired holders, the
checks that keep a lease from outliving its call) should cost little next to the round trips,
at most 1.5x (the acquire reads three keys and sends five arguments; a PING sends none).
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from limits import RateLimitItemPerSecond
from limits.aio.storage import RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter

from bench_support import Figures, async_batch
from fusion_guard import RateLimiter, RedisRateLimitBackend
from fusion_guard.backends._redis_lease import FleetSemaphore
from fusion_guard.testing import RedisServer

CLIENTS = [f"client-{i}" for i in range(1_000)]
OPS = 1_000
ROUNDS = 15


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if RedisServer.find() is None:
        reason = "redis-server is not installed (apt-get install redis-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true requires it")
        pytest.skip(reason)
    with RedisServer(Path(tmp_path_factory.mktemp("bench-redis"))) as server:
        yield server


@pytest.fixture
def event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _cycling(op: Callable[[str], Awaitable[object]]) -> Callable[[], Awaitable[object]]:
    keys = itertools.cycle(CLIENTS)
    return lambda: op(next(keys))


def test_redis_decision_vs_ping_and_limits_moving_window(
    benchmark: pytest.FixtureRequest,
    figures: Figures,
    redis_server: RedisServer,
    event_loop: asyncio.AbstractEventLoop,
) -> None:
    backend = RedisRateLimitBackend(redis_server.url, timeout=1.0)
    ours = RateLimiter(1_000_000, per=1.0, burst=1_000_000, scope="client", backend=backend)
    storage = RedisStorage(f"async+{redis_server.url}", implementation="redispy")
    theirs, item = MovingWindowRateLimiter(storage), RateLimitItemPerSecond(1_000_000)
    decide = _cycling(ours.decide)
    ping = backend.connection.client.ping
    limits_hit = _cycling(lambda key: theirs.hit(item, key))
    for op in (decide, ping, limits_hit):  # connect and load the scripts before timing
        event_loop.run_until_complete(op())

    run = event_loop.run_until_complete
    candidate, baseline = figures.time_batches(
        async_batch(decide, event_loop=event_loop),
        async_batch(ping, event_loop=event_loop),
        ops=OPS,
        rounds=ROUNDS,
    )
    figures.at_most("rate decision (Redis) vs PING, same connection", candidate, baseline, 1.3)
    candidate, baseline = figures.time_batches(
        async_batch(decide, event_loop=event_loop),
        async_batch(limits_hit, event_loop=event_loop),
        ops=OPS,
        rounds=ROUNDS,
    )
    name = "rate decision (Redis) vs limits moving window (Redis)"
    figures.faster_by(name, candidate, baseline, 1)
    benchmark(lambda: run(decide()))
    run(backend.aclose())


def test_fleet_lease_vs_two_pings(
    figures: Figures, redis_server: RedisServer, event_loop: asyncio.AbstractEventLoop
) -> None:
    backend = RedisRateLimitBackend(redis_server.url, timeout=1.0)
    semaphore = FleetSemaphore(backend.connection, "bench", limit=1_000, lease=10.0)
    client = backend.connection.client

    async def lease() -> None:
        grant = await semaphore.try_acquire()
        assert grant.holder is not None
        await semaphore.release(grant.holder)

    async def two_pings() -> None:
        await client.ping()
        await client.ping()

    run = event_loop.run_until_complete
    run(lease())  # connect and load the scripts before timing
    candidate, baseline = figures.time_batches(
        async_batch(lease, event_loop=event_loop),
        async_batch(two_pings, event_loop=event_loop),
        ops=OPS,
        rounds=ROUNDS,
    )
    figures.at_most("fleet slot lease (acquire + release) vs two PINGs", candidate, baseline, 1.5)
    run(backend.aclose())
