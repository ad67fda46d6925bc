"""GradientLimit on a slow tool (calls of seconds, as an LLM-backed tool), with plain numbers:
its warm-up and windows count calls in proportion to how long they take, so a tool that
answers two calls a second is served at its parallelism within tens of seconds, not minutes; a
fast tool's counts are unchanged."""

from __future__ import annotations

import heapq
import random

import pytest

from fusion_guard.admission._adaptive import GradientLimit
from fusion_guard.admission._adaptive_tuning import (
    FIRST_PROBE_SAMPLES,
    SLOW_START,
    SLOW_WINDOW_SAMPLES,
)


def _quiet_calls(limit: GradientLimit, count: int, service: float, now: float = 0.0) -> float:
    """``count`` calls of ``service`` seconds, one at a time (each quiet)."""
    for _ in range(count):
        limit.on_sample(now, service, 1, False)
        now += service
    return now


@pytest.mark.parametrize(("service", "needed"), [(3.0, 10), (0.2, 15), (0.02, FIRST_PROBE_SAMPLES)])
def test_the_first_baseline_needs_fewer_calls_the_longer_each_takes(
    service: float, needed: int
) -> None:
    # The first baseline rests on FIRST_SAMPLES x window seconds of quiet calls (3 s by
    # default), never fewer than probe_samples calls: 10 calls of 3 s, 15 of 0.2 s, and for a
    # tool faster than the window FIRST_SAMPLES calls, or FIRST_PROBE_SAMPLES when they are
    # steady (within 1.5x of one another), as these are.
    limit = GradientLimit()
    _quiet_calls(limit, needed - 1, service)
    assert limit.baseline == pytest.approx(service)
    limit.on_sample(1000.0, service, 4, False)  # crowded, it does not count
    assert limit.parallelism == 2  # not measured yet: the initial guess
    _quiet_calls(limit, 1, service, now=2000.0)
    # Measured: the next window decides, so full windows of uncrowded calls at the limit grow it.
    now = 3000.0
    for _ in range(40):
        limit.on_sample(now, service, limit.limit, False)
        now += service
    assert limit.limit > 4


def _window_at_limit(limit: GradientLimit, calls: int, service: float, now: float) -> float:
    for _ in range(calls):
        limit.on_sample(now, service, limit.limit, False)
        now += service / limit.limit
    return now


def test_a_slow_tools_window_closes_after_a_few_calls() -> None:
    limit = GradientLimit()
    now = _quiet_calls(limit, 10, 3.0)
    before = limit.limit
    now = _window_at_limit(limit, SLOW_WINDOW_SAMPLES - 1, 3.0, now)
    assert limit.limit == before  # one call short of a window
    _window_at_limit(limit, 1, 3.0, now)
    assert limit.limit == before + 1  # uncrowded at the limit: one slot more


def test_a_fast_tools_window_still_needs_window_samples() -> None:
    limit = GradientLimit()
    now = _quiet_calls(limit, FIRST_PROBE_SAMPLES, 0.02)  # steady: the first baseline
    before = limit.limit
    # Fewer calls than the short growth window (5 per slot) and a full one (20): for calls of
    # 20 ms, SLOW_WINDOW_SAMPLES of them close no window, however long they are spread.
    for _ in range(SLOW_WINDOW_SAMPLES + 1):
        limit.on_sample(now, 0.02, limit.limit, False)
        now += 0.5  # long past the window's 0.1 s
    assert limit.limit == before


def test_an_uncrowded_windows_parallelism_is_taken_at_once() -> None:
    # A window at six slots, every call as fast as uncrowded: the tool serves six at once, and
    # the estimate says so at once (the slots in force under overload rest on it), not by a
    # share of the difference a window, which never reaches the slots in force.
    # (In the slow start, as here, read as SLOW_START times that.)
    limit = GradientLimit(initial_limit=6)
    now = _quiet_calls(limit, 10, 3.0)
    _window_at_limit(limit, SLOW_WINDOW_SAMPLES, 3.0, now)
    assert limit.parallelism == pytest.approx(SLOW_START * 6.0)


def test_a_slow_tools_slow_start_lasts_until_a_window_queues_beyond_the_noise() -> None:
    """While its windows are as fast as its quiet calls within the noise of both medians, a
    slow tool is read as serving SLOW_START times the calls in flight (its slots under
    overload climb by a share a window); the first window slower than that ends it, and from
    then on a window reads as measured, the crowd scaled by baseline over median."""
    limit = GradientLimit(initial_limit=6)
    rng = random.Random(3)
    now = 0.0
    for _ in range(20):  # quiet calls of 2-4 s: a baseline near 3 s, of some spread
        duration = rng.uniform(2.0, 4.0)
        limit.on_sample(now, duration, 1, False)
        now += duration
    assert limit.parallelism == pytest.approx(SLOW_START * 1.0)  # lone calls, no queueing
    # A window at the limit whose calls are within the quiet calls' spread: still starting.
    for duration in (2.5, 3.0, 3.5, 2.8, 3.2):
        limit.on_sample(now, duration, 6, False)
        now += 0.5
    assert limit.parallelism == pytest.approx(SLOW_START * 6.0)
    # A window twice as slow as any quiet call queued inside the tool: the start is over, and
    # the tool reads as serving about half the calls in flight (3 s over 8 s of six).
    limit.on_sample(now, 8.0, 6, False)
    for _ in range(SLOW_WINDOW_SAMPLES - 1):
        now += 0.5
        limit.on_sample(now, 8.0, 6, False)
    assert limit.parallelism == pytest.approx(6 * limit.baseline / 8.0, rel=0.01)
    assert limit.parallelism < 6.0


@pytest.mark.parametrize(
    ("service", "first", "measured"),
    [(3.0, 5.0, SLOW_START * 1.0), (0.2, 3.0, 1.0), (0.02, 3.0, 3.0)],
)
def test_a_slow_tools_unmeasured_parallelism_holds_no_slot_of_the_limit(
    service: float, first: float, measured: float
) -> None:
    """Before a window has measured it, the parallelism is a guess (the initial limit over the
    tolerance): a slow tool's warm-up, held to it and one under overload, took 56 s, not 16 s,
    to gather its first baseline at 0.8x of 8 workers. So a slow tool's reads the limit less one
    (the slots under overload are the limit) until a window measures it; a fast tool's, whose
    first window comes within a second, is the guess as before."""
    limit = GradientLimit(initial_limit=6)
    limit.on_sample(0.0, service, 1, False)  # a quiet call of the warm-up
    assert limit.parallelism == first  # a slow tool's (3 s calls): 5, else the guess, 3
    _quiet_calls(limit, 30, service, now=service)
    assert limit.limit == 6
    # Windows of lone calls measured it (one at a time; the 3 s tool's in its slow start), once
    # they amounted to a full window's service: 30 calls of 3 s or 0.2 s did, 30 of 20 ms not
    # yet (still the guess).
    assert limit.parallelism == measured


def _serve(workers: int, low: float, high: float, seconds: float, seed: int) -> list[int]:
    """A slow tool of ``workers`` FIFO workers (uniform ``low``-``high`` s a call, the rest
    waiting inside), always offered more than the limit admits; the limit in force at each
    whole second."""
    rng = random.Random(seed)
    limit = GradientLimit()
    free = [0.0] * workers  # when each worker is next free
    running: list[tuple[float, int, float, int]] = []  # (end, admitted #, start, in flight)
    admitted = 0
    order: list[int] = []  # admitted numbers of the calls in flight, in admission order
    now = 0.0
    limits = []
    while now < seconds:
        while len(running) < limit.limit:  # fill the slots
            worker = min(range(workers), key=free.__getitem__)
            begin = max(now, free[worker])
            free[worker] = begin + rng.uniform(low, high)
            heapq.heappush(running, (free[worker], admitted, now, len(running) + 1))
            order.append(admitted)
            admitted += 1
        end, number, start, inflight = heapq.heappop(running)
        while len(limits) < int(end) and len(limits) < seconds:
            limits.append(limit.limit)
        now = end
        overtook = order.index(number)
        order.remove(number)
        limit.on_sample(start, end - start, inflight, False, overtook=overtook)
    return limits


@pytest.mark.parametrize(("workers", "low", "high"), [(8, 1.0, 5.0), (4, 1.0, 5.0), (16, 0.5, 2.0)])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_slow_tool_is_given_its_parallelism_within_a_minute(
    workers: int, low: float, high: float, seed: int
) -> None:
    limits = _serve(workers, low, high, 120.0, seed)
    # Within 60 s (20-40 calls' time) the limit reaches the workers, and it stays there or
    # above (it runs up to twice them: headroom), never running away.
    assert max(limits[:60]) >= workers
    assert min(limits[60:]) >= workers
    assert max(limits) <= 3 * workers
