"""ConcurrencyGuard: admission, queueing, hand-off, shedding, deadlines (asyncio and trio)."""

from __future__ import annotations

import math

import anyio
import anyio.lowlevel
import pytest
from concurrency_support import envelope_details as details
from concurrency_support import serve_order

from fusion_guard import ConcurrencyGuard, ConfigurationError, HandlerTimeout, ServerBusy
from fusion_guard.testing import FakeClock

pytestmark = pytest.mark.anyio


async def test_free_slot_is_taken_without_yielding() -> None:
    guard = ConcurrencyGuard(2, name="t")
    async with guard.slot() as s:
        assert guard.active == 1
        assert s.queue_wait == 0.0
        async with guard.slot():
            assert guard.active == 2
    assert (guard.active, guard.queued) == (0, 0)
    assert guard.statistics().admitted == 2


async def test_slot_is_freed_when_the_body_raises() -> None:
    guard = ConcurrencyGuard(1)
    with pytest.raises(KeyError):
        async with guard.slot():
            raise KeyError("boom")
    assert guard.active == 0


async def test_slot_is_freed_when_the_body_is_cancelled() -> None:
    guard = ConcurrencyGuard(1)
    with anyio.CancelScope() as scope:
        async with guard.slot():
            scope.cancel()
            await anyio.sleep(1)
    assert guard.active == 0


async def test_release_hands_the_slot_to_the_first_waiter_fifo(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(1, max_queue=10, queue_timeout=30, clock=clock)
    assert await serve_order(guard, clock, age=0.0, callers=5) == [0, 1, 2, 3, 4]
    assert (guard.active, guard.queued) == (0, 0)


async def test_release_is_idempotent() -> None:
    guard = ConcurrencyGuard(2)
    first = guard.acquire_nowait()
    first.release()
    first.release()
    assert guard.active == 0
    second = guard.acquire_nowait()
    first.release()  # a stale release never frees someone else's slot
    assert guard.active == 1
    second.release()


async def test_handed_slot_is_not_taken_by_a_newcomer() -> None:
    guard = ConcurrencyGuard(1, max_queue=10, queue_timeout=30)
    holder = guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.acquire)
        await anyio.wait_all_tasks_blocked()
        holder.release()
        # the waiter has not run yet, but the slot is already its own: no barging
        assert guard.active == 1
        with pytest.raises(anyio.WouldBlock):
            guard.acquire_nowait()
    assert guard.active == 1


async def test_full_queue_sheds_with_server_busy_envelope() -> None:
    guard = ConcurrencyGuard(1, max_queue=0, name="billing.pay")
    holder = guard.acquire_nowait()
    with pytest.raises(ServerBusy) as info:
        async with guard.slot():
            pytest.fail("must not run")
    busy = info.value
    assert busy.reason == "queue_full"
    assert busy.retry_after is not None
    assert busy.retry_after > 0
    assert busy.response.is_error
    assert 'Tool "billing.pay" is at capacity (1 active, 0 queued).' in busy.response.text
    assert details(busy.response.text) == {
        "reason": "queue_full",
        "active": "1",
        "queued": "0",
        "max_active": "1",
        "max_queue": "0",
    }
    holder.release()
    assert guard.statistics().shed_queue_full == 1


async def test_queue_timeout_sheds_after_waiting() -> None:
    guard = ConcurrencyGuard(1, max_queue=5, queue_timeout=0.05)
    holder = guard.acquire_nowait()
    with pytest.raises(ServerBusy) as info:
        await guard.acquire()
    assert info.value.reason == "queue_timeout"
    assert details(info.value.response.text)["reason"] == "queue_timeout"
    assert guard.queued == 0
    holder.release()
    assert guard.active == 0


async def test_cancelled_waiter_leaves_the_queue_at_once() -> None:
    guard = ConcurrencyGuard(1, max_queue=5, queue_timeout=30)
    holder = guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.acquire)
        await anyio.wait_all_tasks_blocked()
        assert guard.queued == 1
        tg.cancel_scope.cancel()
    assert guard.queued == 0
    assert guard.statistics().cancelled_queued == 1
    holder.release()
    assert guard.active == 0


async def test_handler_timeout_cancels_body_and_frees_slot() -> None:
    guard = ConcurrencyGuard(1, name="slow.tool")
    with pytest.raises(HandlerTimeout) as info:
        async with guard.slot(timeout=0.01):
            await anyio.sleep(10)
    assert guard.active == 0
    text = info.value.response.text
    assert 'code="TIMEOUT"' in text
    assert details(text) == {"timeout_seconds": "0.01"}
    assert guard.statistics().handler_timeouts == 1


async def test_handler_within_timeout_returns_normally() -> None:
    guard = ConcurrencyGuard(1)
    async with guard.slot(timeout=10):
        await anyio.lowlevel.checkpoint()
    assert guard.active == 0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"max_active": 0}, "max_active=0 is invalid: expected an integer >= 1"),
        ({"max_active": True}, "max_active=True is invalid: expected an integer >= 1"),
        ({"max_active": 2.0}, "max_active=2.0 is invalid: expected an integer >= 1"),
        ({"max_active": 1, "max_queue": -1}, "max_queue=-1 is invalid: expected an integer >= 0"),
        ({"max_active": 1, "queue_timeout": 0}, "queue_timeout=0 is invalid: expected a"),
        ({"max_active": 1, "queue_timeout": -1.0}, "=-1.0 is invalid"),
        ({"max_active": 1, "queue_timeout": math.nan}, "=nan is invalid"),
        ({"max_active": 1, "queue_timeout": "1"}, "='1' is invalid"),
        ({"max_active": 1, "name": ""}, "name='' is invalid: expected a non-empty string"),
        ({"max_active": 1, "lifo": 1}, "lifo=1 is invalid: expected True or False"),
        ({"max_active": 1, "standing_after": math.inf}, "standing_after=inf is invalid"),
        ({"max_active": 1, "standing_limit": 0}, "standing_limit=0 is invalid: expected an"),
        ({"max_active": 1, "expected_service_time": 0}, "expected_service_time"),
        ({"max_active": 1, "max_retry_after": math.nan}, "max_retry_after"),
        ({"max_active": 1, "clock": 3}, "clock must be a callable"),
    ],
)
async def test_invalid_configuration_is_refused_clearly(
    kwargs: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ConfigurationError, match=None) as info:
        ConcurrencyGuard(**kwargs)  # type: ignore[arg-type]
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("seconds", [0, -1, math.nan, "5", True])
async def test_invalid_slot_timeout_is_refused(seconds: object) -> None:
    with pytest.raises(ConfigurationError, match=r"timeout=.* is invalid: expected a"):
        ConcurrencyGuard(1).slot(seconds)  # type: ignore[arg-type]


def test_a_refusal_is_the_server_busy_the_normal_construction_makes() -> None:
    # The guard builds its ServerBusy without the __init__ chain (the shed path's cost).
    guard = ConcurrencyGuard(1, max_queue=0, name="t")
    guard.acquire_nowait()
    with pytest.raises(ServerBusy) as raised:
        guard.slot()
    fast = raised.value
    normal = ServerBusy(fast.response, fast.retry_after, fast.reason)
    assert type(fast) is type(normal)
    assert (fast.args, str(fast)) == (normal.args, str(normal))
    assert fast.args == (fast.response.text,)
    assert (fast.reason, fast.retry_after) == ("queue_full", normal.retry_after)


# -- the free path written out (``Slot.__aenter__`` / ``__aexit__``) -------------------------------


def _slot_classes() -> list[type]:
    import fusion_guard.admission._permit
    import fusion_guard.admission._unbounded  # noqa: F401  (their Slot variants, made known)
    from fusion_guard.admission._slot import Slot

    found, todo = [], [Slot]
    while todo:
        kind = todo.pop()
        found.append(kind)
        todo += kind.__subclasses__()
    return found


def test_every_slot_with_an_end_of_its_own_leaves_through_it() -> None:
    # Slot.__aexit__ writes Slot._end out: a variant that overrides _end must not inherit it.
    from fusion_guard.admission._slot import Slot

    variants = [kind for kind in _slot_classes() if kind is not Slot]
    assert len(variants) >= 4  # client, level, permit, unbounded
    for kind in variants:
        if any("_end" in base.__dict__ for base in kind.__mro__[: kind.__mro__.index(Slot)]):
            assert kind.__aexit__ is not Slot.__aexit__, kind  # type: ignore[attr-defined]


@pytest.mark.parametrize("client", [None, "tenant-1"])
@pytest.mark.parametrize("deadline", [None, 30.0])
@pytest.mark.parametrize("adaptive", [False, True], ids=["fixed", "adaptive"])
async def test_the_written_out_free_path_is_the_generic_one(
    client: str | None, deadline: float | None, adaptive: bool
) -> None:
    """``async with guard.slot()`` (the hold and end written out) and ``take_free`` + ``leave``
    (``_hold`` and ``_end``) leave two guards on identical clocks with the same figures and
    their observers with the same reports, over enough calls for the service time's sample."""
    from fusion_guard.admission._service_time import SAMPLE_EVERY, SAMPLED_FROM
    from fusion_guard.testing import ToolRecorder

    def make() -> tuple[ConcurrencyGuard, ToolRecorder, FakeClock]:
        clock, recorder = FakeClock(), ToolRecorder()
        if adaptive:
            from fusion_guard import GradientLimit

            guard = ConcurrencyGuard(limit=GradientLimit(), observer=recorder, clock=clock)
        else:
            guard = ConcurrencyGuard(2, observer=recorder, clock=clock)
        return guard, recorder, clock

    written, heard, clock = make()
    generic, told, twin_clock = make()
    for n in range(SAMPLED_FROM + 3 * SAMPLE_EVERY):
        hold = 0.01 + (n % 7) / 100
        async with written.slot(deadline, client) as slot:
            assert slot.queue_wait == 0.0
            clock.advance(hold)
        other = generic.slot(deadline, client)
        assert other.take_free()
        twin_clock.advance(hold)
        other.leave(None, None, None)
    assert written.statistics() == generic.statistics()
    assert heard.events == told.events
    assert written.active == 0
