"""A bimodal tool (a cache: most calls 1-2 ms, some 100-300 ms) at its true count: the
standing-queue limit must not read a run of its slow calls at 0.8x for sustained overload, and
must still hold the queue short under a real overload.

Poisson arrivals in virtual time (``tests/virtual_time.py``), four slots for four connections,
the default queue of such a guard (10 per slot) and a 5 s ``queue_timeout``. The same seed run
with ``standing_limit=max_queue`` (the standing limit never acts before the queue is full) says
what the queue's count alone refuses: at 0.8x the standing limit may add little to it (issue 41;
docs/concurrency-internals.md, "A bimodal tool at 0.8x").
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import anyio
import pytest

from fusion_guard import ConcurrencyGuard, ServerBusy
from virtual_time import run_virtual

BACKENDS = ["asyncio", "trio"]
SLOTS = 4
MISS = 0.15
HIT_S = (0.001, 0.002)
MISS_S = (0.100, 0.300)
MEAN = (1 - MISS) * sum(HIT_S) / 2 + MISS * sum(MISS_S) / 2
CAPACITY = SLOTS / MEAN  # about 128 calls a second
MAX_QUEUE = 10 * SLOTS


@dataclass
class Run:
    calls: int = 0
    refused: int = 0
    waits: list[float] = field(default_factory=list)  # of the calls served, after the settle

    @property
    def shed(self) -> float:
        return self.refused / self.calls


async def poisson(load: float, seconds: float, seed: int, standing_limit: int | None) -> Run:
    guard = ConcurrencyGuard(
        max_active=SLOTS, max_queue=MAX_QUEUE, queue_timeout=5.0,
        standing_limit=standing_limit, clock=anyio.current_time,
    )  # fmt: skip
    arrivals, holds = random.Random(seed), random.Random(seed + 1)
    run = Run()
    start = anyio.current_time()
    settle = start + 2.0  # a new guard's first figures are not what is judged here

    async def call() -> None:
        begun = anyio.current_time()
        low, high = MISS_S if holds.random() < MISS else HIT_S
        hold = holds.uniform(low, high)
        try:
            async with guard.slot():
                waited = anyio.current_time() - begun
                await anyio.sleep(hold)
        except ServerBusy:
            if begun >= settle:
                run.refused += 1
        else:
            if begun >= settle:
                run.waits.append(waited)

    async with anyio.create_task_group() as tg:
        at = start
        end = at + seconds
        while (at := at + arrivals.expovariate(load * CAPACITY)) < end:
            await anyio.sleep_until(at)
            run.calls += at >= settle
            tg.start_soon(call)
    return run


def both(backend: str, load: float, seconds: float, seed: int) -> tuple[Run, Run]:
    """The default standing limit, and the queue's count alone, on the same calls."""

    async def default() -> Run:
        return await poisson(load, seconds, seed, None)

    async def count_only() -> Run:
        return await poisson(load, seconds, seed, MAX_QUEUE)

    return run_virtual(default, backend), run_virtual(count_only, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", [5, 6, 7])  # (seeds 1-4 and 8 refuse nothing either way)
def test_the_standing_limit_adds_little_at_0_8x(backend: str, seed: int) -> None:
    default, count_only = both(backend, 0.8, 14.0, seed)
    assert default.calls > 1000
    assert default.shed <= count_only.shed + 0.005, (default.shed, count_only.shed)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_standing_limit_still_holds_the_queue_short_under_overload(backend: str) -> None:
    default, count_only = both(backend, 2.0, 6.0, 1)
    # Held to the standing limit (4 per slot), a served call waits about 16 openings, not 40.
    default.waits.sort()
    count_only.waits.sort()
    p90 = int(0.9 * len(default.waits))
    assert default.waits[p90] < 0.6 * count_only.waits[int(0.9 * len(count_only.waits))]
    assert default.shed >= 0.4  # half the calls are beyond capacity: refused, not queued
