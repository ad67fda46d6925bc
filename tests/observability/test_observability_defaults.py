"""What every Guard gets by default: metrics (unless FUSION_GUARD_METRICS=false) and log events."""

from __future__ import annotations

import logging

import anyio
import pytest
from observability_support import samples, value
from prometheus_client import CollectorRegistry, generate_latest

from fusion_guard import Guard

pytestmark = pytest.mark.anyio


async def test_a_guard_counts_its_calls_and_shows_live_figures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    guard = Guard(registry=registry, max_active=1, max_queue=1, queue_timeout=5.0)
    started, release = anyio.Event(), anyio.Event()

    async def hold() -> str:
        started.set()
        await release.wait()
        return "done"

    async def quick() -> str:
        return "done"

    async with anyio.create_task_group() as group:
        group.start_soon(guard.call, "t", hold)
        await started.wait()
        group.start_soon(guard.call, "t", quick)
        await anyio.wait_all_tasks_blocked()
        busy = await guard.call("t", quick)  # the queue's one place is taken
        found = samples(generate_latest(registry).decode())
        assert value(found, "fusion_guard_inflight", tool="t") == 1
        assert value(found, "fusion_guard_queue_depth", tool="t") == 1
        assert value(found, "fusion_guard_concurrency_limit", tool="t") == 1
        release.set()
    assert busy.code == "SERVER_BUSY"
    found = samples(generate_latest(registry).decode())
    assert value(found, "fusion_guard_calls_total", tool="t", outcome="ok") == 2
    assert value(found, "fusion_guard_calls_total", tool="t", outcome="shed") == 1
    assert value(found, "fusion_guard_inflight", tool="t") == 0
    assert [r.event for r in caplog.records] == ["call_shed"]  # type: ignore[attr-defined]


async def test_metrics_off_leaves_the_registry_empty_but_still_logs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fusion_guard")
    monkeypatch.setenv("FUSION_GUARD_METRICS", "false")
    registry = CollectorRegistry()
    guard = Guard.from_env(registry=registry, rate=1, burst=1)

    async def quick() -> str:
        return "done"

    await guard.call("t", quick)
    limited = await guard.call("t", quick)
    assert limited.code == "RATE_LIMITED"
    assert generate_latest(registry) == b""
    assert [r.event for r in caplog.records] == ["call_rate_limited"]  # type: ignore[attr-defined]
