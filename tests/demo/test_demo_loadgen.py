"""The open-loop Poisson load generator of the overload demo."""

from __future__ import annotations

import itertools
import random
import statistics

import anyio
import pytest

from fusion_guard.demo._loadgen import CallRecord, Outcome, poisson_arrivals, run_open_loop
from virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

# Virtual time: the client's 50 ms timeout is exact, whatever else the machine is doing.
anyio_backend = virtual_time_backends()


def test_poisson_rate_and_exponential_gaps() -> None:
    rate, duration = 200.0, 100.0
    times = poisson_arrivals(rate, 5.0, duration, random.Random(7))
    expected = rate * duration
    # Poisson count: standard deviation sqrt(expected) ~ 141; allow 4 sigma.
    assert abs(len(times) - expected) < 4 * expected**0.5
    assert all(5.0 <= t < 5.0 + duration for t in times)
    assert times == sorted(times)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # Exponential inter-arrival times: mean 1/rate and coefficient of variation 1.
    assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=0.05)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, rel=0.05)


def test_same_seed_same_arrivals() -> None:
    a = poisson_arrivals(50.0, 0.0, 10.0, random.Random(3))
    b = poisson_arrivals(50.0, 0.0, 10.0, random.Random(3))
    assert a == b
    assert a != poisson_arrivals(50.0, 0.0, 10.0, random.Random(4))


async def test_arrivals_do_not_wait_for_answers() -> None:
    release = anyio.Event()
    started: list[float] = []
    records: list[CallRecord] = []
    now = anyio.current_time()
    arrivals = [now + 0.01 * i for i in range(20)]

    async def blocked_call(index: int) -> Outcome:
        started.append(anyio.current_time())
        if len(started) == len(arrivals):
            release.set()
        await release.wait()
        return "ok"

    await run_open_loop(arrivals, blocked_call, client_timeout=5.0, records=records)
    # Every call was started although none had answered before the last one was sent.
    assert len(started) == len(arrivals)
    assert len(records) == len(arrivals)
    assert all(r.outcome == "ok" for r in records)
    # Each call was sent at (not before) its intended time.
    for intended, actual in zip(arrivals, sorted(started), strict=True):
        assert actual >= intended - 1e-3


async def test_each_call_is_told_its_arrival() -> None:
    # What lets a demo give each call its own work, the same under every policy.
    records: list[CallRecord] = []
    now = anyio.current_time()
    arrivals = [now + 0.002 * i for i in range(8)]
    told: dict[int, float] = {}

    async def call(index: int) -> Outcome:
        told[index] = anyio.current_time()
        return "ok"

    await run_open_loop(arrivals, call, client_timeout=5.0, records=records)
    assert sorted(told) == list(range(len(arrivals)))
    for index, started in told.items():
        assert started >= arrivals[index] - 1e-3  # not sent before its own arrival
    assert sorted(r.intended for r in records) == arrivals


async def test_latency_counts_from_intended_time() -> None:
    records: list[CallRecord] = []
    now = anyio.current_time()
    # The generator is 0.2 s behind schedule for these calls: the lateness is latency too.
    late = [now - 0.2] * 3

    async def quick_call(index: int) -> Outcome:
        return "ok"

    await run_open_loop(late, quick_call, client_timeout=5.0, records=records)
    assert [r.outcome for r in records] == ["ok"] * 3
    assert all(r.latency >= 0.2 for r in records)


async def test_client_gives_up_at_timeout() -> None:
    records: list[CallRecord] = []
    now = anyio.current_time()

    async def hung_call(index: int) -> Outcome:
        await anyio.sleep_forever()
        return "ok"

    await run_open_loop([now, now], hung_call, client_timeout=0.05, records=records)
    assert [r.outcome for r in records] == ["timeout", "timeout"]
    assert [r.latency for r in records] == [pytest.approx(0.05, abs=1e-6)] * 2
