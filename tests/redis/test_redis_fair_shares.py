"""Fair shares under a fleet cap: the Redis leases cap the fleet, and each process serves its own
waiting calls in turn across clients (docs/concurrency.md, "Fair shares")."""

from __future__ import annotations

import anyio
import pytest
from prometheus_client import CollectorRegistry

from fusion_guard import DistributedConcurrencyGuard, Guard, ServerBusy

pytestmark = pytest.mark.anyio


async def test_a_polite_client_gets_the_next_fleet_slot(redis_url: str) -> None:
    guard = Guard(
        backend="redis",
        redis_url=redis_url,
        redis_prefix="fair-shares",
        max_active=1,
        max_active_per_client=1,
        tools={"search": {"max_active_per_client": "off"}},
        registry=CollectorRegistry(),
    )
    slots = guard.concurrency("search")
    assert isinstance(slots, DistributedConcurrencyGuard)
    order: list[str] = []
    release = anyio.Event()

    async def call(client: str) -> None:
        async with guard.admit("search", client=client):
            order.append(client)
            await release.wait()

    async with anyio.create_task_group() as tasks:
        for _ in range(4):
            tasks.start_soon(call, "greedy")
            await anyio.wait_all_tasks_blocked()
        tasks.start_soon(call, "polite")
        await anyio.wait_all_tasks_blocked()
        assert (slots.active, slots.queued) == (1, 4)
        release.set()
    assert order[:2] == ["greedy", "polite"]
    assert (slots.active, slots.queued, slots.statistics().clients) == (0, 0, 0)
    # The global cap applies to the other tools, over the fleet lease as well.
    async with guard.admit("fetch", client="a"):
        with pytest.raises(ServerBusy) as refused:
            async with guard.admit("fetch", client="a"):
                pytest.fail("ran over its client's cap")
    assert refused.value.reason == "client_limit"
