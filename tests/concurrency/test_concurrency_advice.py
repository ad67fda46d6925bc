"""retry_after promises, predictive early shedding, LIFO under overload, the race, the observer."""

from __future__ import annotations

import asyncio

import anyio
import anyio.lowlevel
import pytest
from concurrency_support import envelope_details, serve_order

from fusion_guard import ConcurrencyGuard, ServerBusy
from fusion_guard.admission._queue import asyncio_cancel_pending
from fusion_guard.testing import FakeClock, ToolRecorder

pytestmark = pytest.mark.anyio


async def observe_hold(guard: ConcurrencyGuard, clock: FakeClock, seconds: float) -> None:
    """One call that holds its slot ``seconds`` on the fake clock."""
    async with guard.slot():
        clock.advance(seconds)


async def refusals(guard: ConcurrencyGuard, count: int, *, known: bool = False) -> list[float]:
    """``count`` refused calls' retry_after; ``known``: each by a client of its own."""
    out: list[float] = []
    for n in range(count):
        with pytest.raises(ServerBusy) as info:
            await guard.acquire(f"caller-{n}" if known else None)
        assert info.value.retry_after is not None
        out.append(info.value.retry_after)
    return out


# -- retry_after ---------------------------------------------------------------------------------


async def test_successive_refusals_are_promised_successive_openings(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(2, max_queue=0, clock=clock)
    await observe_hold(guard, clock, 0.4)  # one slot frees every 0.4 / 2 = 0.2 s
    held = [guard.acquire_nowait(), guard.acquire_nowait()]
    assert await refusals(guard, 4, known=True) == pytest.approx([0.2, 0.4, 0.6, 0.8])
    # Anonymous: at most a full guard (2 slots, no queue) of openings past the known ones.
    assert await refusals(guard, 4) == pytest.approx([1.0, 1.2, 1.4, 1.4])
    for slot in held:
        slot.release()


async def test_retry_after_reflects_observed_service_time(clock: FakeClock) -> None:
    fast = ConcurrencyGuard(1, max_queue=0, clock=clock)
    slow = ConcurrencyGuard(1, max_queue=0, clock=clock)
    await observe_hold(fast, clock, 0.02)
    await observe_hold(slow, clock, 1.5)
    fast.acquire_nowait()
    slow.acquire_nowait()
    assert await refusals(fast, 1) == pytest.approx([0.02])
    assert await refusals(slow, 1) == pytest.approx([1.5])


async def test_retry_after_uses_the_prior_before_any_sample(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(1, max_queue=0, expected_service_time=0.25, clock=clock)
    guard.acquire_nowait()
    assert await refusals(guard, 2) == pytest.approx([0.25, 0.5])


async def test_promises_fall_back_to_the_queue_drain_once_time_passes(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(1, max_queue=0, expected_service_time=0.1, clock=clock)
    holder = guard.acquire_nowait()
    assert await refusals(guard, 3, known=True) == pytest.approx([0.1, 0.2, 0.3])
    clock.advance(0.1)
    holder.release()  # a 0.1 s hold, as the prior said
    clock.advance(10)  # the burst is long over: no stale promises linger
    guard.acquire_nowait()
    assert await refusals(guard, 1) == pytest.approx([0.1])


async def test_retry_after_counts_the_queue_ahead_and_is_capped(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(
        1, max_queue=3, queue_timeout=60, max_retry_after=2.0, predictive=False, clock=clock
    )
    await observe_hold(guard, clock, 0.5)
    guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(guard.acquire)
        await anyio.wait_all_tasks_blocked()
        # 3 queued ahead: the next opening for a newcomer is the 4th, 4 * 0.5 s away; then capped
        assert await refusals(guard, 2) == pytest.approx([2.0, 2.0])
        tg.cancel_scope.cancel()


# -- predictive early shedding ---------------------------------------------------------------------


async def test_caller_that_cannot_be_served_in_time_is_shed_at_arrival(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(1, max_queue=100, queue_timeout=1.0, name="t", clock=clock)
    await observe_hold(guard, clock, 0.4)
    guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.acquire)  # expected wait 0.4 s
        tg.start_soon(guard.acquire)  # expected wait 0.8 s
        await anyio.wait_all_tasks_blocked()
        assert guard.queued == 2
        with pytest.raises(ServerBusy) as info:  # expected wait 1.2 s > queue_timeout
            await guard.acquire()
        tg.cancel_scope.cancel()
    assert info.value.reason == "queue_timeout"
    assert envelope_details(info.value.response.text) == {
        "reason": "queue_timeout",
        "active": "1",
        "queued": "2",
        "max_active": "1",
        "max_queue": "100",
        "predicted": "true",
    }
    stats = guard.statistics()
    assert (stats.shed_queue_timeout, stats.shed_predicted) == (1, 1)


async def test_no_prediction_before_a_service_time_is_observed(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(
        1, max_queue=5, queue_timeout=1.0, expected_service_time=10.0, clock=clock
    )
    guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(guard.acquire)
        await anyio.wait_all_tasks_blocked()
        assert guard.queued == 5  # the prior is a guess: nobody is shed on it
        tg.cancel_scope.cancel()


async def test_prediction_can_be_switched_off(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(1, max_queue=5, queue_timeout=1.0, predictive=False, clock=clock)
    await observe_hold(guard, clock, 5.0)
    guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.acquire)
        await anyio.wait_all_tasks_blocked()
        assert guard.queued == 1
        tg.cancel_scope.cancel()


# -- queue order -----------------------------------------------------------------------------------


async def test_lifo_serves_newest_first_while_the_queue_is_standing(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(1, max_queue=10, queue_timeout=30, lifo=True, clock=clock)
    assert await serve_order(guard, clock, age=0.5) == [3, 2, 1, 0]


async def test_lifo_guard_stays_fifo_while_the_queue_is_fresh(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(1, max_queue=10, queue_timeout=30, lifo=True, clock=clock)
    assert await serve_order(guard, clock, age=0.01) == [0, 1, 2, 3]


async def test_standing_after_sets_when_a_queue_counts_as_standing(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(1, queue_timeout=30, lifo=True, standing_after=1.0, clock=clock)
    assert await serve_order(guard, clock, age=0.5) == [0, 1, 2, 3]
    assert await serve_order(guard, clock, age=1.5) == [3, 2, 1, 0]


async def test_fifo_guard_ignores_queue_age(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(1, max_queue=10, queue_timeout=30, clock=clock)
    assert await serve_order(guard, clock, age=5.0) == [0, 1, 2, 3]


# -- the hand-off race -----------------------------------------------------------------------------


async def test_waiter_cancelled_as_it_is_handed_the_slot_passes_it_on() -> None:
    guard = ConcurrencyGuard(1, max_queue=10, queue_timeout=30)
    holder = guard.acquire_nowait()
    ran: list[str] = []
    scopes: dict[str, anyio.CancelScope] = {}

    async def caller(label: str) -> None:
        with anyio.CancelScope() as scope:
            scopes[label] = scope
            async with guard.slot():
                ran.append(label)

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller, "first")
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(caller, "second")
        await anyio.wait_all_tasks_blocked()
        holder.release()  # hands the slot to "first"...
        scopes["first"].cancel()  # ...which is cancelled before it can run
        assert guard.active == 1
    assert ran == ["second"]
    assert (guard.active, guard.queued) == (0, 0)
    stats = guard.statistics()
    assert (stats.admitted, stats.cancelled_queued) == (2, 1)


async def test_waiter_cancelled_as_handed_with_nobody_behind_frees_the_slot() -> None:
    guard = ConcurrencyGuard(1, max_queue=10, queue_timeout=30)
    holder = guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.acquire)
        await anyio.wait_all_tasks_blocked()
        holder.release()
        tg.cancel_scope.cancel()
    assert (guard.active, guard.queued) == (0, 0)
    guard.acquire_nowait().release()  # the slot is usable again


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("live", [True, False])
async def test_a_pending_cancellation_is_seen_wherever_asyncio_keeps_its_tasks(
    live: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check reads asyncio's dict of running tasks where it is the live one; one that is not
    # (a Python that keeps them elsewhere) must not make every cancellation look absent. It also
    # reads anyio's private task states: should anyio move them, the check answers "pending"
    # for every task and the first assertion below fails, on every anyio this project allows.
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    with monkeypatch.context() as patched:
        if not live:
            patched.setattr(asyncio.tasks, "_current_tasks", {}, raising=False)
            patched.setattr(asyncio, "current_task", lambda loop=None: task)
        pending = asyncio_cancel_pending(loop)
    with anyio.CancelScope() as scope:
        assert not pending(loop)
        with anyio.CancelScope(shield=True) as shielded:
            scope.cancel()
            assert not pending(loop)  # a shield hides the outer scope's cancellation
            shielded.cancel()
            assert pending(loop)
            await anyio.lowlevel.checkpoint()  # delivered: what the check foretold
        assert pending(loop)
        await anyio.lowlevel.checkpoint()
    assert shielded.cancelled_caught
    assert scope.cancelled_caught


# -- observer and queue_wait -----------------------------------------------------------------------


async def test_observer_hears_admissions_with_queue_wait_sheds_and_ends(clock: FakeClock) -> None:
    observer = ToolRecorder()
    guard = ConcurrencyGuard(
        1, max_queue=1, queue_timeout=30, expected_service_time=0.5, observer=observer, clock=clock
    )
    waits: list[float] = []

    async def queued_caller() -> None:
        async with guard.slot() as s:
            waits.append(s.queue_wait)

    holder = guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(queued_caller)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(ServerBusy):
            await guard.acquire()
        clock.advance(0.25)
        holder.release()
    assert waits == [0.25]
    assert observer.events == [
        ("admitted", 0.0),
        # On the prior alone the promise does not wait out the queue ahead: the next opening
        ("shed", "queue_full", 1, 1, pytest.approx(0.5)),
        ("finished", "ok", 0.25),  # the holder, 0.25 s after it took the slot
        ("admitted", 0.25),
        ("finished", "ok", 0.0),
    ]


async def test_statistics_and_repr_show_the_figures() -> None:
    guard = ConcurrencyGuard(3, max_queue=7, queue_timeout=1.5, name="x.y")
    held = guard.acquire_nowait()
    stats = guard.statistics()
    assert (stats.name, stats.active, stats.queued, stats.max_active, stats.max_queue) == (
        "x.y",
        1,
        0,
        3,
        7,
    )
    assert "active=1/3" in repr(guard)
    held.release()
    assert guard.statistics().service_samples == 1
    with pytest.raises(AttributeError):
        stats.active = 5  # type: ignore[misc]


# -- the standing-queue limit (CoDel) --------------------------------------------------------------


async def test_standing_queue_is_held_to_the_standing_limit(clock: FakeClock) -> None:
    # Calls arrive faster than the one slot serves them (1 s each): sustained overload.
    guard = ConcurrencyGuard(
        1, max_queue=10, queue_timeout=30, standing_limit=2, standing_after=0.1, clock=clock
    )
    assert guard.standing_limit == 2
    await observe_hold(guard, clock, 1.0)  # measured: a prior alone would be a guess
    guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        for _ in range(3):  # a burst: the queue may grow past the standing limit
            tg.start_soon(guard.acquire)
        await anyio.wait_all_tasks_blocked()
        assert guard.queued == 3
        clock.advance(0.2)  # not empty for longer than standing_after: the queue is standing
        with pytest.raises(ServerBusy) as info:
            await guard.acquire()
        tg.cancel_scope.cancel()
    assert info.value.reason == "queue_full"
    details = envelope_details(info.value.response.text)
    # the queue in force is the standing limit: a queue_full at 3 of 10 would read as a bug
    assert (details["queued"], details["max_queue"], details["standing"]) == ("3", "2", "true")
    stats = guard.statistics()
    assert (stats.shed_queue_full, stats.shed_standing) == (1, 1)


async def test_standing_queue_under_capacity_is_not_limited(clock: FakeClock) -> None:
    # The same burst on a fast tool (10 ms a call): arrivals stay well under what the slot
    # serves, so the queue is a burst being absorbed, not overload, and max_queue applies.
    guard = ConcurrencyGuard(
        1,
        max_queue=10,
        queue_timeout=30,
        standing_limit=2,
        standing_after=0.1,
        expected_service_time=0.01,
        clock=clock,
    )
    guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(guard.acquire)
        await anyio.wait_all_tasks_blocked()
        clock.advance(0.2)
        tg.start_soon(guard.acquire)
        await anyio.wait_all_tasks_blocked()
        assert guard.queued == 4
        tg.cancel_scope.cancel()
    assert guard.statistics().shed_standing == 0


async def test_queue_that_emptied_is_not_standing(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(
        1, max_queue=10, queue_timeout=30, standing_limit=1, standing_after=0.1, clock=clock
    )
    holder = guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.acquire)
        await anyio.wait_all_tasks_blocked()
        holder.release()  # hands the slot on: the queue is empty again
        await anyio.wait_all_tasks_blocked()
        clock.advance(0.5)
        tg.start_soon(guard.acquire)  # finds the queue empty: it is fresh again
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(guard.acquire)  # a burst above the standing limit is still welcome
        await anyio.wait_all_tasks_blocked()
        assert guard.queued == 2
        tg.cancel_scope.cancel()
