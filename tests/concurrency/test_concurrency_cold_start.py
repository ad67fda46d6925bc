"""Cold start: advice and early shedding from the calls in flight, before any call has finished.

The unit tests drive a fake clock; the scenario tests run the issue's bursts in virtual time
(tests/virtual_time.py: a tool that "takes 1 s" sleeps 1 s of the event loop's clock, which the
guard reads too), so a loaded machine's late wake-ups never blur what the guard decided.
"""

from __future__ import annotations

import anyio
import pytest
from concurrency_support import envelope_details

from fusion_guard import ConcurrencyGuard, ServerBusy
from fusion_guard.admission._service_time import expected_wait
from fusion_guard.testing import FakeClock
from virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

anyio_backend = virtual_time_backends()


async def refuse(guard: ConcurrencyGuard) -> ServerBusy:
    with pytest.raises(ServerBusy) as info:
        await guard.acquire()
    return info.value


# -- the model -------------------------------------------------------------------------------------


def test_staggered_slots_open_one_drain_step_apart() -> None:
    # Two slots serving a queue: ages 0.5 s and 0 s, holds of 1 s.
    assert [expected_wait(p, 2, 1.0, 0.0, 0.25) for p in (1, 2, 3, 4)] == pytest.approx(
        [0.5, 1.0, 1.5, 2.0]
    )


def test_calls_started_together_end_together() -> None:
    # A burst: both calls 0.3 s old, holds of 1 s: openings come in pairs.
    assert [expected_wait(p, 2, 1.0, 0.3, 0.3) for p in (1, 2, 3, 4, 5)] == pytest.approx(
        [0.7, 0.7, 1.7, 1.7, 2.7]
    )


def test_overdue_calls_are_due_now() -> None:
    assert expected_wait(1, 1, 1.0, 3.0, 3.0) == 0.0
    assert expected_wait(2, 1, 1.0, 3.0, 3.0) == pytest.approx(1.0)


# -- advice ----------------------------------------------------------------------------------------


async def test_a_call_in_flight_raises_the_cold_advice(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(1, max_queue=0, expected_service_time=0.1, clock=clock)
    guard.acquire_nowait()
    assert (await refuse(guard)).retry_after == pytest.approx(0.1)  # the prior
    clock.advance(0.8)  # running for 0.8 s: the hold is at least that long
    assert (await refuse(guard)).retry_after == pytest.approx(0.8)


async def test_on_the_prior_alone_the_promise_skips_the_queue_ahead(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(2, max_queue=2, queue_timeout=30, clock=clock)
    guard.acquire_nowait()
    guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        for _ in range(2):
            tg.start_soon(guard.acquire)
        await anyio.wait_all_tasks_blocked()
        # the k-th coming opening, a drain step (0.1 s prior / 2) apart: back early, a caller
        # waits in the queue; back late, it would leave slots idle
        cold = [(await refuse(guard)).retry_after for _ in range(3)]
        assert cold == pytest.approx([0.05, 0.1, 0.15])
        clock.advance(0.3)  # the calls in flight outlive the prior: evidence, queue counted
        warm = await refuse(guard)
        assert warm.retry_after == pytest.approx(3 * 0.3 / 2)
        tg.cancel_scope.cancel()


async def test_warm_advice_counts_the_queue_ahead(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(1, max_queue=1, queue_timeout=30, clock=clock)
    async with guard.slot():
        clock.advance(0.5)
    guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.acquire)
        await anyio.wait_all_tasks_blocked()
        assert (await refuse(guard)).retry_after == pytest.approx(1.0)
        tg.cancel_scope.cancel()


# -- shedding on in-flight ages --------------------------------------------------------------------


async def test_cold_guard_sheds_at_arrival_once_calls_in_flight_have_aged(
    clock: FakeClock,
) -> None:
    guard = ConcurrencyGuard(1, max_queue=10, queue_timeout=2.0, clock=clock)
    guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.acquire)
        await anyio.wait_all_tasks_blocked()
        clock.advance(1.0)  # nothing finished, but the call in flight has held 1 s
        tg.start_soon(guard.acquire)  # 2nd: due in 1 s at best, + a margin: in time
        await anyio.wait_all_tasks_blocked()
        assert guard.queued == 2
        busy = await refuse(guard)  # 3rd: 2 holds of at least 1 s: past the 2 s timeout
        tg.cancel_scope.cancel()
    assert (busy.reason, envelope_details(busy.response.text)["predicted"]) == (
        "queue_timeout",
        "true",
    )


async def test_waiters_are_re_judged_from_the_tail_as_the_calls_age(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(2, max_queue=20, queue_timeout=5.0, standing_limit=20, clock=clock)
    guard.acquire_nowait()
    guard.acquire_nowait()
    outcomes: dict[int, str] = {}

    async def caller(i: int) -> None:
        try:
            await guard.acquire()
            outcomes[i] = "admitted"
        except ServerBusy as busy:
            outcomes[i] = busy.reason

    async with anyio.create_task_group() as tg:
        for i in range(18):  # cold: nobody is shed on the prior
            tg.start_soon(caller, i)
            await anyio.wait_all_tasks_blocked()
        assert guard.queued == 18
        clock.advance(0.96)  # the burst's calls have held 0.96 s: 5 rounds no longer fit
        tg.start_soon(caller, 18)  # an arrival looks (so does the tail's own timer)
        await anyio.wait_all_tasks_blocked()
        shed = sorted(i for i, reason in outcomes.items() if reason == "queue_timeout")
        assert shed == list(range(8, 18))  # the tail; the 8 that fit in 4 rounds stay
        assert guard.queued == 9  # and the newcomer, whose 5 s start now: 4 rounds fit
        tg.cancel_scope.cancel()
    stats = guard.statistics()
    assert stats.shed_predicted == stats.shed_queue_timeout == 10


async def test_a_lull_before_a_round_ends_is_not_lateness(clock: FakeClock) -> None:
    guard = ConcurrencyGuard(2, max_queue=20, queue_timeout=5.0, standing_limit=20, clock=clock)
    for _ in range(2):
        async with guard.slot():  # warm: 1 s holds
            clock.advance(1.0)
    guard.acquire_nowait()
    guard.acquire_nowait()
    async with anyio.create_task_group() as tg:
        for _ in range(8):  # due at 1, 1, 2, 2, 3, 3, 4, 4 s: all in time
            tg.start_soon(guard.acquire)
            await anyio.wait_all_tasks_blocked()
        clock.advance(0.99)  # no opening yet: the calls in flight are near their end
        tg.start_soon(guard.acquire)  # an arrival looks: 9th, due 4.01 s after it came
        await anyio.wait_all_tasks_blocked()
        assert guard.queued == 9  # nobody shed: the 8th is still due at 4 s
        tg.cancel_scope.cancel()
    assert guard.statistics().shed_predicted == 0


# -- the scenarios, in virtual time --------------------------------------------------------


async def burst(guard: ConcurrencyGuard, calls: int, hold: float, follow: bool) -> Burst:
    """``calls`` at once; refused callers retry at exactly ``retry_after`` when ``follow``."""
    result = Burst(anyio.current_time())

    async def agent() -> None:
        while True:
            try:
                async with guard.slot():
                    await anyio.sleep(hold)
            except ServerBusy as busy:
                advice = busy.retry_after or 0.0  # a SERVER_BUSY always carries one
                result.refusals.append((anyio.current_time() - result.start, advice))
                if not follow:
                    return
                await anyio.sleep(advice)
            else:
                result.done = anyio.current_time() - result.start
                return

    async with anyio.create_task_group() as tg:
        for _ in range(calls):
            tg.start_soon(agent)
    return result


class Burst:
    def __init__(self, start: float) -> None:
        self.start = start
        self.done = 0.0
        self.refusals: list[tuple[float, float]] = []


async def test_cold_burst_following_the_advice_drains_near_the_ideal_time() -> None:
    # max_queue 20: 8 of 30 refused
    guard = ConcurrencyGuard(2, queue_timeout=2.0, clock=anyio.current_time)
    ideal = 30 * 0.05 / 2
    cold = await burst(guard, 30, 0.05, follow=True)
    assert cold.done <= 1.5 * ideal
    warm = await burst(guard, 30, 0.05, follow=True)
    assert warm.done <= 1.1 * ideal


async def test_fresh_guard_refuses_a_long_tool_as_soon_as_it_can_know() -> None:
    # the Guard's defaults otherwise
    guard = ConcurrencyGuard(2, queue_timeout=5.0, clock=anyio.current_time)
    cold = await burst(guard, 20, 1.0, follow=False)
    assert len(cold.refusals) == 10  # 10 served within 5 s, as many as can be
    assert max(at for at, _ in cold.refusals) <= 1.5  # not at the end of queue_timeout
    # Advice a caller can follow into a slot: none is told to come back before the 10
    # served calls have drained (5 s after the burst), nor after the ideal drain (10 s).
    assert all(5.0 <= at + advice <= 10.0 for at, advice in cold.refusals)
