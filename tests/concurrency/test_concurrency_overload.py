"""The overload detector: a burst at moderate load is not overload, a sustained excess is."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fusion_guard.admission._discipline import IDLE_SHARE, QueueDiscipline, keeping_busy
from fusion_guard.admission._overload import (
    FIRST_AGE,
    SCALED_FROM,
    SETTLING_CALLS,
    SLOW_HORIZON,
    SLOW_OPENINGS,
    OverloadDetector,
)

CAPACITY = 100.0
OPENING = 0.01  # two slots held 20 ms each: a slot opens every 10 ms, 100 calls per second
SETTLED = 10 * SETTLING_CALLS  # the guard's figure rests on plenty of finished calls


def _feed(detector: OverloadDetector, rate: float, start: float, seconds: float, step: float,
          count: int, *, opening: float = OPENING, evidence: int = SETTLED,
          ) -> tuple[float, int]:  # fmt: skip
    """Arrivals at ``rate`` per second, observed every ``step`` seconds, with the guard's figure
    ``opening`` resting on ``evidence`` finished calls."""
    t, steps = start, round(seconds / step)
    for i in range(1, steps + 1):
        t = start + i * step
        detector.observe(t, count + round(rate * i * step), opening, evidence)
    return t, count + round(rate * steps * step)


def _seen(rate: float, seconds: float) -> float:
    """The slow average of a new detector after ``seconds`` of arrivals at ``rate``: taken over
    the time it has seen, as if that began FIRST_AGE earlier with no arrivals."""
    return (
        rate
        * math.expm1(-seconds / SLOW_HORIZON)
        / math.expm1(-(seconds + FIRST_AGE) / SLOW_HORIZON)
    )


def test_steady_load_under_capacity_is_not_overload() -> None:
    detector = OverloadDetector(0.0)
    _feed(detector, 80.0, 0.0, 10.0, 0.01, 0)
    assert not detector.overloaded()
    assert detector.arrival_rate == pytest.approx(80.0, rel=0.01)


@pytest.mark.parametrize(("load", "within"), [(1.5, 1.5), (2.0, 0.5), (4.0, 0.2), (10.0, 0.1)])
def test_sustained_overload_is_seen_quickly(load: float, within: float) -> None:
    detector = OverloadDetector(0.0)
    t, count = _feed(detector, 50.0, 0.0, 5.0, 0.01, 0)
    assert not detector.overloaded()
    _feed(detector, load * CAPACITY, t, within, 0.01, count)
    assert detector.overloaded()


def test_a_streak_of_slow_calls_at_moderate_load_is_not_overload() -> None:
    detector = OverloadDetector(0.0)
    t, count = _feed(detector, 80.0, 0.0, 5.0, 0.01, 0)
    # The guard's mean hold jumps to 30 ms (capacity 67/s) for a quarter of a second.
    for i in range(1, 26):
        detector.observe(t + i * 0.01, count + round(80.0 * i * 0.01), 0.015, SETTLED)
    assert not detector.overloaded()


def test_no_measurable_hold_is_never_overload() -> None:
    detector = OverloadDetector(0.0)
    for i in range(1, 100):
        detector.observe(i * 0.01, i * 50, 0.0, SETTLED)
    assert not detector.overloaded()


def test_a_short_burst_at_moderate_load_is_not_overload() -> None:
    detector = OverloadDetector(0.0)
    t, count = _feed(detector, 80.0, 0.0, 5.0, 0.01, 0)
    # Ten extra calls at once, as a Poisson burst brings: the queue grows, the load does not.
    detector.observe(t + 0.01, count + 11, OPENING, SETTLED)
    assert not detector.overloaded()


@given(steps=st.lists(st.floats(0.001, 0.5), min_size=1, max_size=60), seed=st.integers(0, 99))
@example(steps=[0.5, 0.5, 0.5, 0.5, 0.43359375], seed=31)  # 16 calls/s: a call is 6 % of it
def test_rates_do_not_depend_on_how_often_it_looks(steps: list[float], seed: int) -> None:
    """Arrivals at a constant rate give that rate, whether observed often or rarely, and from
    the first look (the average is taken over the time it has seen, not warmed from zero)."""
    rng = random.Random(seed)
    rate = rng.uniform(10.0, 500.0)
    detector = OverloadDetector(0.0)
    t = 0.0
    for step in steps:
        t += step
        detector.observe(t, int(rate * t), OPENING, SETTLED)
    # Counts are whole calls: the last look's count is short by up to one call, which moves the
    # average by less than one call per horizon, over the weight it has gathered.
    weight = -math.expm1(-(t + FIRST_AGE) / SLOW_HORIZON)
    counting = 1.0 / (SLOW_HORIZON * weight)
    assert detector.arrival_rate == pytest.approx(_seen(rate, t), rel=0.05, abs=counting)


@pytest.mark.parametrize(("settling", "overloaded"), [(True, True), (False, False)])
def test_a_figure_of_a_few_calls_is_not_kept_for_a_second(settling: bool, overloaded: bool) -> None:
    """A new guard's first calls were short: its figure, from 3 calls, says a slot opens every
    3.5 ms (285 calls/s). Calls then come at 2x the true capacity while the figure settles on
    a slot every 10 ms: smoothed from the first look, it would still read 155 calls/s after
    0.6 s, and 2x as no overload; taken as it is until it rests on enough calls (with a margin
    of 1/sqrt(63) at 63 calls: 113 calls/s), it is seen."""
    detector = OverloadDetector(0.0)
    first = 3 if settling else SETTLED
    detector.observe(0.01, 1, 0.0035, first)
    # A lull: few looks, and no call finishes with every slot taken, so the figure stays.
    t, count = _feed(detector, 50.0, 0.01, 0.4, 0.1, 1, opening=0.0035, evidence=first)
    for i in range(1, 61):
        evidence = first + i if settling else SETTLED
        detector.observe(t + i * 0.01, count + round(200.0 * i * 0.01), OPENING, evidence)
    assert (evidence < SETTLING_CALLS) == settling
    assert detector.overloaded() == overloaded


def test_a_settled_figure_is_smoothed() -> None:
    """Once the figure rests on enough calls, a sudden change in it is smoothed: a quarter of a
    second of calls twice as slow (50 calls/s) at 0.8x, seen through a settled figure, is no
    overload; through one of 90 calls, still settling and so taken as it is (with a margin of
    1/sqrt(90): 55 calls/s), it is."""
    outcomes = []
    for evidence in (SETTLED, 90):
        detector = OverloadDetector(0.0)
        t, count = _feed(detector, 80.0, 0.0, 5.0, 0.01, 0, evidence=evidence)
        for i in range(1, 26):
            detector.observe(t + i * 0.01, count + round(80.0 * i * 0.01), 0.02, evidence)
        outcomes.append(detector.overloaded())
    assert outcomes == [False, True]


def test_a_figure_resting_on_few_calls_gets_a_margin_of_its_standard_error() -> None:
    """At 0.8x, a figure of 20 calls that reads the tool as serving 80 calls a second (a streak
    of slow calls; the tool serves 100) is given 1/sqrt(20) more capacity, 98 calls/s: calls
    at 140/s for a quarter of a second (a burst) are no overload. The same figure resting on
    enough calls is trusted, and the same burst is overload."""
    outcomes = []
    for evidence in (20, SETTLED):
        detector = OverloadDetector(0.0)
        detector.observe(0.0, 0, 1 / 80.0, evidence)
        t, count = _feed(detector, 80.0, 0.0, 2.0, 0.01, 0, opening=1 / 80.0, evidence=evidence)
        _feed(detector, 140.0, t, 0.25, 0.01, count, opening=1 / 80.0, evidence=evidence)
        outcomes.append(detector.overloaded())
    assert outcomes == [False, True]


def _discipline() -> QueueDiscipline:
    return QueueDiscipline(
        queue_timeout=30.0,
        max_queue=100,
        slots=2,
        lifo=False,
        standing_after=0.1,
        standing_limit=4,
        predictive=False,
        now=0.0,
    )


def test_a_queue_that_empties_for_an_instant_under_overload_keeps_standing() -> None:
    """At 2x capacity a standing queue held to 4 can empty for an instant (a few short calls in
    a row). If the next arrival started the standing clock again, the queue would grow without
    a limit for the next 100 ms: at 4x that is 40 calls, 400 ms of waiting."""
    discipline = _discipline()
    discipline.arrival(0.0, 0)  # the queue forms
    _feed(discipline.overload, 200.0, 0.0, 1.0, 0.01, 0)
    assert discipline.holds_standing(1.0, 4)
    discipline.arrival(1.0, 0)  # it emptied for an instant; calls still come at 2x
    assert discipline.holds_standing(1.001, 4)


def test_once_calls_stop_outrunning_the_slots_a_new_queue_is_a_burst() -> None:
    """After a 10x overload, arrivals at half capacity: the fast average falls below what the
    slots serve within a second, and a queue that forms then is a burst again (the slow average
    still remembers the overload for seconds, so it alone must neither keep the queue standing
    nor hold it short)."""
    discipline = _discipline()
    discipline.arrival(0.0, 0)
    t, count = _feed(discipline.overload, 1000.0, 0.0, 2.0, 0.01, 0)
    _feed(discipline.overload, 50.0, t, 1.0, 0.01, count)
    assert discipline.overload.arrival_rate > 1.15 * CAPACITY  # the slow average remembers
    assert not discipline.overload.overloaded()
    assert not discipline.overload.outrunning()
    discipline.arrival(2.0, 0)
    assert not discipline.holds_standing(2.01, 4)


@pytest.mark.parametrize("load", [1.5, 4.0])
def test_a_new_guard_sees_an_overload_that_starts_with_it(load: float) -> None:
    """A guard created as a 1.5x overload begins (a server started under load, each level of the
    overload demo): averages warmed from zero read its arrivals low for their horizon, and 1.5x
    as no overload for 1.5 s; taken over the time they have seen, it is seen within 0.3 s.
    """
    detector = OverloadDetector(0.0)
    _feed(detector, load * CAPACITY, 0.0, 0.3, 0.01, 0)
    assert detector.overloaded()
    assert detector.arrival_rate == pytest.approx(_seen(load * CAPACITY, 0.3), rel=0.05)


def test_a_new_guard_at_moderate_load_is_not_overloaded_on_its_first_looks() -> None:
    detector = OverloadDetector(0.0)
    outcomes = []
    for i in range(1, 201):
        detector.observe(i * 0.005, round(80.0 * i * 0.005), OPENING, SETTLED)
        outcomes.append(detector.overloaded() or detector.outrunning())
    assert not any(outcomes)


@given(st.floats(1.0001, 1e6), st.floats(1.0001, 1e6))
def test_keeping_busy_takes_fewer_calls_the_further_arrivals_outrun(a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert keeping_busy(low) >= keeping_busy(high) >= 0

    def idle(load: float, places: int) -> float:  # the M/M/1 queue with ``places`` places
        return (load - 1.0) / (load**places - 1.0) if load**places < math.inf else 0.0

    calls = keeping_busy(low)
    assert idle(low, calls + 1) <= IDLE_SHARE * (1 + 1e-9)
    if calls:
        assert idle(low, calls) > IDLE_SHARE  # and no fewer would do


def _derived(slots: int) -> QueueDiscipline:
    """A standing limit that follows the slots and the parallelism."""
    return QueueDiscipline(queue_timeout=30.0, max_queue=100, slots=slots, lifo=False,
                           standing_after=0.1, standing_limit=None, predictive=False,
                           now=0.0)  # fmt: skip


@pytest.mark.parametrize(("rate", "standing"), [(None, 5), (150.0, 5), (200.0, 2), (1000.0, 1)])
def test_a_standing_queue_under_an_adaptive_limit_keeps_the_slots_busy_and_no_more(
    rate: float | None, standing: int
) -> None:
    # 5 slots over a tool serving 2 in parallel, slots opening 100 times a second.
    discipline = _derived(5)
    if rate is not None:
        _feed(discipline.overload, rate, 0.0, 3.0, 0.01, 0)
        assert discipline.overload.offered_load == pytest.approx(rate / CAPACITY, rel=0.02)
    discipline.on_limit(5, 2.0)
    # 5 per call served in parallel, guard and tool together: 10 - 5 in the tool. No more than
    # keeps the tool busy: 2 - 1 + keeping_busy(load) - 5 (9 at 1.5x, 6 at 2x, 2 at 10x), at
    # least 1; the load unknown (no slot has opened yet), the first rule alone.
    assert discipline.standing_limit == standing


def test_its_offered_load_is_unknown_until_slots_have_opened() -> None:
    detector = OverloadDetector(0.0)
    assert math.isnan(detector.offered_load)
    _feed(detector, 80.0, 0.0, 3.0, 0.01, 0, opening=0.02)
    assert detector.offered_load == pytest.approx(80 * 0.02, rel=0.02)


@pytest.mark.parametrize(
    ("limit", "parallelism", "slots"),
    [(8, 2.0, 3), (8, 2.4, 3), (8, 2.5, 4), (8, 6.0, 7), (3, 2.0, 3), (2, 2.0, 2), (8, None, 8)],
)
def test_under_sustained_overload_an_adaptive_limit_keeps_one_slot_beyond_the_parallelism(
    limit: int, parallelism: float | None, slots: int
) -> None:
    discipline = _derived(limit)
    t, _ = _feed(discipline.overload, 200.0, 0.0, 3.0, 0.01, 0)
    assert discipline.overload.overloaded()
    # A standing queue (never empty since it formed): the slots beyond the parallelism and one
    # more would only move waiters into the tool. Never above the limit; no estimate, no change.
    assert discipline.slots_in_force(limit, parallelism, t, 5) == slots


def test_without_sustained_overload_the_limit_is_in_force_whole() -> None:
    busy, calm = _derived(8), _derived(8)
    t, _ = _feed(busy.overload, 200.0, 0.0, 3.0, 0.01, 0)
    assert busy.slots_in_force(8, 2.0, t, 0) == 8  # no queue: nothing stands
    t, _ = _feed(calm.overload, 80.0, 0.0, 3.0, 0.01, 0)
    calm.arrival(t, 0)  # a queue forms anew: not standing for standing_after
    assert calm.slots_in_force(8, 2.0, t + 0.05, 1) == 8
    assert calm.standing(t + 0.2, 1)
    assert calm.slots_in_force(8, 2.0, t + 0.2, 1) == 8  # standing, but no overload


def _step_response(opening: float, seconds: float) -> float:
    """The slow average's share of a step in the arrival rate (1000 to 2000 calls a second)
    seen ``seconds`` after it, for a tool whose slots open every ``opening`` seconds."""
    detector = OverloadDetector(0.0)
    t, count = _feed(detector, 1000.0, 0.0, 60.0, 0.01, 0, opening=opening)
    _feed(detector, 2000.0, t, seconds, 0.01, count, opening=opening)
    return (detector.arrival_rate - 1000.0) / 1000.0


@pytest.mark.parametrize("opening", [OPENING, SCALED_FROM])
def test_a_fast_tools_averages_span_their_seconds(opening: float) -> None:
    """Slots opening every 10 ms (the demo's tool), or every SCALED_FROM: the slow average
    follows a step in SLOW_HORIZON seconds (1 - 1/e of it), as it always has."""
    assert _step_response(opening, SLOW_HORIZON) == pytest.approx(-math.expm1(-1.0), abs=0.01)


def test_a_slow_tools_averages_span_its_openings() -> None:
    """A tool of 8 workers and 3 s calls opens a slot every 0.375 s: seconds-long averages
    would see one to four of its arrivals. Its slow average follows a step over SLOW_OPENINGS
    openings, not SLOW_HORIZON seconds."""
    opening = 0.375
    horizon = SLOW_OPENINGS * opening
    assert horizon > 3 * SLOW_HORIZON
    assert _step_response(opening, horizon) == pytest.approx(-math.expm1(-1.0), abs=0.01)
    assert _step_response(opening, SLOW_HORIZON) == pytest.approx(
        -math.expm1(-SLOW_HORIZON / horizon), abs=0.01
    )


def test_a_slow_tool_reads_the_same_in_its_own_time() -> None:
    """Both averages of a slow tool scale with its openings: a tool twice as slow, fed the
    same arrivals at half the pace, reads overload (and calls outrunning its slots) at the
    same looks, and the same offered load, as the faster one. Arrivals: 0.8x, then 1.3x and
    1.6x its capacity, then 0.8x again, at random (seeded) spacings."""
    rng = random.Random(7)
    readings: list[list[tuple[bool, bool, float]]] = [[], []]
    for scale, reading in zip((1.0, 2.0), readings, strict=True):
        detector = OverloadDetector(0.0)
        opening = 0.25 * scale
        t, count = 0.0, 0
        rng.seed(7)
        for load in (0.8, 1.3, 1.6, 0.8):
            for _ in range(200):
                t += rng.expovariate(load / 0.25) * scale
                count += 1
                detector.observe(t, count, opening, SETTLED, 0.3)
                reading.append(
                    (detector.overloaded(), detector.outrunning(), detector.offered_load)
                )
    (fast, slow) = readings
    assert [r[:2] for r in fast[100:]] == [r[:2] for r in slow[100:]]
    assert [r[2] for r in fast[100:]] == pytest.approx([r[2] for r in slow[100:]], rel=1e-6)
    assert any(r[0] for r in fast)  # the overload was seen, and so was its end
    assert not all(r[0] for r in fast)
