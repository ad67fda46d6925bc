"""A fresh guard's first burst as it arrives over a real transport (calls a few milliseconds
apart, not at one instant), in virtual time: how often each extra caller is refused when it
follows its ``retry_after``, and whether every refusal's figures agree with its reason."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import anyio
import pytest
from concurrency_support import envelope_details, fill
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_guard import ConcurrencyGuard, ServerBusy
from fusion_guard.admission._adaptive import GradientLimit
from fusion_guard.admission._adaptive_tuning import (
    FIRST_PROBE_CALLS,
    FIRST_SAMPLES,
    LEVEL_REFERENCE,
    LEVEL_SAMPLES,
    PROBE_GRACE_CALLS,
)
from fusion_guard.testing import FakeClock
from virtual_time import run_virtual

BACKENDS = ["asyncio", "trio"]


@dataclass
class Refusal:
    caller: int
    at: float
    reason: str
    details: dict[str, str]
    retry_after: float


@dataclass
class Burst:
    done: float = 0.0
    """When the last call answered OK, from the first arrival."""
    refusals: list[Refusal] = field(default_factory=list)


async def burst(guard: ConcurrencyGuard, calls: int, gap: float, hold: float) -> Burst:
    """``calls`` callers arriving ``gap`` seconds apart, each call holding its slot ``hold``;
    a refused caller comes back after exactly its ``retry_after``, until it is served."""
    result = Burst()
    start = anyio.current_time()

    async def caller(index: int) -> None:
        await anyio.sleep(index * gap)
        while True:
            try:
                async with guard.slot():
                    await anyio.sleep(hold)
            except ServerBusy as busy:
                advice = busy.retry_after
                assert advice is not None  # a SERVER_BUSY always carries one
                details = envelope_details(busy.response.text)
                at = anyio.current_time() - start
                result.refusals.append(Refusal(index, at, busy.reason, details, advice))
                await anyio.sleep(advice)
            else:
                result.done = max(result.done, anyio.current_time() - start)
                return

    async with anyio.create_task_group() as tg:
        for index in range(calls):
            tg.start_soon(caller, index)
    return result


def inconsistent(refusal: Refusal) -> str | None:
    """What in a refusal's envelope contradicts its reason, or None."""
    details = refusal.details
    active, queued = int(details["active"]), int(details["queued"])
    max_active, max_queue = int(details["max_active"]), int(details["max_queue"])
    if details["reason"] != refusal.reason:
        return f"reason {details['reason']} in an envelope of {refusal.reason}"
    if active > max_active:
        return f"{active} active of {max_active}"
    if refusal.reason == "queue_full" and queued < max_queue:
        return f"queue_full at {queued} queued of {max_queue}"
    if refusal.reason == "queue_timeout" and queued > max_queue:
        return f"queue_timeout at {queued} queued of {max_queue}"
    return None


def fresh_guard() -> ConcurrencyGuard:
    """A 2-slot tool as ``Guard(max_active=2)`` makes it: queue 20, queue_timeout 5 s, the
    0.1 s prior; its clock the (virtual) event loop's."""
    return ConcurrencyGuard(2, queue_timeout=5.0, clock=anyio.current_time)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fresh_guard_refuses_each_extra_caller_of_a_staggered_burst_about_once(
    backend: str,
) -> None:
    # 20 calls of 1 s, 5 ms apart, at 2 slots: 10 are served within the 5 s queue timeout and
    # 10 cannot be. Judged standing on the 0.1 s prior, the queue was held to 8 and the extra
    # callers were refused 24-25 times (queue_full at 8 of 20), told to come back in 0.05-0.49 s.
    async def scenario() -> Burst:
        return await burst(fresh_guard(), 20, 0.005, 1.0)

    cold = run_virtual(scenario, backend)
    assert len(cold.refusals) <= 12
    assert [r for r in cold.refusals if inconsistent(r)] == []
    assert all(r.details["queued"] == r.details["max_queue"] for r in cold.refusals
               if r.reason == "queue_full")  # fmt: skip
    assert cold.done <= 1.1 * 20 * 1.0 / 2  # the ideal drain: 20 holds over 2 slots


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_standing_refusal_reports_the_queue_in_force(backend: str) -> None:
    # Warm, and calls arriving 4 times as fast as the slots open: the standing queue is held to
    # its limit (8), and says so in its own figures.
    async def scenario() -> Burst:
        guard = fresh_guard()
        await burst(guard, 2, 0.0, 1.0)  # measured: a 1 s hold
        return await burst(guard, 40, 0.125, 1.0)

    warm = run_virtual(scenario, backend)
    standing = [r for r in warm.refusals if r.details.get("standing") == "true"]
    assert standing  # the overload was seen
    assert {(r.details["queued"], r.details["max_queue"]) for r in standing} == {("8", "8")}
    assert [r for r in warm.refusals if inconsistent(r)] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_warm_guard_drains_a_burst_near_the_ideal_time(backend: str) -> None:
    # 40 calls of 1 s, 5 ms apart, at 2 slots whose hold is known, following the advice.
    async def scenario() -> Burst:
        guard = fresh_guard()
        await burst(guard, 2, 0.0, 1.0)
        return await burst(guard, 40, 0.005, 1.0)

    warm = run_virtual(scenario, backend)
    assert warm.done <= 1.1 * 40 * 1.0 / 2
    assert [r for r in warm.refusals if inconsistent(r)] == []


@pytest.mark.anyio
async def test_on_the_prior_the_promise_waits_out_the_queue_the_calls_in_flight_vouch_for(
    clock: FakeClock,
) -> None:
    guard = ConcurrencyGuard(2, max_queue=4, queue_timeout=30, clock=clock)  # 0.1 s prior
    async with anyio.create_task_group() as tg:
        await fill(guard, tg, 4)
        clock.advance(0.06)  # the calls in flight have held 0.06 s: still the prior's to say
        with pytest.raises(ServerBusy) as info:
            await guard.acquire()
        tg.cancel_scope.cancel()
    # 4 queued drain in at least 4 x 0.06 / 2 s, 2 whole steps of the prior: the promise is the
    # opening after them, not the next one (back then, the queue that refused it still stood)
    assert info.value.retry_after == pytest.approx(3 * 0.1 / 2)


@settings(max_examples=100, deadline=None)
@given(
    backend=st.sampled_from(BACKENDS),
    calls=st.integers(1, 40),
    gap=st.sampled_from([0.0, 0.001, 0.005, 0.02]),
    hold=st.sampled_from([0.01, 0.05, 0.1, 0.3, 1.0]),
    slots=st.integers(1, 4),
    max_queue=st.none() | st.integers(0, 20),
    warm=st.booleans(),
)
def test_every_refusal_of_any_burst_agrees_with_its_reason(
    backend: str,
    calls: int,
    gap: float,
    hold: float,
    slots: int,
    max_queue: int | None,
    warm: bool,
) -> None:
    # queue_full with fewer queued than max_queue says, more running than max_active: never.
    # (A standing queue that grew past its limit before overload was seen reads queued above
    # max_queue: over its limit, not short of it.)
    async def scenario() -> Burst:
        guard = ConcurrencyGuard(slots, max_queue=max_queue, clock=anyio.current_time)
        if warm:
            await burst(guard, slots, 0.0, hold)
        return await burst(guard, calls, gap, hold)

    result = run_virtual(scenario, backend)
    assert [inconsistent(r) for r in result.refusals if inconsistent(r)] == []


# -- the default Guard (max_active="auto"): issue 41's burst ----------------------------------


async def guarded_burst(
    calls: int, gap: float, hold: float, warm: bool, advice: list[float] | None = None
) -> float:
    """``calls`` callers ``gap`` apart at a fresh default ``Guard()`` of a tool with 2 workers
    (calls beyond them wait inside it), each refused caller back at exactly its
    ``retry_after``: when the last is served, over the ideal drain (calls x hold / 2).
    ``advice``, when given, receives the ``retry_after`` of each first refusal of the last
    burst's callers (in the order they were refused)."""
    from fusion_guard import Guard, parse_tool_error

    guard = Guard(clock=anyio.current_time, metrics=False)
    workers = anyio.Semaphore(2)

    async def tool() -> str:
        async with workers:
            await anyio.sleep(hold)
        return "ok"

    async def once(told: list[float] | None = None) -> float:
        start = anyio.current_time()
        done = 0.0

        async def caller(index: int) -> None:
            nonlocal done
            await anyio.sleep(index * gap)
            first = True
            while (response := await guard.call("work", tool)).is_error:
                refusal = parse_tool_error(response.text)
                assert refusal is not None
                assert refusal.retry_after is not None
                if told is not None and first:
                    told.append(refusal.retry_after)
                first = False
                await anyio.sleep(refusal.retry_after)
            done = max(done, anyio.current_time() - start)

        async with anyio.create_task_group() as tg:
            for index in range(calls):
                tg.start_soon(caller, index)
        return done / (calls * hold / 2)

    if warm:
        await once()
    return await once(advice)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gap", [0.0, 0.005])
def test_a_cold_burst_at_the_default_guard_drains_near_the_ideal_time(
    backend: str, gap: float
) -> None:
    # Issue 41: 30 calls of 50 ms at a fresh 2-worker tool, retrying at retry_after: 1.00-1.01x
    # in virtual time (the 1.67x was not reproduced here).
    async def scenario() -> float:
        return await guarded_burst(30, gap, 0.05, warm=False)

    assert run_virtual(scenario, backend) <= 1.5


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("gap", [0.0, 0.005])
def test_a_warm_burst_at_the_default_guard_drains_near_the_ideal_time(
    backend: str, gap: float
) -> None:
    async def scenario() -> float:
        return await guarded_burst(30, gap, 0.05, warm=True)

    assert run_virtual(scenario, backend) <= 1.1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("calls", "gap", "hold"),
    [(40, 0.002, 0.2), (40, 0.005, 0.05), (60, 0.0, 0.05), (60, 0.0, 0.2), (60, 0.01, 0.2)],
)
def test_a_warm_burst_of_forty_or_sixty_drains_near_the_ideal_time(
    backend: str, calls: int, gap: float, hold: float
) -> None:
    # Issue 41. 40 callers outlast the first probe's grace: it cut to one slot (no call
    # overtakes another at a FIFO pool) and waited there for its quiet calls, 1.65x and 1.37x
    # the ideal drain; the calls at two in flight take as long as those alone, so the probe
    # holds two. Told the mean hold over the slots in force, the refused callers of a second
    # burst of 60 came back 0.144 s apart at a limit of 2, whose 200 ms calls open one every
    # 0.1 s (the mean still carried holds of calls waiting inside the tool at 3-4 slots), and
    # at a limit of 4 0.064 s apart: 1.16-1.28x the ideal drain.
    async def scenario() -> float:
        return await guarded_burst(calls, gap, hold, warm=True)

    assert run_virtual(scenario, backend) <= 1.1


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_refused_of_a_warm_burst_are_told_the_tools_openings_whatever_the_limit(
    backend: str,
) -> None:
    # 2 workers of 200 ms calls open one every 0.1 s, at a limit of 2, 3 or 4 alike: the
    # callers refused together are told successive openings that far apart.
    told: list[float] = []

    async def scenario() -> float:
        return await guarded_burst(60, 0.0, 0.2, warm=True, advice=told)

    run_virtual(scenario, backend)
    promised = sorted(told)  # all refused at the burst's first instant (gap 0)
    steps = [later - sooner for sooner, later in itertools.pairwise(promised) if later > sooner]
    assert len(steps) >= 10
    assert all(step == pytest.approx(0.1, rel=0.1) for step in steps), steps


# -- the first probe's room, shown by the latency of the calls in flight (plain numbers) -------


def _fifo_calls(
    limit: GradientLimit, calls: int, inflight: int, latency: float, now: float
) -> float:
    """``calls`` calls, each started with ``inflight`` in flight and taking ``latency``."""
    for _ in range(calls):
        limit.on_sample(now, latency, inflight, False)
        now += latency / inflight
    return now


def test_calls_at_two_as_fast_as_those_alone_count_as_quiet_before_the_first_baseline() -> None:
    limit = GradientLimit()
    now = _fifo_calls(limit, LEVEL_REFERENCE, 1, 0.050, 0.0)  # a few calls alone
    now = _fifo_calls(limit, LEVEL_SAMPLES - 1, 2, 0.050, now)
    assert limit.baseline == pytest.approx(0.050)  # not measured: no probe either
    now = _fifo_calls(limit, FIRST_SAMPLES - LEVEL_REFERENCE, 2, 0.055, now)
    # The LEVEL_SAMPLES-th call at two showed the tool queues none of them: from it on they
    # were quiet, and the first baseline came from them (FIRST_SAMPLES quiet calls), no probe.
    assert limit.limit == 4
    assert 0.050 < limit.baseline <= 0.055
    for _ in range(2 * limit.window_samples):  # measured: windows of slow calls cut it
        limit.on_sample(now, 0.300, 4, False)
        now += 0.075
    assert limit.limit < 4


@pytest.mark.parametrize(
    ("latencies", "why"),
    [
        ([0.090, 0.100, 0.085, 0.095, 0.100], "one worker: a call at two waits for the other"),
        ([0.010, 0.050, 0.150, 0.040, 0.030], "a heavy tail: five calls tell no median"),
    ],
)
def test_calls_at_two_not_shown_uncrowded_leave_the_first_probe_its_cut(
    latencies: list[float], why: str
) -> None:
    limit = GradientLimit()
    now = _fifo_calls(limit, LEVEL_REFERENCE, 1, 0.050, 0.0)
    for n in range(FIRST_PROBE_CALLS):  # crowded calls at 2, none shown uncrowded
        now = _fifo_calls(limit, 1, 2, latencies[n % len(latencies)], now)
    assert limit.limit == 2, why  # the first probe, at its grace
    now += 0.2  # the calls admitted before it have ended
    for n in range(PROBE_GRACE_CALLS):
        now = _fifo_calls(limit, 1, 2, latencies[n % len(latencies)], now)
    assert limit.limit == 1, why  # a standing load: room for quiet calls


def test_the_first_probe_opens_to_two_once_calls_alone_show_two_were_uncrowded() -> None:
    limit = GradientLimit()
    now = _fifo_calls(limit, 1, 1, 0.050, 0.0)  # one call alone: no reference yet
    now = _fifo_calls(limit, FIRST_PROBE_CALLS, 3, 0.075, now)  # crowded from the start
    assert limit.limit == 2
    now += 0.2  # the calls admitted before it have ended
    now = _fifo_calls(limit, PROBE_GRACE_CALLS, 2, 0.050, now)  # a standing load at two
    assert limit.limit == 1
    # A second call alone: the calls at two took as long, so the probe holds two again.
    now = _fifo_calls(limit, 1, 1, 0.050, now)
    assert limit.limit == 2
    while math.isnan(limit.baseline) or limit.limit == 2:  # the rest of the probe at two
        now = _fifo_calls(limit, 1, 2, 0.050, now)
    assert limit.baseline == pytest.approx(0.050)
    assert limit.limit == 4  # measured: back to the limit held before the probe


def test_a_count_shown_uncrowded_is_taken_back_when_its_calls_slow_down() -> None:
    # A tool that lost its second worker during the warm-up: calls at two now wait for the
    # other, and stop counting as quiet once the last LEVEL_SAMPLES of them say so.
    limit = GradientLimit()
    now = _fifo_calls(limit, LEVEL_REFERENCE, 1, 0.050, 0.0)
    now = _fifo_calls(limit, LEVEL_SAMPLES + 2, 2, 0.050, now)  # three of them quiet
    _fifo_calls(limit, 3 * LEVEL_SAMPLES, 2, 0.100, now)
    # Two of the slow calls joined the five quiet calls of 50 ms before the last five at two
    # said they wait: the uncrowded latency is still the tool's, not 100 ms.
    assert limit.baseline == pytest.approx(0.050)


def test_the_first_probe_gives_up_room_shown_once_its_calls_slow_down() -> None:
    limit = GradientLimit()
    now = _fifo_calls(limit, 1, 1, 0.050, 0.0)
    now = _fifo_calls(limit, FIRST_PROBE_CALLS, 3, 0.075, now)
    now += 0.2
    now = _fifo_calls(limit, PROBE_GRACE_CALLS, 2, 0.050, now)
    now = _fifo_calls(limit, 1, 1, 0.050, now)
    assert limit.limit == 2  # room shown at two
    # The tool lost a worker: calls at two now wait for the other. Once the last five at two
    # say so, the probe goes back to one slot, where calls come alone.
    now = _fifo_calls(limit, LEVEL_SAMPLES, 2, 0.100, now)
    assert limit.limit == 1
    while limit.limit == 1:  # the rest of the probe: calls alone take as long as before
        now = _fifo_calls(limit, 1, 1, 0.050, now)
    assert limit.baseline == pytest.approx(0.050)
    assert limit.limit == 4  # measured: back to the limit held before the probe
