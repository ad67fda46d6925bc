"""What a finished call tells the adaptive limit (``admission/_feedback.py``): one client's
timeouts, while the tool keeps serving the others, do not collapse the limit for everyone; a tool
that fails every client still shrinks it at once; arguments that failed validation teach it
nothing. The rules with plain numbers, then a 4-worker tool in virtual time on asyncio and trio
(its deadlines are real guard deadlines on the loop's clock), then hypothesis."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_guard import ConcurrencyGuard, GradientLimit, HandlerTimeout, ServerBusy
from fusion_guard.admission._feedback import (
    SERVED_BY_OTHERS,
    TROUBLE_WEIGHT,
    CapacityFeedback,
)
from virtual_time import virtual_time_backends


def _feedback(queued_by_others: int = 0) -> CapacityFeedback:
    return CapacityFeedback(lambda client: queued_by_others)


anyio_backend = virtual_time_backends()

DEADLINE = 0.5
SERVICE = 0.010  # an honest call's time on one of the tool's workers
WORKERS = 4


# -- the rules, with plain numbers ---------------------------------------------------------------


def test_a_timeout_is_a_drop_when_nobody_else_was_served_meanwhile() -> None:
    feedback = _feedback()
    stuck = feedback.seat("tarpit")
    assert feedback.ended(stuck, 0.0, DEADLINE, 1, DEADLINE, "timeout") is True


def test_a_timeout_is_its_callers_own_while_the_others_were_served_well() -> None:
    feedback = _feedback()
    stuck = feedback.seat("tarpit")
    for _ in range(SERVED_BY_OTHERS):
        assert feedback.ended(feedback.seat("honest"), 0.0, SERVICE, 2, DEADLINE, "ok") is False
    assert feedback.ended(stuck, 0.0, DEADLINE, 2, DEADLINE, "timeout") is None


def test_the_callers_own_fast_calls_do_not_excuse_its_timeouts() -> None:
    feedback = _feedback()
    stuck = feedback.seat("tarpit")
    for _ in range(10 * SERVED_BY_OTHERS):  # one client alone: nobody else to compare with
        feedback.ended(feedback.seat("tarpit"), 0.0, SERVICE, 2, DEADLINE, "ok")
    assert feedback.ended(stuck, 0.0, DEADLINE, 2, DEADLINE, "timeout") is True


def test_a_timeout_counts_when_the_others_were_in_trouble_too() -> None:
    feedback = _feedback()
    stuck = feedback.seat("a")
    # Four served well for each near its deadline is not enough: one more is needed.
    for _ in range(TROUBLE_WEIGHT + SERVED_BY_OTHERS - 1):
        feedback.ended(feedback.seat("b"), 0.0, SERVICE, 1, DEADLINE, "ok")
    assert feedback.ended(feedback.seat("c"), 0.0, 0.9 * DEADLINE, 1, DEADLINE, "ok") is False
    assert feedback.ended(stuck, 0.0, DEADLINE, 1, DEADLINE, "timeout") is True


def test_the_others_must_have_turned_a_whole_crowd_over() -> None:
    feedback = _feedback()
    stuck = feedback.seat("a")
    for _ in range(8):
        feedback.ended(feedback.seat("b"), 0.0, SERVICE, 9, DEADLINE, "ok")
    # Eight served, nine in flight when it started: the tool did not turn its crowd over.
    assert feedback.ended(stuck, 0.0, DEADLINE, 9, DEADLINE, "timeout") is True


@pytest.mark.parametrize("queued_by_others", [0, 3])
def test_calls_stuck_together_are_cut_for_once_while_other_clients_wait(
    queued_by_others: int,
) -> None:
    feedback = _feedback(queued_by_others)
    stuck = [feedback.seat(f"tarpit-{n}") for n in range(4)]  # every slot, all stalled
    signals = [feedback.ended(seat, 0.0, DEADLINE, 4, DEADLINE, "timeout") for seat in stuck]
    if queued_by_others:  # one cut; the waiting clients' calls get the slots and tell
        assert signals == [True, None, None, None]
    else:  # nobody else to tell: every timeout is a drop, as before
        assert signals == [True, True, True, True]
    later = feedback.seat("tarpit-0")  # admitted after the cut: its timeout is a round of its own
    assert feedback.ended(later, DEADLINE, DEADLINE, 2, DEADLINE, "timeout") is True


def test_invalid_arguments_teach_nothing_and_records_last_only_while_calls_hold_slots() -> None:
    feedback = _feedback()
    seats = [feedback.seat(f"client-{n}") for n in range(100)]
    assert feedback.clients == 100
    for seat in seats:
        assert feedback.ended(seat, 0.0, 0.0, 1, DEADLINE, "ok", reached_tool=False) is None
    assert feedback.clients == 0  # however many keys came and went


# -- a 4-worker tool in virtual time -------------------------------------------------------------


@dataclass
class Tool:
    """Four workers for honest calls (10 ms each); a stalling call waits on a tarpit, without a
    worker, far past its deadline. ``stalls_everyone`` makes every call stall from then on."""

    workers: anyio.Semaphore = field(default_factory=lambda: anyio.Semaphore(WORKERS))
    stalls_everyone: bool = False

    async def call(self, stall: bool) -> None:
        if stall or self.stalls_everyone:
            await anyio.sleep(10 * DEADLINE)
        async with self.workers:
            await anyio.sleep(SERVICE)


@dataclass
class Run:
    served: int = 0  # honest calls answered after the warm-up
    trace: list[tuple[float, int]] = field(default_factory=list)
    """(time, limit) every 10 ms after the warm-up."""

    @property
    def limits(self) -> list[int]:
        return [limit for _, limit in self.trace]

    def first(self, since: float, at_most: int) -> float:
        """When the limit was first seen at ``at_most`` or below from ``since`` on."""
        return next(t for t, limit in self.trace if t >= since and limit <= at_most)


async def run_tool(
    guard: ConcurrencyGuard,
    tool: Tool,
    *,
    seconds: float,
    warm_up: float,
    stallers: int = 3,
    stalls_at_once: int = 1,
    honest_key: bool = True,
    stall_pause: float = 0.0,
) -> Run:
    """Four honest clients, four callers each, calling in a loop; ``stallers`` clients keeping
    ``stalls_at_once`` stalling calls each in flight, sending the next ``stall_pause`` seconds
    after a timeout. A refused caller comes back in 10 ms."""
    run = Run()
    start = anyio.current_time()
    end, measured_from = start + seconds, start + warm_up

    async def caller(client: str | None, stall: bool) -> None:
        while anyio.current_time() < end:
            try:
                async with guard.slot(timeout=DEADLINE, client=client):
                    await tool.call(stall)
                if not stall and anyio.current_time() >= measured_from:
                    run.served += 1
            except ServerBusy:
                await anyio.sleep(0.010)
            except HandlerTimeout:
                await anyio.sleep(stall_pause)

    async def watch() -> None:
        await anyio.sleep(warm_up)
        while anyio.current_time() < end:
            run.trace.append((anyio.current_time(), guard.limit))
            await anyio.sleep(0.010)

    async with anyio.create_task_group() as tg:
        for client in range(4):
            for _ in range(4):
                tg.start_soon(caller, f"honest-{client}" if honest_key else None, False)
        for client in range(stallers):
            for _ in range(stalls_at_once):
                tg.start_soon(caller, f"tarpit-{client}", True)
        tg.start_soon(watch)
    return run


def _auto(**kwargs: object) -> ConcurrencyGuard:
    return ConcurrencyGuard(
        limit=GradientLimit(), queue_timeout=2.0, clock=anyio.current_time, **kwargs
    )


@pytest.mark.anyio
@pytest.mark.parametrize("honest_key", [True, False], ids=["keyed", "keyless"])
async def test_three_clients_stalling_past_the_deadline_do_not_collapse_the_limit(
    honest_key: bool,
) -> None:
    fixed = ConcurrencyGuard(8, queue_timeout=2.0, clock=anyio.current_time)
    best = await run_tool(fixed, Tool(), seconds=6.0, warm_up=2.0, honest_key=honest_key)
    auto = await run_tool(_auto(), Tool(), seconds=6.0, warm_up=2.0, honest_key=honest_key)
    # Before the rule: 4 calls a second, the limit held at 1-2 by the stalled calls' timeouts.
    assert auto.served >= 0.9 * best.served
    assert min(auto.limits) > 3  # room for the three stalled calls and honest ones


@pytest.mark.anyio
async def test_a_tool_that_stalls_for_everyone_still_shrinks_the_limit_at_once() -> None:
    guard, tool = _auto(), Tool()
    stalled_at = 3.0  # seconds into the run

    async def stall_later() -> None:
        await anyio.sleep(stalled_at)
        tool.stalls_everyone = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(stall_later)
        run = await run_tool(guard, tool, seconds=5.0, warm_up=0.0, stallers=0)
    stall = run.trace[0][0] + stalled_at
    before = next(limit for t, limit in reversed(run.trace) if t < stall)
    assert before >= 4  # the tool serves 4 at once: the limit runs about twice that
    # The calls admitted as it stalled end at their deadline: the limit halves then...
    assert run.first(stall, (before + 1) // 2) - stall <= DEADLINE + 0.05
    # ... and again at each round of calls admitted since.
    assert run.first(stall, 2) - stall <= 3 * DEADLINE + 0.05


# -- hypothesis ----------------------------------------------------------------------------------


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    stalls_at_once=st.integers(1, 3),
    honest_key=st.booleans(),
    pause=st.sampled_from([0.0, 0.05, 0.3]),
)
@pytest.mark.anyio
async def test_one_clients_timeouts_never_collapse_the_limit(
    stalls_at_once: int, honest_key: bool, pause: float
) -> None:
    guard = _auto()
    limit = guard.adaptive_limit
    assert isinstance(limit, GradientLimit)
    run = await run_tool(
        guard,
        Tool(),
        seconds=4.0,
        warm_up=1.5,
        stallers=1,
        stalls_at_once=stalls_at_once,
        honest_key=honest_key,
        stall_pause=pause,
    )
    assert all(limit.min_limit <= seen <= limit.max_limit for seen in run.limits)
    # Never down to the floor: room for every stalled call and for honest ones.
    assert min(run.limits) > stalls_at_once
