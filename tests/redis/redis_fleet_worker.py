"""One replica of a fleet, run as a separate process by the Redis fleet tests.

    python redis_fleet_worker.py rate URL START_AT SECONDS RATE BURST
    python redis_fleet_worker.py concurrency URL START_AT SECONDS MAX_ACTIVE TASKS HOLD
    python redis_fleet_worker.py adaptive URL START_AT SECONDS MAX_ACTIVE TASKS HOLD
    python redis_fleet_worker.py hold URL PERMITS LEASE
    python redis_fleet_worker.py chaos URL START_AT SECONDS MAX_ACTIVE TASKS HOLD TIMEOUT

``START_AT`` is a ``time.monotonic()`` instant (the clock is system-wide on Linux) so every
replica starts its load at once. Results are one JSON line on stdout; ``hold`` prints ``ready``
once it holds its permits, then sleeps until it is killed. ``adaptive`` is ``concurrency`` with
this process's slots following a ``GradientLimit`` inside the fleet's cap, and also reports the
local limits it saw. ``chaos`` (fail-closed) reports when
each of its calls ran, ``[entered, left]``, for the parent to count the fleet's running calls.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from fusion_guard import (
    CallContext,
    DistributedConcurrencyGuard,
    GradientLimit,
    RateLimiter,
    RateLimits,
    RedisRateLimitBackend,
    ServerBusy,
)

TIMEOUT = 1.0  # generous: the machine is shared and these processes compete for its cores


async def _wait_until(instant: float) -> None:
    await asyncio.sleep(max(0.0, instant - time.monotonic()))


async def rate(url: str, start_at: float, seconds: float, per_second: float, burst: int) -> None:
    backend = RedisRateLimitBackend(url, timeout=TIMEOUT)
    limits = RateLimits([RateLimiter(per_second, 1.0, burst, name="fleet")], backend=backend)
    ctx = CallContext(tool="fleet.tool")
    admitted: list[float] = []
    attempts = 0
    await _wait_until(start_at)
    deadline = start_at + seconds
    while time.monotonic() < deadline:
        attempts += 1
        if await limits.acheck(ctx) is None:
            admitted.append(time.monotonic())
        await asyncio.sleep(0.002)
    await backend.aclose()
    print(json.dumps({"admitted": admitted, "attempts": attempts}))


async def concurrency(
    url: str,
    start_at: float,
    seconds: float,
    max_active: int,
    tasks: int,
    hold: float,
    adaptive: bool = False,
) -> None:
    # Started at one slot: calls as fast at any count make the limit grow (to the cap), so the
    # limits a process reports show it moving.
    limit = GradientLimit(max_limit=max_active, initial_limit=1) if adaptive else None
    guard = DistributedConcurrencyGuard(
        max_active,
        max_queue=tasks,
        queue_timeout=0.5,
        redis=url,
        name="fleet",
        timeout=TIMEOUT,
        limit=limit,
    )
    counts = {"ok": 0, "shed": 0}
    limits: set[int] = set()
    deadline = start_at + seconds

    async def caller() -> None:
        while time.monotonic() < deadline:
            try:
                async with guard.slot():
                    limits.add(guard.limit)
                    await asyncio.sleep(hold)
                counts["ok"] += 1
            except ServerBusy:
                counts["shed"] += 1
                await asyncio.sleep(0.005)

    await _wait_until(start_at)
    began = time.monotonic()  # later than start_at when a loaded machine was slow to import
    await asyncio.gather(*(caller() for _ in range(tasks)))
    print(
        json.dumps(
            {**counts, "limits": sorted(limits), "fleet": guard.fleet_max_active, "began": began}
        )
    )


async def chaos(
    url: str,
    start_at: float,
    seconds: float,
    max_active: int,
    tasks: int,
    hold: float,
    redis_timeout: float,
) -> None:
    guard = DistributedConcurrencyGuard(
        max_active,
        max_queue=tasks,
        queue_timeout=0.5,
        redis=url,
        name="chaos",
        timeout=redis_timeout,
        failure_policy="closed",
    )
    ran: list[tuple[float, float]] = []
    shed = 0
    deadline = start_at + seconds

    async def caller() -> None:
        nonlocal shed
        while time.monotonic() < deadline:
            try:
                async with guard.slot():
                    entered = time.monotonic()
                    await asyncio.sleep(hold)
                    ran.append((entered, time.monotonic()))
            except ServerBusy:
                shed += 1
                await asyncio.sleep(0.01)

    await _wait_until(start_at)
    await asyncio.gather(*(caller() for _ in range(tasks)))
    print(json.dumps({"ran": ran, "shed": shed}))


async def hold(url: str, permits: int, lease: float) -> None:
    guard = DistributedConcurrencyGuard(
        permits, redis=url, name="crash", lease=lease, timeout=TIMEOUT
    )
    slots = [guard.slot() for _ in range(permits)]
    for slot in slots:
        await slot.__aenter__()
    print("ready", flush=True)
    await asyncio.sleep(3600)


def main(argv: list[str]) -> None:
    mode, url, *rest = argv
    if mode == "rate":
        start_at, seconds, per_second, burst = rest
        coro = rate(url, float(start_at), float(seconds), float(per_second), int(burst))
    elif mode in ("concurrency", "adaptive"):
        start_at, seconds, max_active, tasks, held = rest
        coro = concurrency(
            url,
            float(start_at),
            float(seconds),
            int(max_active),
            int(tasks),
            float(held),
            adaptive=mode == "adaptive",
        )
    elif mode == "chaos":
        start_at, seconds, max_active, tasks, held, timeout = rest
        coro = chaos(
            url,
            float(start_at),
            float(seconds),
            int(max_active),
            int(tasks),
            float(held),
            float(timeout),
        )
    else:
        permits, lease = rest
        coro = hold(url, int(permits), float(lease))
    asyncio.run(coro)


if __name__ == "__main__":
    main(sys.argv[1:])
