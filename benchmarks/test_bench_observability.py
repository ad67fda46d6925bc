"""Observability figures: what metrics and logs add to a guarded call.

The uncontended ``async with guard.slot()`` with metrics on must cost at most 3x a bare
``asyncio.Semaphore`` acquire + release (docs/benchmarks.md), measured side by side in one run, with
the PrometheusObserver alone and with the default observers (metrics + sampled logs). The shed
figure shows that reporting a refusal (metrics, and a log event sampled away under a storm)
costs no more than the refusal itself (docs/observability.md: logging never costs more than the
shedding it reports).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry
from pytest_benchmark.fixture import BenchmarkFixture

from bench_support import Figures, async_batch
from fusion_guard import ConcurrencyGuard, GuardSettings, PrometheusObserver, ServerBusy
from fusion_guard._observer import ToolObserver
from fusion_guard.observability._defaults import default_observers

OPS = 5_000
ROUNDS = 15


def slot_op(observer: ToolObserver | None) -> Callable[[], Awaitable[None]]:
    guard = ConcurrencyGuard(max_active=4, name="bench", observer=observer)

    async def op() -> None:
        async with guard.slot():
            pass

    return op


def shed_op(observer: ToolObserver | None) -> Callable[[], Awaitable[None]]:
    guard = ConcurrencyGuard(max_active=1, max_queue=0, name="bench", observer=observer)
    guard.acquire_nowait()  # held for good: every call is refused

    async def op() -> None:
        try:
            async with guard.slot():
                pass  # pragma: no cover
        except ServerBusy:
            pass

    return op


def semaphore_op() -> Callable[[], Awaitable[None]]:
    semaphore = asyncio.Semaphore(4)

    async def op() -> None:
        async with semaphore:
            pass

    return op


def metrics_observer() -> ToolObserver:
    return PrometheusObserver(CollectorRegistry()).for_tool("bench", max_active=4)


def default_observer() -> ToolObserver:
    (observer,) = default_observers(GuardSettings.from_values(), CollectorRegistry())
    return observer.for_tool("bench", max_active=4)


def run_once(op: Callable[[], Awaitable[None]]) -> Callable[[], float]:
    """One batch of 100 calls as a synchronous function, for pytest-benchmark's own timing."""
    return functools.partial(async_batch(op), 100)


@pytest.fixture
def quiet_logs() -> Iterator[None]:
    """Sheds logged at WARNING, as in production, into a handler that drops them: what is
    measured is the sampling and the emitted events, not a terminal."""
    logger = logging.getLogger("fusion_guard")
    handler = logging.NullHandler()
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    yield
    logger.propagate = propagate
    logger.removeHandler(handler)


def figure(
    figures: Figures,
    benchmark: BenchmarkFixture,
    name: str,
    ours: Callable[[], Awaitable[None]],
    baseline: Callable[[], Awaitable[None]],
    limit: float,
) -> None:
    """Measure ``ours`` against ``baseline`` side by side, then let pytest-benchmark time it."""
    candidate_s, baseline_s = figures.time_batches(
        async_batch(ours), async_batch(baseline), ops=OPS, rounds=ROUNDS
    )
    figures.at_most(name, candidate_s, baseline_s, limit)
    benchmark(run_once(ours))


def test_figure_slot_with_metrics_vs_semaphore(
    figures: Figures, benchmark: BenchmarkFixture
) -> None:
    name = "guard.slot() uncontended, metrics on vs asyncio.Semaphore"
    figure(figures, benchmark, name, slot_op(metrics_observer()), semaphore_op(), 3)


def test_figure_slot_with_default_observers_vs_semaphore(
    figures: Figures, benchmark: BenchmarkFixture, quiet_logs: None
) -> None:
    name = "guard.slot() uncontended, metrics + logs vs asyncio.Semaphore"
    figure(figures, benchmark, name, slot_op(default_observer()), semaphore_op(), 3)


def test_figure_metrics_add_little_to_the_slot(
    figures: Figures, benchmark: BenchmarkFixture
) -> None:
    name = "guard.slot() uncontended, metrics on vs metrics off"
    figure(figures, benchmark, name, slot_op(metrics_observer()), slot_op(None), 1.5)


def test_figure_reporting_a_shed_vs_the_shed_itself(
    figures: Figures, benchmark: BenchmarkFixture, quiet_logs: None
) -> None:
    # At most 2x: reporting a refusal (metrics and log) costs no more than the refusal itself.
    name = "shed, metrics + sampled logs vs shed unobserved"
    figure(figures, benchmark, name, shed_op(default_observer()), shed_op(None), 2)
