"""A fail-closed limit that cannot reach Redis refuses a call SERVER_BUSY
``backend_unavailable``: the refusal is counted under the call's own priority (the metrics'
``priority`` label, the observer's ``for_priority``), not under ``interactive`` whatever it was.
"""

from __future__ import annotations

import socket
import time

import pytest
from prometheus_client import CollectorRegistry

from fusion_guard import (
    BackendError,
    ConcurrencyGuard,
    Guard,
    Outcome,
    Priority,
    PrometheusObserver,
    RateLimiter,
    ServerBusy,
    ShedReason,
    ToolObserver,
)
from fusion_guard.admission._context import CallContext
from fusion_guard.admission._distributed import RedisLease
from fusion_guard.admission._failure import backend_failure
from fusion_guard.backends._redis import RedisConnection
from fusion_guard.testing import FailingBackend

pytestmark = pytest.mark.anyio


class Heard:
    """A tool observer telling priorities apart: the sheds it heard, as (the priority of the
    observer that heard it, None for the tool's own; the reason)."""

    def __init__(self, heard: list[tuple[str | None, str]], priority: str | None = None) -> None:
        self.heard, self.priority = heard, priority

    def for_priority(self, priority: Priority) -> Heard:
        return Heard(self.heard, priority.value)

    def admitted(self, queue_wait: float) -> None:
        pass  # pragma: no cover

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        self.heard.append((self.priority, reason))

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        pass  # pragma: no cover

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        pass

    def backend_error(self, backend: str, allowed: bool) -> None:
        self.heard.append((self.priority, f"backend_error {allowed}"))


def shed_by_priority(registry: CollectorRegistry, tool: str) -> dict[str, float]:
    labels = {"tool": tool, "reason": "backend_unavailable"}
    return {
        p.value: registry.get_sample_value("fusion_guard_shed_total", labels | {"priority": p})
        or 0.0
        for p in Priority
    }


@pytest.mark.parametrize("priority", [None, *Priority])
async def test_a_failed_backend_refusal_is_counted_under_the_calls_priority(
    priority: Priority | None,
) -> None:
    registry = CollectorRegistry()
    bound = PrometheusObserver(registry).for_tool("index", max_active=None)
    failure = backend_failure("index", "closed", FailingBackend(), bound)
    limiter = RateLimiter(1, backend=FailingBackend(), failure_policy=failure)
    with pytest.raises(ServerBusy) as refused:
        await limiter.acheck(CallContext("index", priority=priority))
    assert refused.value.reason == "backend_unavailable"
    expected = {p.value: 0.0 for p in Priority}
    expected[(priority or Priority.INTERACTIVE).value] = 1.0
    assert shed_by_priority(registry, "index") == expected


async def test_each_priority_hears_its_own_refusals_and_the_tool_the_backend_error() -> None:
    heard: list[tuple[str | None, str]] = []
    observer: ToolObserver = Heard(heard)
    failure = backend_failure("index", "closed", FailingBackend(), observer)
    for rank in (Priority.BACKGROUND.rank, Priority.INTERACTIVE.rank, Priority.SHEDDABLE.rank):
        assert failure.handle(BackendError("redis unreachable"), rank) is not None
    assert heard == [
        (None, "backend_error False"),
        ("background", "backend_unavailable"),
        (None, "backend_error False"),
        (None, "backend_unavailable"),  # the default priority's observer is the tool's own
        (None, "backend_error False"),
        ("sheddable", "backend_unavailable"),
    ]


async def test_open_admits_at_every_priority_without_a_shed() -> None:
    heard: list[tuple[str | None, str]] = []
    failure = backend_failure("index", "open", FailingBackend(), Heard(heard))
    assert failure.handle(BackendError("redis unreachable"), Priority.BACKGROUND.rank) is None
    assert heard == [(None, "backend_error True")]


def _closed_port() -> int:
    with socket.socket() as probe:  # a loopback port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _lease_of_a_dead_redis(heard: list[tuple[str | None, str]]) -> RedisLease:
    """A fail-closed fleet lease on a port nothing listens on, reporting to ``heard``."""
    connection = RedisConnection(f"redis://127.0.0.1:{_closed_port()}/0", timeout=0.05)
    return RedisLease(
        connection,
        "index",
        limit=1,
        lease=10.0,
        failure_policy="closed",
        clock=time.monotonic,
        observer=Heard(heard),
    )


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # redis-py's client is asyncio-only
async def test_a_fleet_lease_refused_for_a_failed_redis_is_counted_under_the_calls_priority() -> (
    None
):
    heard: list[tuple[str | None, str]] = []
    lease = _lease_of_a_dead_redis(heard)
    with pytest.raises(ServerBusy) as refused:
        await lease.take(time.monotonic() + 1.0, Priority.SHEDDABLE.rank)
    assert refused.value.reason == "backend_unavailable"
    assert heard == [(None, "backend_error False"), ("sheddable", "backend_unavailable")]


async def test_through_the_guard_a_background_calls_refusal_is_counted_as_background() -> None:
    registry = CollectorRegistry()
    guard = Guard(
        metrics=False,
        observer=PrometheusObserver(registry),
        rate=5,
        rate_backend=FailingBackend(),
        redis_failure_policy="closed",
    )
    with pytest.raises(ServerBusy):
        async with guard.admit("index", priority="background"):
            pass  # pragma: no cover
    assert shed_by_priority(registry, "index")["background"] == 1.0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # redis-py's client is asyncio-only
async def test_a_fleet_slot_hands_its_lease_the_calls_priority() -> None:
    heard: list[tuple[str | None, str]] = []
    lease = _lease_of_a_dead_redis(heard)
    guard = ConcurrencyGuard(max_active=2, permit=lease)
    with pytest.raises(ServerBusy):
        async with guard.slot(priority="sheddable"):
            pass  # pragma: no cover
    assert ("sheddable", "backend_unavailable") in heard


async def test_a_permit_that_takes_no_rank_is_called_with_the_deadline_alone() -> None:
    # Permit is public: a user's permit written before priorities keeps working for them.
    taken: list[float] = []

    class Ticketed:
        async def take(self, deadline: float) -> object | None:
            taken.append(deadline)
            return "token"

        async def give_back(self, token: object) -> None:
            pass

    guard = ConcurrencyGuard(max_active=2, permit=Ticketed())
    async with guard.slot(priority="background"):
        pass
    assert len(taken) == 1
