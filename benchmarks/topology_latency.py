"""What one rate-limit decision costs a caller on each Redis topology, on loopback.

``python benchmarks/topology_latency.py`` starts a single ``redis-server``, a Redis Cluster
(3 primaries, 3 replicas) and a Sentinel set-up (1 primary, 1 replica, 3 sentinels), all on
loopback (the fixtures of ``tests/redis_cluster/topology.py``), and times, one call after another
on one client: a decision over one budget, a decision over two budgets (a per-client one and a
shared one: on a cluster they sit in two slots, so two round trips), and a ``PING`` on the same
client. Best of 5 rounds of 2,000 calls each. Needs ``redis-server`` and ``redis-cli``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "redis_cluster"))

from topology import ClusterSet, SentinelSet

from fusion_guard import RateLimit, RateLimiter, RedisRateLimitBackend
from fusion_guard.testing import RedisServer

CALLS = 2_000
ROUNDS = 5
HIGH = 1_000_000  # every decision is admitted: the cost of the round trips, not of refusals


async def _best(op: Callable[[int], Awaitable[object]]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for index in range(CALLS):
            await op(index % 1_000)
        best = min(best, (time.perf_counter() - started) / CALLS)
    return best


async def _measure(name: str, url: str) -> None:
    backend = RedisRateLimitBackend(url, timeout=1.0)
    per_client = RateLimit(HIGH, burst=HIGH, scope="client", name="bench/client")
    shared = RateLimit(HIGH, burst=HIGH, name="bench/shared")
    one = RateLimiter(limits=[per_client], backend=backend, failure_policy="raise")
    two = RateLimiter(limits=[per_client, shared], backend=backend, failure_policy="raise")
    ping = backend.connection.client.ping
    for index in range(1_000):  # connections up, scripts loaded, slot map learnt
        await two.decide(f"client-{index}")
    figures = [
        await _best(lambda index: one.decide(f"client-{index}")),
        await _best(lambda index: two.decide(f"client-{index}")),
        await _best(lambda index: ping()),
    ]
    await backend.aclose()
    one_us, two_us, ping_us = (figure * 1e6 for figure in figures)
    print(
        f"{name:<9} one budget {one_us:6.0f} us ({one_us / ping_us:4.2f}x PING)   two budgets"
        f" {two_us:6.0f} us   PING {ping_us:5.0f} us"
    )


def main() -> None:
    binary = RedisServer.find()
    if binary is None:
        sys.exit("redis-server is not installed (apt-get install redis-server)")
    with tempfile.TemporaryDirectory() as directory:
        single = RedisServer(directory)
        cluster = ClusterSet(binary, Path(directory))
        sentinel = SentinelSet(binary, Path(directory))
        try:
            for topology in (single, cluster, sentinel):
                topology.start()
            for name, url in (
                ("one node", single.url),
                ("cluster", cluster.url),
                ("sentinel", sentinel.url),
            ):
                asyncio.run(_measure(name, url))
        finally:
            for topology in (single, cluster, sentinel):
                topology.stop()


if __name__ == "__main__":
    main()
