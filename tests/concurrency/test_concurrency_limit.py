"""A limit that moves: ``ConcurrencyGuard(limit=...)`` enforces what a ``Limit`` decides.

The limit is read after every finished call (the sample it learns from); raising it admits
waiters at once, lowering it cancels nothing (the calls in flight drain, no slot is handed on above
the limit). Checked directly and by random programs on asyncio and trio.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import anyio
import pytest
from concurrency_support import Call
from concurrency_support import envelope_details as details
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_guard import ConcurrencyGuard, ConfigurationError, ServerBusy
from fusion_guard.admission._limit import FixedLimit
from fusion_guard.testing import FakeClock
from virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

# Virtual time: anyio's wait_all_tasks_blocked polls with 0.1 s sleeps on asyncio, which made the
# random programs take 8-9 s of the real clock; here those sleeps pass at once.
anyio_backend = virtual_time_backends()


class SteeredLimit:
    """A limit the test sets; it takes effect at the next finished call, like a learned one."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.next = limit
        self.samples: list[tuple[float, float, int, bool]] = []

    def on_sample(self, start: float, duration: float, inflight: int, dropped: bool) -> None:
        self.samples.append((start, duration, inflight, dropped))
        self.limit = self.next


class BrokenLimit(SteeredLimit):
    def on_sample(self, start: float, duration: float, inflight: int, dropped: bool) -> None:
        raise RuntimeError("a bug in the limit")


async def _hold(guard: ConcurrencyGuard, release: anyio.Event, started: list[int]) -> None:
    async with guard.slot():
        started.append(guard.active)
        await release.wait()


async def test_raising_the_limit_admits_waiters_at_once() -> None:
    limit = SteeredLimit(1)
    guard = ConcurrencyGuard(limit=limit, queue_timeout=10)
    assert (guard.limit, guard.max_active, guard.adaptive_limit) == (1, 1, limit)
    first, rest = anyio.Event(), anyio.Event()
    started: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_hold, guard, first, started)
        await anyio.wait_all_tasks_blocked()
        for _ in range(4):
            tg.start_soon(_hold, guard, rest, started)
        await anyio.wait_all_tasks_blocked()
        assert (guard.active, guard.queued) == (1, 4)
        limit.next = 3
        first.set()  # one call ends: the limit learns, 3 slots, so 3 waiters run at once
        await anyio.wait_all_tasks_blocked()
        assert (guard.limit, guard.active, guard.queued) == (3, 3, 1)
        rest.set()
    assert (guard.active, guard.queued) == (0, 0)
    assert limit.samples[0][2] == 1  # in flight when the first call started: itself


class OvertakingRecorder(SteeredLimit):
    """A limit that asks to be told how many calls each call overtook."""

    learns_overtaking = True

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.overtook: list[int] = []

    def on_sample(
        self, start: float, duration: float, inflight: int, dropped: bool, *, overtook: int = 0
    ) -> None:
        super().on_sample(start, duration, inflight, dropped)
        self.overtook.append(overtook)


async def test_a_limit_is_told_how_many_earlier_calls_still_ran_when_a_call_ended() -> None:
    limit = OvertakingRecorder(3)
    guard = ConcurrencyGuard(limit=limit, queue_timeout=10)
    releases = [anyio.Event() for _ in range(5)]
    started: list[int] = []
    async with anyio.create_task_group() as tg:
        for release in releases[:4]:  # one at a time: trio starts tasks in any order
            tg.start_soon(_hold, guard, release, started)
            await anyio.wait_all_tasks_blocked()
        assert (guard.active, guard.queued) == (3, 1)  # the first three run, the fourth waits
        # The third ends while the first two run (the fourth is handed its slot). The second
        # ends while the first runs, but a later call (the third) has ended already: the two
        # counters cannot tell whose end that was, so the count reads 0, low, never high. The
        # fourth ends while the first runs; then the first.
        for call, overtook in [(2, [2]), (1, [2, 0]), (3, [2, 0, 1]), (0, [2, 0, 1, 0])]:
            releases[call].set()
            await anyio.wait_all_tasks_blocked()
            assert limit.overtook == overtook
        tg.start_soon(_hold, guard, releases[4], started)  # alone: it overtakes nobody
        await anyio.wait_all_tasks_blocked()
        releases[4].set()
    assert limit.overtook == [2, 0, 1, 0, 0]
    assert [sample[2] for sample in limit.samples] == [3, 2, 3, 1, 1]  # in flight as each started


class ParallelismLimit(SteeredLimit):
    """A limit that also estimates what the tool serves in parallel."""

    def __init__(self, limit: int, parallelism: float) -> None:
        super().__init__(limit)
        self.parallelism = parallelism


@pytest.mark.parametrize(
    ("parallelism", "standing"),
    [(2.0, 2), (2.4, 4), (1.0, 1), (6.0, 22), (16.0, 32), (float("nan"), 32), (0.2, 32)],
)
async def test_a_standing_queue_is_held_per_call_the_tool_serves_in_parallel(
    parallelism: float, standing: int
) -> None:
    limit = ParallelismLimit(8, parallelism)
    guard = ConcurrencyGuard(limit=limit, max_queue=100, queue_timeout=10)
    assert guard.standing_limit == 32  # 4 per slot until a call has finished
    async with guard.slot():
        pass
    # Guard and tool together hold 5 calls per call served in parallel (4 queued per call, as
    # under a limit equal to the parallelism): the 8 - parallelism calls the limit keeps above
    # it wait inside the tool, so they come off the queue; at least 1; never more than 4 per
    # slot; a nonsense estimate is ignored.
    assert guard.standing_limit == standing


@pytest.mark.parametrize(
    ("parallelism", "queue"), [(1.2, 9), (2.0, 18), (2.4, 18), (2.5, 27), (3.6, 36)]
)
def test_the_default_queue_is_nine_per_call_of_parallelism_to_the_nearest_call(
    parallelism: float, queue: int
) -> None:
    # Not rounded up: a window of lucky calls reads a tool of 2 workers as serving 2.2-2.3 at
    # once, and a queue of 30 kept the first second of an overload waiting behind 20-29 calls.
    # Nine, not ten: the limit runs above the parallelism, about one more per parallel call,
    # and that one waits inside the tool.
    guard = ConcurrencyGuard(limit=ParallelismLimit(4, parallelism), queue_timeout=10)
    assert guard.max_queue == queue


async def test_a_default_queue_follows_the_parallelism_and_cancels_no_waiter() -> None:
    limit = ParallelismLimit(4, 2.0)
    guard = ConcurrencyGuard(limit=limit, queue_timeout=10, predictive=False, clock=FakeClock())
    # 9 per call served in parallel, and the limit's 2 above the parallelism wait in the tool:
    # as 10 per slot under a fixed limit of 2.
    assert guard.max_queue == 18
    first, second, rest = anyio.Event(), anyio.Event(), anyio.Event()
    started: list[int] = []
    refused: list[dict[str, str]] = []

    async def call(release: anyio.Event) -> None:
        try:
            await _hold(guard, release, started)
        except ServerBusy as busy:
            refused.append(details(busy.response.text))

    async with anyio.create_task_group() as tg:
        for release in (first, second):  # these two hold slots (trio starts tasks in any order)
            tg.start_soon(call, release)
            await anyio.wait_all_tasks_blocked()
        for _ in range(2 + 18):
            tg.start_soon(call, rest)
        await anyio.wait_all_tasks_blocked()
        assert (guard.active, guard.queued, refused) == (4, 18, [])
        # Learnt when the next call ends: 3.6 in parallel, a queue of 36 (to the nearest call).
        limit.parallelism = 3.6
        first.set()
        await anyio.wait_all_tasks_blocked()
        assert (guard.max_queue, guard.queued) == (36, 17)
        for _ in range(15):
            tg.start_soon(call, rest)
        await anyio.wait_all_tasks_blocked()
        assert (guard.queued, refused) == (32, [])
        limit.parallelism = 1.0  # never below where it started: 18
        second.set()
        await anyio.wait_all_tasks_blocked()
        assert (guard.max_queue, guard.queued) == (18, 31)  # the waiters it had all stay
        tg.start_soon(call, rest)
        await anyio.wait_all_tasks_blocked()
        assert [(r["reason"], r["max_queue"]) for r in refused] == [("queue_full", "18")]
        rest.set()
    assert len(started) == 4 + 18 + 15
    assert (guard.active, guard.queued) == (0, 0)


@pytest.mark.parametrize("parallelism", [float("nan"), float("inf"), 0.2])
async def test_a_given_queue_stays_and_a_nonsense_estimate_moves_no_queue(
    parallelism: float,
) -> None:
    given = ConcurrencyGuard(limit=ParallelismLimit(4, 4.0), max_queue=15)
    steered = ParallelismLimit(4, parallelism)
    derived = ConcurrencyGuard(limit=steered)
    assert (given.max_queue, derived.max_queue) == (15, 40)  # 10 per slot without an estimate
    given.adaptive_limit.parallelism = 1.0  # type: ignore[union-attr]
    for guard in (given, derived):
        async with guard.slot():
            pass
    assert (given.max_queue, derived.max_queue) == (15, 40)
    steered.parallelism = 6.0  # an estimate at last
    async with derived.slot():
        pass
    assert derived.max_queue == 54  # 9 per call served in parallel


def _moving_guard(clock: FakeClock, limit: SteeredLimit) -> ConcurrencyGuard:
    """Slots whose standing queue is held to 40 under overload (and no predictive shedding)."""
    return ConcurrencyGuard(limit=limit, max_queue=500, queue_timeout=30, standing_limit=40,
                            standing_after=0.1, expected_service_time=0.02, predictive=False,
                            clock=clock)  # fmt: skip


async def _standing_refusals(
    guard: ConcurrencyGuard, clock: FakeClock, arrivals_per_s: float, arrivals: int = 60
) -> int:
    """Every slot held, ``arrivals`` calls arrive at ``arrivals_per_s`` and no slot opens
    meanwhile: how many are refused by the standing-queue limit."""
    held = [guard.acquire_nowait() for _ in range(guard.limit)]
    refusals: list[str] = []

    async def arrive() -> None:
        try:
            await guard.acquire()
        except ServerBusy as busy:
            refusals.append(details(busy.response.text).get("standing", "not standing"))

    async with anyio.create_task_group() as tg:
        for _ in range(arrivals):
            clock.advance(1.0 / arrivals_per_s)
            tg.start_soon(arrive)
            await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    for slot in held:
        slot.release()
    assert set(refusals) <= {"true"}
    return len(refusals)


@pytest.mark.parametrize(("arrivals_per_s", "refused"), [(150.0, 20), (45.0, 0)])
async def test_overload_is_judged_by_how_fast_slots_open_while_the_limit_moves(
    arrivals_per_s: float, refused: int
) -> None:
    """A tool with one worker (20 ms a call) under a limit that went from 1 to 2: two slots now
    open every 20 ms, as one did, since each call waits for the other inside the tool. The
    guard's mean hold still remembers the 20 ms calls of the single slot; over 2 slots it would
    say a slot opens every 11 ms (91 calls/s). Each call that found every slot taken tells the
    truth: its hold over the calls then in flight. A figure from three calls is given 1/sqrt(3)
    more capacity while it settles (79 calls/s for the truth, 144 for the mean hold), so 150
    calls/s (3x) is overload on the truth and a burst on the mean hold."""
    clock = FakeClock()
    limit = SteeredLimit(1)
    limit.next = 2
    guard = _moving_guard(clock, limit)
    alone = guard.acquire_nowait()
    clock.advance(0.020)
    alone.release()
    assert guard.limit == 2
    first, second = guard.acquire_nowait(), guard.acquire_nowait()
    clock.advance(0.040)  # two calls inside a one-worker tool: 40 ms each
    first.release()
    second.release()
    # 150/s against 50 calls/s: past the standing limit, newcomers are refused. 45/s is
    # within what the slots serve: the queue absorbs it as a burst, whatever its length.
    assert await _standing_refusals(guard, clock, arrivals_per_s) == refused


async def test_calls_that_found_a_free_slot_do_not_tell_how_fast_slots_open() -> None:
    """In a lull, calls run alone and quickly (5 ms over 2 slots would read as a slot opening
    every 2.5 ms); what the tool does when every slot is taken (two 40 ms calls: one every
    20 ms) is what tells overload from a burst when the calls come back at 1.5x."""
    clock = FakeClock()
    guard = _moving_guard(clock, SteeredLimit(2))
    first, second = guard.acquire_nowait(), guard.acquire_nowait()
    clock.advance(0.040)
    first.release()
    second.release()
    for _ in range(50):
        alone = guard.acquire_nowait()
        clock.advance(0.005)
        alone.release()
    assert await _standing_refusals(guard, clock, 75.0) == 20


@pytest.mark.parametrize(
    ("parallelism", "arrivals_per_s", "refused"),
    [(2.0, 200.0, 48), (2.0, 80.0, 0), (1.6, 100.0, 60), (1.6, 40.0, 0)],
)
async def test_under_a_limit_that_knows_the_parallelism_every_call_tells_how_fast_slots_open(
    parallelism: float, arrivals_per_s: float, refused: int
) -> None:
    """50 calls of 20 ms, one at a time, under a limit of 4 that says the tool serves
    ``parallelism`` calls at once: none found every slot taken, but each tells how fast slots
    open once they are, as under a fixed limit: its hold over the calls the tool serves in
    parallel, rounded down (a tool of one worker read as 1.6 is not taken to serve two). Over
    the 4 slots they would say a slot opens every 5 ms (200 calls/s); the tool serves 100 (50
    for one worker). So 2x its capacity is overload, and 0.8x is not."""
    clock = FakeClock()
    guard = _moving_guard(clock, ParallelismLimit(4, parallelism))
    for _ in range(50):
        alone = guard.acquire_nowait()
        clock.advance(0.020)
        alone.release()
    assert await _standing_refusals(guard, clock, arrivals_per_s, arrivals=100) == refused


async def test_lowering_the_limit_lets_the_calls_in_flight_drain() -> None:
    limit = SteeredLimit(4)
    guard = ConcurrencyGuard(limit=limit, queue_timeout=10)
    releases = [anyio.Event() for _ in range(4)]
    later = anyio.Event()
    started: list[int] = []
    async with anyio.create_task_group() as tg:
        for release in releases:
            tg.start_soon(_hold, guard, release, started)
        await anyio.wait_all_tasks_blocked()
        for _ in range(3):
            tg.start_soon(_hold, guard, later, started)
        await anyio.wait_all_tasks_blocked()
        assert (guard.active, guard.queued) == (4, 3)
        limit.next = 1
        releases[0].set()  # the limit drops to 1; three calls still run and are not cancelled
        await anyio.wait_all_tasks_blocked()
        assert (guard.limit, guard.active, guard.queued) == (1, 3, 3)
        releases[1].set()
        releases[2].set()
        await anyio.wait_all_tasks_blocked()
        assert (guard.active, guard.queued) == (1, 3)  # drained to the limit, nobody handed on
        releases[3].set()  # now a slot is handed to the first waiter
        await anyio.wait_all_tasks_blocked()
        assert (guard.active, guard.queued) == (1, 2)
        assert max(started[4:]) == 1  # every later call ran alone
        later.set()
    assert (guard.active, guard.queued) == (0, 0)


async def test_a_refusal_reports_the_limit_in_force() -> None:
    limit = SteeredLimit(2)
    guard = ConcurrencyGuard(limit=limit, max_queue=0, name="t")
    release = anyio.Event()
    started: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_hold, guard, release, started)
        await anyio.wait_all_tasks_blocked()
        limit.next = 1
        async with guard.slot():  # the second slot; ending it teaches the limit 1
            pass
        with pytest.raises(ServerBusy) as refused:
            async with guard.slot():
                pass
        release.set()
    assert details(refused.value.response.text)["max_active"] == "1"


async def test_a_failing_limit_never_changes_an_answer() -> None:
    guard = ConcurrencyGuard(limit=BrokenLimit(2))
    for _ in range(3):
        async with guard.slot():
            pass
    assert (guard.limit, guard.active) == (2, 0)
    assert guard.statistics().admitted == 3


def test_a_fixed_limit_is_max_active() -> None:
    guard = ConcurrencyGuard(limit=FixedLimit(3))
    assert (guard.limit, guard.max_active, guard.adaptive_limit) == (3, 3, None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs max_active="),
        ({"max_active": 2, "limit": FixedLimit(2)}, "give one of the two"),
        ({"limit": 3}, "limit must be a Limit"),
        ({"limit": SteeredLimit(0)}, "limit.limit=0 is invalid"),
    ],
)
def test_bad_limits_are_refused_at_construction(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ConcurrencyGuard(**kwargs)  # type: ignore[arg-type]


# -- random programs ----------------------------------------------------------------------------

ARRIVE, FINISH, CANCEL, STEER = "arrive", "finish", "cancel", "steer"

programs = st.lists(
    st.tuples(
        st.sampled_from([ARRIVE] * 4 + [FINISH] * 3 + [CANCEL, STEER, STEER]),
        st.integers(0, 1000),
    ),
    min_size=30,
    max_size=150,
)


@dataclass
class World:
    guard: ConcurrencyGuard
    limit: SteeredLimit
    calls: list[Call] = field(default_factory=list)
    outcomes: dict[int, str] = field(default_factory=dict)
    active_before: int = 0
    entered_before: int = 0

    async def run_call(self, call: Call) -> None:
        outcome = "cancelled"
        with call.scope:
            try:
                async with self.guard.slot():
                    call.entered = True
                    await call.done.wait()
                    outcome = "ok"
            except ServerBusy:
                outcome = "shed"
        assert call.index not in self.outcomes, "a call ended twice"
        self.outcomes[call.index] = outcome

    def check(self) -> None:
        guard = self.guard
        running = sum(c.entered and c.index not in self.outcomes for c in self.calls)
        assert guard.active == running  # no permit leaks, none is made up
        assert guard.limit == self.limit.limit  # the limit in force is the one decided
        # Never more than the limit in force, except calls admitted before a decrease (their
        # number only falls): nothing is admitted while the guard is at or above its limit.
        assert guard.active <= max(guard.limit, self.active_before)
        if guard.queued:
            assert guard.active >= guard.limit  # a waiter never coexists with a free slot
        entered = sum(c.entered for c in self.calls)
        if entered > self.entered_before:  # someone was admitted: only up to the limit
            assert guard.active <= guard.limit
        self.active_before, self.entered_before = guard.active, entered


async def drive(world: World, program: list[tuple[str, int]]) -> None:
    async with anyio.create_task_group() as tg:
        for action, pick in program:
            live = [c for c in world.calls if c.index not in world.outcomes]
            holders = [c for c in live if c.entered]
            if action == ARRIVE:
                call = Call(len(world.calls))
                world.calls.append(call)
                tg.start_soon(world.run_call, call)
            elif action == FINISH and holders:
                holders[pick % len(holders)].done.set()
            elif action == CANCEL and live:
                live[pick % len(live)].scope.cancel()
            elif action == STEER:
                world.limit.next = 1 + pick % 5  # applied when the next call ends
            await anyio.wait_all_tasks_blocked()
            world.check()
        for call in world.calls:
            call.scope.cancel()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(program=programs, initial=st.integers(1, 4), max_queue=st.integers(0, 8))
async def test_random_programs_under_a_moving_limit(
    program: list[tuple[str, int]], initial: int, max_queue: int
) -> None:
    limit = SteeredLimit(initial)
    # On the loop's clock, with a queue timeout no program reaches (checked below): a program's
    # steps only let anyio's polls pass (0.1 s each, on asyncio), and no waiter gives up.
    guard = ConcurrencyGuard(
        limit=limit, max_queue=max_queue, queue_timeout=3600, clock=anyio.current_time
    )
    world = World(guard, limit)
    began = anyio.current_time()
    await drive(world, program)
    assert anyio.current_time() - began < 3600
    assert (guard.active, guard.queued) == (0, 0)
    assert sorted(world.outcomes) == list(range(len(world.calls)))  # each call exactly once
    assert guard.statistics().admitted == sum(c.entered for c in world.calls)
    # One sample per call that ended served; a cancelled call teaches nothing (its caller left).
    served = sum(c.entered and world.outcomes[c.index] == "ok" for c in world.calls)
    assert len(limit.samples) == served


async def test_a_move_by_half_or_more_is_logged_once_per_second(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="fusion_guard")
    clock = FakeClock(1000.0)
    limit = SteeredLimit(4)
    guard = ConcurrencyGuard(limit=limit, name="search", clock=clock)

    async def one_call_teaching(value: int) -> None:
        limit.next = value
        async with guard.slot():
            pass

    await one_call_teaching(5)  # +25 %: not logged
    await one_call_teaching(2)  # half of 4: logged
    await one_call_teaching(8)  # double, but within the second: held back
    clock.advance(1.0)
    await one_call_teaching(9)  # now logged, against the last logged value (2)
    moved = [r for r in caplog.records if r.getMessage().startswith("concurrency_limit_moved")]
    assert [(r.fields["limit"], r.fields["previous"]) for r in moved] == [(2, 4), (9, 2)]
    assert all(r.fields["tool"] == "search" for r in moved)


async def test_under_sustained_overload_the_slots_beyond_the_parallelism_drain(
    clock: FakeClock,
) -> None:
    # A limit of 8 over a tool read as serving 2 in parallel; calls of about a second each.
    limit = ParallelismLimit(8, 2.0)
    guard = ConcurrencyGuard(limit=limit, max_queue=100, queue_timeout=30, predictive=False,
                             expected_service_time=1.0, clock=clock)  # fmt: skip
    held = [guard.acquire_nowait() for _ in range(8)]
    async with anyio.create_task_group() as tg:
        for _ in range(20):  # 100 a second, against 8 slots opening 8 times a second
            clock.advance(0.01)
            tg.start_soon(guard.acquire)
            await anyio.wait_all_tasks_blocked()
        assert (guard.active, guard.queued) == (8, 20)
        # A call ends: the limit still says 8, but in a standing queue under overload only the
        # parallelism and one more are in force. The calls above drain; none is handed on.
        for ended in range(1, 6):
            held.pop().release()
            await anyio.wait_all_tasks_blocked()
            assert (guard.limit, guard.active, guard.queued) == (3, 8 - ended, 20)
        held.pop().release()  # at 3 in flight, an end hands its slot to a waiter
        await anyio.wait_all_tasks_blocked()
        assert (guard.limit, guard.active, guard.queued) == (3, 3, 19)
        tg.cancel_scope.cancel()
    # The queue gone, nothing stands: the next call to end puts the whole limit back in force.
    held.pop().release()
    assert (guard.limit, guard.queued) == (8, 0)
    assert limit.limit == 8
