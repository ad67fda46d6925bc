"""A flood of invented tool names: bounded state, and configured limits that keep applying; a call
cancelled while its rate decision is in flight is still counted."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from fusion_guard import Guard
from fusion_guard.backends import GcraRequest, GcraResult
from fusion_guard.testing import RecordingObserver

pytestmark = pytest.mark.anyio


async def _ok() -> str:
    return "ok"


@pytest.fixture
def small_table(monkeypatch: pytest.MonkeyPatch) -> int:
    from fusion_guard import _guard

    monkeypatch.setattr(_guard, "MAX_TOOLS", 3)
    return 3


async def test_configured_patterns_apply_past_the_table_size(
    small_table: int, observer: RecordingObserver
) -> None:
    guard = Guard(
        metrics=False,
        observer=observer,
        tools={"billing.*": {"max_active": 1, "max_queue": 0}, "search": {"max_active": 3}},
    )
    for index in range(50):
        assert (await guard.call(f"invented-{index}", _ok)).text == "ok"
    # Each later name keeps what the configuration says of it.
    billing = guard.limits("billing.pay")
    assert (billing.max_active, billing.max_queue) == (1, 0)
    assert billing.tool == "(other tools matching billing.*)"
    assert guard.limits("search").tool == "search"  # exactly configured: a gate of its own
    assert guard.limits("search").max_active == 3
    assert guard.limits("invented-999").max_active == "auto"
    # The shared gate enforces the pattern's limit across the names that share it.
    release = anyio.Event()

    async def hold() -> str:
        await release.wait()
        return "held"

    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.call, "billing.pay", hold)
        await anyio.wait_all_tasks_blocked()
        refused = await guard.call("billing.refund", _ok)
        assert refused.code == "SERVER_BUSY"
        release.set()


async def test_state_and_observers_stay_bounded_under_a_name_flood(
    small_table: int, observer: RecordingObserver
) -> None:
    guard = Guard(metrics=False, observer=observer, tools={"billing.*": {"max_active": 1}})
    for index in range(2_000):
        await guard.call(f"invented-{index}", _ok)
        await guard.call(f"billing.invented-{index}", _ok)
    bound = [tool for tool, _ in observer.bound]
    assert len(bound) == small_table + 2, bound
    assert "(other tools)" in bound
    assert "(other tools matching billing.*)" in bound


class _StallingBackend:
    """A shared backend whose decision waits until the test lets it answer."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.answer = anyio.Event()

    async def decide(self, requests: Sequence[GcraRequest]) -> GcraResult:
        self.entered.set()
        await self.answer.wait()
        return GcraResult(True, 0.0, -1)


@pytest.mark.parametrize("max_active", [2, "off"])
async def test_a_call_cancelled_during_its_rate_decision_is_counted(
    observer: RecordingObserver, max_active: object
) -> None:
    backend = _StallingBackend()
    guard = Guard(
        metrics=False, observer=observer, rate=5, max_active=max_active, rate_backend=backend
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.call, "lookup", _ok)
        await backend.entered.wait()
        tg.cancel_scope.cancel()
    assert observer.ends("lookup") == ["cancelled"]
    if max_active == 2:
        slots = guard.concurrency("lookup")
        assert slots is not None
        assert (slots.active, slots.queued) == (0, 0)
