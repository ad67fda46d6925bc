"""Each call counted once by how it ended, with or without the Guard, on a real registry: a bare
ConcurrencyGuard reports ``finished`` itself, the Guard's tickets report it instead of its slots.
"""

from __future__ import annotations

import anyio
import pytest
from observability_support import Samples, samples, value
from prometheus_client import CollectorRegistry, generate_latest

from fusion_guard import (
    ConcurrencyGuard,
    Guard,
    HandlerTimeout,
    PrometheusObserver,
    ServerBusy,
    ToolResponse,
    tool_error,
)

pytestmark = pytest.mark.anyio

OUTCOMES = ("ok", "error", "internal_error", "shed", "rate_limited", "timeout", "cancelled")


def scrape(registry: CollectorRegistry) -> Samples:
    return samples(generate_latest(registry).decode())


def calls(found: Samples, tool: str) -> dict[str, float]:
    counts = {o: value(found, "fusion_guard_calls_total", tool=tool, outcome=o) for o in OUTCOMES}
    return {outcome: count for outcome, count in counts.items() if count}


async def wait_then_leave(guard: ConcurrencyGuard) -> None:
    async with guard.slot():
        pass  # pragma: no cover (cancelled while queued)


async def test_a_bare_concurrency_guard_counts_every_end() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusObserver(registry).for_tool("billing.pay", max_active=1)
    slots = ConcurrencyGuard(1, max_queue=1, queue_timeout=60, name="billing.pay", observer=metrics)
    metrics.watch(slots)  # the README's path without the Guard
    async with slots.slot():
        pass
    with pytest.raises(ToolResponse):
        async with slots.slot():
            raise tool_error("CONFLICT", "Already paid")
    with pytest.raises(ValueError, match="bug"):
        async with slots.slot():
            raise ValueError("bug")
    with pytest.raises(HandlerTimeout):
        async with slots.slot(timeout=0.01):
            await anyio.sleep_forever()
    with anyio.CancelScope() as running:
        async with slots.slot():
            running.cancel()
            await anyio.sleep_forever()
    (await slots.acquire()).release()
    holder = slots.acquire_nowait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_then_leave, slots)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(ServerBusy):
            async with slots.slot():
                pass  # pragma: no cover
        tg.cancel_scope.cancel()
    holder.release()

    found = scrape(registry)
    assert calls(found, "billing.pay") == {
        "ok": 3,  # the plain call, acquire/release, the holder
        "error": 1,
        "internal_error": 1,
        "timeout": 1,
        "cancelled": 2,  # one running, one queued
        "shed": 1,
    }
    # Every admitted call has its handler time; the one cancelled in the queue has none.
    assert value(found, "fusion_guard_call_duration_seconds_count", tool="billing.pay") == 7
    assert (
        value(
            found,
            "fusion_guard_queue_wait_seconds_count",
            tool="billing.pay",
            priority="interactive",
        )
        == 7
    )
    assert value(found, "fusion_guard_inflight", tool="billing.pay") == 0


async def test_a_healthy_bare_guard_does_not_read_as_shedding_everything() -> None:
    # The dashboard's shed ratio: shed / all calls. Before, only sheds were counted: 100 %.
    registry = CollectorRegistry()
    metrics = PrometheusObserver(registry).for_tool("search", max_active=1)
    slots = ConcurrencyGuard(1, max_queue=0, name="search", observer=metrics)
    for _ in range(99):
        async with slots.slot():
            pass
    async with slots.slot():
        with pytest.raises(ServerBusy):
            async with slots.slot():
                pass  # pragma: no cover
    counted = calls(scrape(registry), "search")
    assert counted == {"ok": 100, "shed": 1}  # the holder finished too


async def ok() -> str:
    return "done"


async def conflict() -> ToolResponse:
    return tool_error("CONFLICT", "Already paid")


async def broken() -> str:
    raise ValueError("bug")


async def never_returns() -> str:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")  # pragma: no cover


async def test_the_guard_counts_each_call_once() -> None:
    registry = CollectorRegistry()
    guard = Guard(
        registry=registry, tools={"t": {"max_active": 1, "max_queue": 0, "timeout": 0.05}}
    )
    for handler in (ok, ok, conflict, broken, never_returns):
        await guard.call("t", handler)
    with anyio.CancelScope() as running:
        async with guard.admit("t"):
            running.cancel()
            await anyio.sleep_forever()
    async with guard.admit("t"):
        assert (await guard.call("t", ok)).code == "SERVER_BUSY"

    found = scrape(registry)
    # An error envelope is an `error` (the ticket knows; the slot saw no exception), and no
    # call is counted by both the ticket and the slot.
    assert calls(found, "t") == {
        "ok": 3,
        "error": 1,
        "internal_error": 1,
        "timeout": 1,
        "cancelled": 1,
        "shed": 1,
    }
    assert value(found, "fusion_guard_call_duration_seconds_count", tool="t") == 7
    assert value(found, "fusion_guard_inflight", tool="t") == 0
