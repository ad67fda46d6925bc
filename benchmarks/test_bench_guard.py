"""What ``Guard.call`` adds to a tool call, against hand-written equivalents in the same run.

The handler does nothing, so the figures are the guard's whole per-call cost: policy look-up,
ticket, rate/slot/deadline, normalisation into a ``ToolResponse`` and the observer calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio
import pytest
from prometheus_client import CollectorRegistry

from bench_support import Figures, async_batch
from fusion_guard import Guard

OPS = 5_000
ROUNDS = 10


async def handler() -> str:
    return "ok"


def _semaphore_section() -> Callable[[], Awaitable[object]]:
    semaphore = asyncio.Semaphore(10)

    async def section() -> object:
        async with semaphore:
            return await handler()

    return section


def _semaphore_with_deadline() -> Callable[[], Awaitable[object]]:
    semaphore = asyncio.Semaphore(10)

    async def section() -> object:
        async with semaphore:
            with anyio.fail_after(50):
                return await handler()

    return section


def _run(benchmark: pytest.FixtureRequest, op: Callable[[], Awaitable[object]]) -> None:
    # pytest-benchmark's own record: 1,000 calls per round, in one event loop.
    benchmark(async_batch(op), 1_000)


@pytest.mark.parametrize(
    ("name", "limits", "target"),
    [
        ("tool with no limits", {"max_active": "off", "timeout": "off"}, 3.5),
        ("slot, no deadline", {"timeout": "off"}, 5),
    ],
)
def test_guard_call_vs_semaphore(
    benchmark: pytest.FixtureRequest,
    figures: Figures,
    name: str,
    limits: dict[str, object],
    target: float,
) -> None:
    guard = Guard(metrics=False, tools={"billing.pay": limits})

    def call() -> Awaitable[object]:
        return guard.call("billing.pay", handler)

    candidate, baseline = figures.time_batches(
        async_batch(call), async_batch(_semaphore_section()), ops=OPS, rounds=ROUNDS
    )
    figures.at_most(f"Guard.call, {name} vs bare semaphore", candidate, baseline, target)
    _run(benchmark, call)


@pytest.mark.parametrize("metrics", [False, True], ids=["metrics-off", "metrics-on"])
def test_defaults_vs_semaphore_and_anyio_deadline(
    benchmark: pytest.FixtureRequest, figures: Figures, metrics: bool
) -> None:
    # The default limits: a slot and the 50 s deadline (a timer per call, most of the cost).
    guard = Guard(metrics=metrics, registry=CollectorRegistry())

    def call() -> Awaitable[object]:
        return guard.call("billing.pay", handler)

    candidate, baseline = figures.time_batches(
        async_batch(call), async_batch(_semaphore_with_deadline()), ops=OPS, rounds=ROUNDS
    )
    name = f"Guard.call defaults ({'metrics on' if metrics else 'metrics off'}) vs sem+fail_after"
    figures.at_most(name, candidate, baseline, 2 if metrics else 1.5)
    _run(benchmark, call)
