"""Errors as overload signals (``admission/_feedback.py``, ``GradientLimit.on_overload``): named
exceptions and SERVER_BUSY / RATE_LIMITED / TIMEOUT answers are drops; other errors are when
their share rises with the calls in flight, and teach nothing when it does not; cancellations
teach nothing. The rules with plain numbers, then the real guard in virtual time on asyncio and
trio (a pool that fails fast when full, a backend that is down), then hypothesis over error
streams."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_guard import (
    ConcurrencyGuard,
    ConfigurationError,
    ErrorCode,
    GradientLimit,
    Guard,
    ServerBusy,
    tool_error,
)
from fusion_guard.admission._adaptive_tuning import CEILING_SECONDS
from fusion_guard.admission._feedback import ALONE, OVERLOAD, CapacityFeedback
from virtual_time import virtual_time_backends

anyio_backend = virtual_time_backends()


class PoolExhausted(Exception):
    """The pool had no free connection."""


def _feedback() -> CapacityFeedback:
    return CapacityFeedback(lambda client: 0)


def _end(feedback: CapacityFeedback, inflight: int, outcome: str, overload: bool = False) -> object:
    return feedback.ended(feedback.seat(None), 0.0, 0.01, inflight, None, outcome, overload)


# -- the setting ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [[PoolExhausted], (PoolExhausted, "TimeoutError"), ("x",), PoolExhausted, (int,)]
)
def test_bad_overload_errors_fail_at_construction_naming_the_setting(value: object) -> None:
    with pytest.raises(
        ConfigurationError, match=r"^overload_errors=.* is invalid: expected a tuple"
    ):
        ConcurrencyGuard(4, overload_errors=value)  # type: ignore[arg-type]


def test_overload_errors_are_kept() -> None:
    guard = ConcurrencyGuard(limit=GradientLimit(), overload_errors=(PoolExhausted, TimeoutError))
    assert guard.overload_errors == (PoolExhausted, TimeoutError)
    assert ConcurrencyGuard(4).overload_errors == ()


# -- the classification, with plain numbers -------------------------------------------------------


def test_errors_whose_share_rises_with_the_calls_in_flight_are_overload() -> None:
    feedback = _feedback()
    for _ in range(30):  # a pool of 4: every call with up to 4 in flight is served
        for inflight in range(1, 5):
            assert _end(feedback, inflight, "ok") is False
    assert _end(feedback, 5, "internal_error") is OVERLOAD  # the first call above it fails
    assert _end(feedback, 6, "error") is OVERLOAD


def test_a_pool_full_with_its_connections_held_still_reads_as_overload() -> None:
    feedback = _feedback()
    for _ in range(30):
        for inflight in range(1, 5):
            _end(feedback, inflight, "ok")
    for _ in range(4):  # the pool's four connections, busy: they started with 1-4 in flight
        feedback.seat(None)
    assert _end(feedback, 5, "internal_error") is OVERLOAD


def test_errors_at_a_new_top_count_that_end_before_its_served_calls_teach_nothing() -> None:
    # A fifth of the calls fail at once (bad input) at every count; a served call takes longer.
    # When the limit has just risen to 5, the first calls at 5 to end are its errors, while the
    # served ones still run: counted as they end, the share at 5 read 100 % (a 16-connection
    # pool, ``benchmarks/error_sim.py --queuing-pool 16``: a ceiling each time the limit climbed).
    feedback = _feedback()
    for round_ in range(40):
        for inflight in range(1, 5):
            outcome = "error" if (round_ + inflight) % 5 == 0 else "ok"
            _end(feedback, inflight, outcome)
    for _ in range(4):  # the calls of the old limit, still serving (they started with 1-4)
        feedback.seat(None)
    running = [feedback.seat(None) for _ in range(2)]  # started with 5 and 6: still serving
    signals = [_end(feedback, 5, "error") for _ in range(4)]
    assert OVERLOAD not in signals
    for seat in running:
        assert feedback.ended(seat, 0.0, 0.04, 5, None, "ok") is False


def test_errors_as_frequent_at_any_load_teach_nothing() -> None:
    feedback = _feedback()
    signals = []
    for round_ in range(60):  # a fifth of the calls fail at every count in flight
        for inflight in range(1, 9):
            outcome = "error" if (round_ + inflight) % 5 == 0 else "ok"
            signals.append(_end(feedback, inflight, outcome))
    assert OVERLOAD not in signals
    assert set(signals) <= {False, None, ALONE}  # a sample, nothing, or an error of a lone call


def test_a_backend_that_fails_everything_is_not_overload() -> None:
    feedback = _feedback()
    for _ in range(20):
        for inflight in range(1, 5):
            _end(feedback, inflight, "ok")
    signals = [
        _end(feedback, inflight, "internal_error") for _ in range(50) for inflight in (4, 3, 2, 1)
    ]
    # The first errors at the top counts may read as overload (they had the fewest calls), but
    # once failures are as frequent with fewer in flight, no more; a call alone's is ALONE.
    assert OVERLOAD not in signals[-150:]
    assert signals[-1] is ALONE


def test_a_pool_failing_above_its_size_after_an_outage_is_seen_again() -> None:
    feedback = _feedback()
    for _ in range(30):
        for inflight in range(1, 5):
            _end(feedback, inflight, "ok")
    # The backend is down: every call fails, many of them alone. Those failures are not
    # counted until a call is served again (else they would weigh for hundreds of calls).
    for _ in range(300):
        for inflight in (1, 2, 3):
            _end(feedback, inflight, "internal_error")
    for _ in range(5):  # back: served again
        for inflight in range(1, 5):
            assert _end(feedback, inflight, "ok") is False
    assert _end(feedback, 5, "internal_error") is OVERLOAD  # the pool full, as before


def test_cancellations_and_invalid_arguments_teach_nothing() -> None:
    feedback = _feedback()
    for _ in range(30):
        for inflight in range(1, 5):
            _end(feedback, inflight, "ok")
    assert _end(feedback, 8, "cancelled") is None
    assert _end(feedback, 8, "cancelled", overload=True) is None  # cancelled first
    seat = feedback.seat(None)
    assert feedback.ended(seat, 0.0, 0.0, 8, None, "error", True, reached_tool=False) is None


def test_named_errors_and_overload_answers_are_overload_at_once() -> None:
    feedback = _feedback()  # no history at all: nothing to compare with, and no need
    assert _end(feedback, 3, "internal_error", overload=True) is OVERLOAD
    assert _end(feedback, 3, "error", overload=True) is OVERLOAD
    assert _end(feedback, 3, "internal_error") is None  # unnamed, without history


# -- what the limit learns ------------------------------------------------------------------------


def _served(limit: GradientLimit, now: float, calls: int, inflight: int) -> float:
    """``calls`` calls of 10 ms, each started with ``inflight`` in flight, back to back."""
    for _ in range(calls):
        limit.on_sample(now, 0.010, inflight, False)
        now += 0.010 / inflight
    return now


def test_an_overload_error_holds_the_limit_below_the_calls_in_flight() -> None:
    limit = GradientLimit(initial_limit=8)
    now = _served(limit, 0.0, 40, 1)  # the baseline: 10 ms
    assert limit.limit == 8
    limit.on_overload(now, 0.001, 6)
    assert limit.limit == 5  # fewer than 6: not halved to 4
    # Uncrowded calls at the limit would grow it a slot a window; not past the ceiling...
    now = _served(limit, now, 200, 5)
    assert limit.limit == 5
    # ... until it lapses: then one slot more.
    now = _served(limit, now + CEILING_SECONDS, 200, limit.limit)
    assert limit.limit > 5


def test_a_ceiling_confirmed_again_is_held_longer() -> None:
    limit = GradientLimit(initial_limit=4)
    now = _served(limit, 0.0, 40, 1)
    limit.on_overload(now, 0.001, 5)
    first = limit._ceiling.hold
    now = _served(limit, now + first, 200, 4)  # lapsed: grown to 5, which fails again
    assert limit.limit == 5
    limit.on_overload(now, 0.001, 5)
    assert limit.limit == 4
    assert limit._ceiling.hold == 2 * first


def test_a_backend_down_does_not_leave_the_limit_at_its_minimum() -> None:
    limit = GradientLimit(initial_limit=8)
    now = _served(limit, 0.0, 40, 1)
    for inflight in (8, 7, 5, 3, 2):  # every call fails: the limit comes down as they do
        limit.on_overload(now, 0.001, inflight)
        now += 0.001
    assert limit.limit == 1
    for _ in range(1000):  # then alone: no capacity to learn, the limit stays
        assert limit.on_overload(now, 0.001, 1) is False
        now += 0.001
    assert limit.limit == 1
    limit.on_sample(now, 0.010, 1, False)  # the backend is back
    assert limit.limit == 8  # where it was before the errors


@pytest.mark.anyio
async def test_a_limit_without_on_overload_takes_an_overload_error_as_a_drop() -> None:
    class Halving:
        def __init__(self) -> None:
            self.limit = 8
            self.drops = 0

        def on_sample(self, start: float, duration: float, inflight: int, dropped: bool) -> None:
            if dropped:
                self.drops += 1
                self.limit = max(1, self.limit // 2)

    limit = Halving()
    guard = ConcurrencyGuard(
        limit=limit, overload_errors=(PoolExhausted,), clock=anyio.current_time
    )
    slots = [guard.slot() for _ in range(3)]
    for slot in slots:
        assert slot.take_free()
    slots[2].leave(PoolExhausted, PoolExhausted(), None)
    assert (limit.drops, guard.limit) == (1, 4)
    slots[1].leave(ValueError, ValueError(), None)  # unnamed, no history: nothing
    assert limit.drops == 1


# -- on the guard ---------------------------------------------------------------------------------


def _guard(**kwargs: object) -> ConcurrencyGuard:
    return ConcurrencyGuard(
        limit=GradientLimit(), queue_timeout=0.5, clock=anyio.current_time, **kwargs
    )


class Wrapped(Exception):
    """What a framework raises from a handler's error."""


def _wrapped() -> Wrapped:
    try:
        raise Wrapped("tool failed") from PoolExhausted()
    except Wrapped as wrapped:
        return wrapped


@pytest.mark.anyio
@pytest.mark.parametrize(
    "raised",
    [
        PoolExhausted(),
        ServerBusy(tool_error(ErrorCode.SERVER_BUSY, "busy"), 1.0, "queue_full"),
        tool_error(ErrorCode.RATE_LIMITED, "slow down", retry_after=1.0),
        _wrapped(),
        ExceptionGroup("task group", [ValueError(), PoolExhausted()]),
    ],
    ids=["named", "nested refusal", "raised envelope", "raised from one", "in a group"],
)
async def test_a_call_that_raised_overload_lowers_the_limit_below_its_crowd(
    raised: BaseException,
) -> None:
    guard = _guard(overload_errors=(PoolExhausted,))
    for _ in range(3):
        assert guard.slot().take_free()
    with pytest.raises(type(raised)):
        async with guard.slot():
            raise raised
    assert guard.limit == 3  # it started with 4 in flight: the tool serves fewer


@pytest.mark.anyio
async def test_an_overload_answer_lowers_the_limit_and_is_reported_as_an_error() -> None:
    guard = Guard(max_active="auto", clock=anyio.current_time)
    held = []

    async def hold() -> str:
        await anyio.sleep(1.0)
        return "ok"

    async def busy() -> object:
        return tool_error(ErrorCode.SERVER_BUSY, "upstream busy", retry_after=1.0)

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(guard.call, "search", hold)
        await anyio.sleep(0.1)
        slots = guard.concurrency("search")
        assert slots is not None
        assert slots.active == 3
        held.append(await guard.call("search", busy))
    assert held[0].code == ErrorCode.SERVER_BUSY  # passed through as the tool answered
    assert slots.limit == 3  # 4 in flight when it started


@dataclass
class Pool:
    """A pool of ``size`` connections that raises at once (1 ms) when all are taken."""

    size: int = 4
    service: float = 0.040
    named: bool = True
    busy: int = 0
    down: bool = False
    reached: list[float] = field(default_factory=list)

    async def call(self) -> None:
        self.reached.append(anyio.current_time())
        if self.down or self.busy >= self.size:
            await anyio.sleep(0.001)
            raise PoolExhausted if self.named else RuntimeError("pool exhausted")
        self.busy += 1
        try:
            await anyio.sleep(self.service)
        finally:
            self.busy -= 1


@dataclass
class Figures:
    ok: int = 0
    errors: int = 0
    busy: int = 0
    advised: int = 0  # of busy, with a retry_after
    admitted: int = 0
    ok_at: list[float] = field(default_factory=list)  # seconds into the run
    start: float = 0.0


async def _offer(
    guard: ConcurrencyGuard, pool: Pool, rate: float, seconds: float, seed: int = 1
) -> Figures:
    rng = random.Random(seed)
    figures = Figures()

    async def one() -> None:
        try:
            async with guard.slot():
                figures.admitted += 1
                await pool.call()
            figures.ok += 1
            figures.ok_at.append(anyio.current_time() - figures.start)
        except ServerBusy as refusal:
            figures.advised += refusal.retry_after is not None and refusal.retry_after > 0
            figures.busy += 1
        except (PoolExhausted, RuntimeError):
            figures.errors += 1

    start = figures.start = anyio.current_time()
    async with anyio.create_task_group() as tg:
        now = start
        while True:
            now += rng.expovariate(rate)
            if now >= start + seconds:
                break
            await anyio.sleep(now - anyio.current_time())
            tg.start_soon(one)
    return figures


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("named", "errors_at_most", "goodput_at_least"), [(True, 0.05, 0.95), (False, 0.20, 0.9)]
)
async def test_a_pool_that_fails_fast_gets_server_busy_not_errors(
    named: bool, errors_at_most: float, goodput_at_least: float
) -> None:
    # 2x a pool of 4 that raises at once when full (the figures before: 61 % of the
    # admitted calls failed, none was refused).
    capacity = 4 / 0.040  # 100 calls a second
    fixed = ConcurrencyGuard(4, queue_timeout=0.5, clock=anyio.current_time)
    best = await _offer(fixed, Pool(named=named), 2 * capacity, seconds=8.0)
    auto = _guard(overload_errors=(PoolExhausted,) if named else ())
    run = await _offer(auto, Pool(named=named), 2 * capacity, seconds=8.0)
    assert run.errors <= errors_at_most * run.admitted
    # After the first two seconds (a new limit's first probe), as much served as a fixed 4.
    served = sum(1 for t in run.ok_at if t >= 2.0)
    assert served >= goodput_at_least * sum(1 for t in best.ok_at if t >= 2.0)
    # The excess is refused with advice, not admitted to fail.
    excess = run.ok + run.errors + run.busy - best.ok
    assert run.advised >= 0.9 * excess


@pytest.mark.anyio
@pytest.mark.parametrize("named", [True, False])
async def test_a_backend_down_lets_probes_through_and_recovers_within_two_seconds(
    named: bool,
) -> None:
    pool = Pool(named=named)
    guard = _guard(overload_errors=(PoolExhausted,) if named else ())
    capacity = pool.size / pool.service

    async def outage() -> None:
        await anyio.sleep(3.0)
        pool.down = True
        await anyio.sleep(4.0)
        pool.down = False

    async with anyio.create_task_group() as tg:
        tg.start_soon(outage)
        run = await _offer(guard, pool, capacity, seconds=10.0)
    start = min(pool.reached)
    during = [t - start for t in pool.reached if 3.0 <= t - start < 7.0]
    assert all(any(s <= t < s + 1 for t in during) for s in range(3, 7))  # a probe a second
    before = sum(1 for t in run.ok_at if 1.5 <= t < 3.0) / 1.5
    after = sum(1 for t in run.ok_at if 8.0 <= t < 9.0)  # 1-2 s after recovery
    assert after >= 0.9 * before


# -- hypothesis over error streams ----------------------------------------------------------------


def _feed(
    limit: GradientLimit, feedback: CapacityFeedback, now: float, inflight: int, kind: str
) -> object:
    """What ``LimitLearning.learn`` does with one call, without a guard; the signal."""
    outcome = {"named": "internal_error", "busy": "error"}.get(kind, kind)
    signal = feedback.ended(
        feedback.seat(None), now, 0.010, inflight, None, outcome, kind in ("named", "busy")
    )
    if signal is False or signal is True:
        limit.on_sample(now, 0.010, inflight, signal)
    elif signal is not None:
        limit.on_overload(now, 0.001 if kind != "ok" else 0.010, inflight)
    return signal


kinds = st.sampled_from(["ok", "ok", "ok", "error", "internal_error", "cancelled", "named", "busy"])


@settings(max_examples=60, deadline=None)
@given(
    stream=st.lists(st.tuples(st.integers(1, 40), kinds), min_size=1, max_size=400),
    bounds=st.tuples(st.integers(1, 5), st.integers(0, 30)),
)
def test_any_error_stream_keeps_the_limit_within_its_bounds(
    stream: list[tuple[int, str]], bounds: tuple[int, int]
) -> None:
    low, extra = bounds
    limit = GradientLimit(min_limit=low, max_limit=low + extra)
    feedback = _feedback()
    now = 0.0
    for inflight, kind in stream:
        _feed(limit, feedback, now, inflight, kind)
        now += 0.003
        assert limit.min_limit <= limit.limit <= limit.max_limit
        assert not math.isnan(limit.parallelism)


@settings(max_examples=60, deadline=None)
@given(
    pattern=st.lists(st.sampled_from(["ok", "error", "internal_error", "cancelled"]), min_size=1),
    rounds=st.integers(5, 40),
    levels=st.integers(2, 12),
)
def test_errors_alike_at_every_load_never_collapse_the_limit(
    pattern: list[str], rounds: int, levels: int
) -> None:
    # Every count in flight sees the very same outcomes: the errors do not depend on the load.
    limit = GradientLimit(initial_limit=4)
    feedback = _feedback()
    now = 0.0
    for _ in range(rounds):
        for kind in pattern:
            for inflight in range(1, levels + 1):
                signal = _feed(limit, feedback, now, inflight, kind)
                assert signal is not OVERLOAD
                now += 0.003
    # 10 ms calls however many run, errors or not: never cut (a probe for the uncrowded latency
    # may hold it lower for a while).
    for _ in range(40):
        _feed(limit, feedback, now, 1, "ok")
        now += 0.010
    assert limit.limit >= 4
