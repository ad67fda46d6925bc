"""Pacing a tool whose limit is a rate (``admission/_pacing.py``): which overload errors are
rate-shaped (``_feedback.py``), the pacer with plain numbers, the real guard in front of a token
bucket in virtual time on asyncio and trio, and hypothesis over the pacer's inputs."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
import pytest
import sniffio
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion_guard import ConcurrencyGuard, GradientLimit, Guard, GuardClosed, ServerBusy
from fusion_guard.admission._feedback import OVERLOAD, RATE, CapacityFeedback
from fusion_guard.admission._pacing import (
    AT_ONCE_MEMORY,
    CLUMP,
    HEADROOM,
    RATE_HOLD,
    REFUSED_SHARE,
    SERVED_CALLS,
    SERVED_WINDOW,
    STEP_DOWN,
    PaceTimer,
    RatePacer,
)
from fusion_guard.admission._pacing_probe import PROBE_BACKOFF, PaceProbe
from virtual_time import virtual_time_backends

anyio_backend = virtual_time_backends()


class RateLimited(Exception):
    """The upstream answered 429."""


@dataclass
class _Judge:
    """A feedback and the limit it reads the calls seen served at once from, fed as
    ``LimitLearning.learn`` feeds them."""

    limit: GradientLimit = field(default_factory=GradientLimit)
    feedback: CapacityFeedback = field(init=False)

    def __post_init__(self) -> None:
        self.feedback = CapacityFeedback(lambda client: 0, lambda: self.limit.served_at_once)

    def end(
        self,
        start: float,
        inflight: int,
        outcome: str = "ok",
        overtook: int = 0,
        held: float = 0.05,
    ) -> object:
        feedback = self.feedback
        signal = feedback.ended(
            feedback.seat(None), start, held, inflight, None, outcome, outcome != "ok", True
        )
        if signal is False:
            self.limit.on_sample(start, held, inflight, False, overtook=overtook)
        return signal


# -- which overload errors are rate-shaped --------------------------------------------------------


def test_a_pool_refusing_above_its_size_is_concurrency_shaped() -> None:
    judge = _Judge()
    now = 0.0
    for _ in range(30):  # a pool of 4: calls served with up to 4 in flight, 4 seen at once
        for inflight in range(1, 5):
            assert judge.end(now, inflight, overtook=inflight - 1) is False
            now += 0.01
    assert judge.end(now, 5, "internal_error", held=0.001) is OVERLOAD
    # The ceiling it sets holds the calls at 4: nothing is served at 5, and the next try fails.
    for inflight in range(1, 5):
        judge.end(now + 0.01, inflight, overtook=inflight - 1)
    assert judge.end(now + 1.0, 5, "internal_error", held=0.001) is OVERLOAD


def test_a_refusal_at_a_count_the_tool_was_seen_serving_at_once_is_rate_shaped() -> None:
    judge = _Judge()
    assert judge.end(0.0, 6, overtook=5) is False  # 6 served at once
    assert judge.end(0.1, 4, "internal_error", held=0.005) is RATE
    assert judge.end(0.1, 6, "internal_error", held=0.005) is RATE
    assert judge.end(0.1, 7, "internal_error", held=0.005) is OVERLOAD


def test_the_calls_seen_served_at_once_are_the_limits_own_record() -> None:
    # Seen by the limit before the ceiling (the calls in flight at a served call's start are
    # tested only from the ceiling on): a refusal at that count is rate-shaped.
    judge = _Judge()
    assert judge.end(0.0, 9, "internal_error", held=0.001) is OVERLOAD  # a ceiling
    judge.end(0.0, 5, overtook=4)  # started before the ceiling ended: seen at once, by the limit
    assert judge.limit.served_at_once == 5
    assert judge.end(0.5, 5, "internal_error", held=0.001) is RATE
    # Without a limit that keeps the record, only the count in flight of a served call tells.
    feedback = CapacityFeedback(lambda client: 0)
    feedback.ended(feedback.seat(None), 0.0, 0.001, 9, None, "internal_error", True)
    feedback.ended(feedback.seat(None), 0.0, 0.05, 5, None, "ok")
    assert feedback.ended(feedback.seat(None), 0.5, 0.001, 5, None, "error", True) == OVERLOAD


def test_a_limit_whose_record_fails_tells_no_sighting() -> None:
    def broken() -> int:
        raise RuntimeError("a limit's bug")

    feedback = CapacityFeedback(lambda client: 0, broken)
    feedback.ended(feedback.seat(None), 0.0, 0.05, 2, None, "ok")
    assert feedback.ended(feedback.seat(None), 0.1, 0.001, 3, None, "error", True) == OVERLOAD


def test_a_sighting_of_calls_served_at_once_is_forgotten() -> None:
    judge = _Judge()
    assert judge.end(0.0, 9, "internal_error", held=0.001) is OVERLOAD
    judge.end(0.1, 6, overtook=5)
    # Nothing served for AT_ONCE_MEMORY: the limit's sighting is not evidence any more.
    assert judge.limit.served_at_once == 6
    assert judge.end(AT_ONCE_MEMORY + 0.2, 4, "internal_error") is OVERLOAD


def test_nothing_is_counted_for_overload_errors_until_the_first() -> None:
    judge = _Judge()
    for step in range(50):
        judge.end(0.01 * step, 3, overtook=2)
    assert (judge.feedback.served, judge.feedback.served_time) == (0, 0.0)
    # The first error is told by what every call keeps (served with 3 in flight): rate-shaped.
    assert judge.end(0.5, 3, "internal_error", held=0.001) is RATE
    judge.end(0.6, 2)
    judge.end(0.6, 2, held=0.5)  # near no deadline: served well too
    assert judge.feedback.served == 2
    assert judge.feedback.served_time == pytest.approx(0.55)


def test_a_call_served_at_a_count_refused_since_the_last_ceiling_is_rate_shaped() -> None:
    # Calls end in order (none overtakes another): only the count at their start shows that the
    # tool served three at a time after it refused the third.
    judge = _Judge()
    assert judge.end(0.0, 3, "internal_error", held=0.001) is OVERLOAD  # a ceiling at 2
    assert judge.end(0.0005, 3) is False  # started before the refusal ended: not evidence
    assert judge.end(0.5, 3, "internal_error", held=0.001) is OVERLOAD
    assert judge.end(1.0, 3) is False  # served with 3 in flight, after the ceiling
    assert judge.end(1.1, 3, "internal_error", held=0.001) is RATE
    assert judge.end(1.1, 4, "internal_error", held=0.001) is OVERLOAD  # never served at 4


# -- the pacer, with plain numbers ----------------------------------------------------------------


@dataclass
class Served:
    served: int = 0
    served_time: float = 0.0

    def serve(self, calls: int, hold: float) -> None:
        self.served += calls
        self.served_time += calls * hold


def _measured(rate: float = 50.0, hold: float = 0.08) -> tuple[RatePacer, Served, float]:
    """A pacer that measured ``rate`` calls a second served (of ``hold`` seconds) while the
    tool refused some; the time it did."""
    served = Served()
    pacer = RatePacer(served)
    pacer.rate_shaped(0.0)
    assert pacer.pacing
    assert math.isnan(pacer.rate)  # measuring
    seconds = max(SERVED_WINDOW, SERVED_CALLS / rate)
    served.serve(round(rate * seconds), hold)
    pacer.rate_shaped(seconds)
    return pacer, served, seconds


def test_the_pace_is_the_served_rate_and_headroom() -> None:
    # The first pace, from 25 calls served in half a second, gives the tool a Poisson count's
    # standard error more: a chance dip of the calls served is no pace to shed at.
    pacer, served, now = _measured(50.0, 0.08)
    assert now == SERVED_WINDOW
    assert pacer.rate == pytest.approx((1 + HEADROOM) * 50.0 * (1 + 1 / math.sqrt(25)))
    assert pacer.needed() == math.ceil(pacer.rate * 0.08) + 1
    served.serve(100, 0.08)  # refused again, 100 served in a second: the served rate now
    pacer.rate_shaped(now + 1.0)
    assert pacer.rate == pytest.approx((1 + HEADROOM) * 100.0)


def test_the_rate_is_measured_over_enough_calls() -> None:
    served = Served()
    pacer = RatePacer(served)
    pacer.rate_shaped(0.0)
    served.serve(SERVED_CALLS - 1, 0.5)  # a slow upstream: too few calls for a rate yet
    pacer.rate_shaped(SERVED_WINDOW + 0.1)
    assert math.isnan(pacer.rate)
    assert pacer.slots(SERVED_WINDOW + 0.2, 3, 0) is None  # not pacing before it has a rate


def test_an_end_opens_one_slot_for_a_token_at_most() -> None:
    pacer, _, now = _measured(50.0, 0.08)  # a pace of 72 a second
    pace = pacer.rate
    admitted = 100
    assert pacer.slots(now, 5, admitted) == 4  # the first reading: tokens from now on
    # 50 ms later 3.6 tokens are earned, but they are kept up to CLUMP (one): one slot opens.
    assert CLUMP == 1
    assert pacer.slots(now + 0.05, 5, admitted) == 4 + 1
    assert pacer.slots(now + 0.0501, 5, admitted + 1) == 4  # spent
    assert pacer.slots(now + 0.0502, 5, admitted + 3) == 4  # in debt: none opened
    assert pacer.slots(now + 0.0503, 1, admitted + 3) == 1  # never fewer than one
    # The debt (1 + 0.0003 * pace - 3 tokens) is earned back at the pace, then one token more.
    wait = pacer.until_token(now + 0.0503, admitted + 3)
    assert wait == pytest.approx((1 - (1 + 0.0003 * pace - 3)) / pace)
    assert wait is not None
    assert pacer.until_token(now + 0.0503 + wait, admitted + 3) == 0.0
    assert pacer.until_token(now + 0.0503 + wait, admitted + 4) == pytest.approx(1 / pace)


def test_no_token_is_waited_for_unless_paced_at_a_rate() -> None:
    served = Served()
    pacer = RatePacer(served)
    assert pacer.until_token(0.0, 0) is None  # never paced
    pacer.rate_shaped(0.0)
    assert pacer.until_token(0.1, 0) is None  # measuring
    pacer, _, now = _measured(50.0, 0.08)
    assert pacer.until_token(now, 0) is None  # no tokens counted before an end
    pacer.slots(now, 3, 0)
    assert pacer.until_token(now + 0.01, 0) is not None
    assert pacer.until_token(now + RATE_HOLD + 0.01, 0) is None  # let go


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(1.0, 500.0),
    steps=st.lists(st.tuples(st.floats(0.0, 0.05), st.booleans()), min_size=1, max_size=200),
)
def test_calls_taken_at_each_token_are_spaced_at_the_pace(
    rate: float, steps: list[tuple[float, bool]]
) -> None:
    # Calls admitted whenever a token is there (the timer's or an end's) number at most one
    # plus the pace's calls over any stretch: never a clump.
    pacer, _, now = _measured(rate / (1 + HEADROOM), 0.05)
    pace = pacer.rate
    admitted = 0
    pacer.slots(now, 3, admitted)
    times: list[float] = []
    for dt, refused in steps:
        now += dt
        if refused:
            pacer.rate_shaped(now)
        if pacer.until_token(now, admitted) == 0.0:
            admitted += 1
            times.append(now)
    for i, first in enumerate(times):
        for j in range(i + 1, len(times)):
            assert j - i + 1 <= 1 + pace * (times[j] - first) + 1e-6 * (j - i + 1)


def test_a_pace_is_not_lowered_by_a_window_the_tool_refused_nothing_in() -> None:
    pacer, served, now = _measured(50.0, 0.08)
    pace = pacer.rate
    served.serve(20, 0.08)  # the load fell: 20 calls in a second, none refused
    assert pacer.slots(now + 1.0, 2, 0) is not None
    assert pacer.rate == pace
    served.serve(80, 0.08)  # 80 in a second, none refused: the upstream grants more
    pacer.slots(now + 2.0, 2, 0)
    assert pacer.rate == pytest.approx((1 + HEADROOM) * 80)
    pacer.rate_shaped(now + 2.5)
    served.serve(40, 0.08)  # refused right after the raise: back to the pace it rose from
    pacer.rate_shaped(now + 3.0)
    assert pacer.rate == pytest.approx(pace)
    served.serve(20, 0.08)  # refused again, 40 served a second: down a step at a time
    pacer.rate_shaped(now + 3.5)
    assert pacer.rate == pytest.approx(STEP_DOWN * pace)
    for step in range(1, 20):
        served.serve(20, 0.08)
        pacer.rate_shaped(now + 3.5 + 0.5 * step)
    assert pacer.rate == pytest.approx((1 + HEADROOM) * 40)  # where the upstream serves now


def test_a_pace_that_held_calls_back_probes_up_and_backs_off_at_a_refusal() -> None:
    # At light load the calls served are the calls sent, not the upstream's rate: a pace a
    # little above them refuses a Poisson stream's bunches. Held back by the pace (the guard
    # refused calls) while the upstream refused none, the pace rises a step (a probe), however
    # little the tool was seen serving; refused right after, it goes back to where it rose
    # from, and the next probes wait 1, 2, 4 ... measurements. Not held back, it stays.
    served, refused = Served(), [0]
    pacer = RatePacer(served, lambda: refused[0])
    pacer.rate_shaped(0.0)
    served.serve(25, 0.03)
    pacer.rate_shaped(SERVED_WINDOW)  # 50 a second: a pace of 72 (a count's error more)
    now = SERVED_WINDOW
    served.serve(30, 0.03)  # 30 in a second, nothing refused by anyone: the pace stays
    pacer.slots(now + 1.0, 2, 0)
    assert pacer.rate == pytest.approx(72.0)
    pace = 72.0
    for step in (1.5, 2.0):  # held back, the upstream refusing none: up a step each time
        refused[0] += 3
        served.serve(20, 0.03)
        pacer.slots(now + step, 2, 0)
        pace *= 1 + HEADROOM
        assert pacer.rate == pytest.approx(pace)
    pacer.rate_shaped(now + 2.2)
    served.serve(20, 0.03)
    pacer.rate_shaped(now + 2.5)  # the probe refused: back to the pace it rose from
    assert pacer.rate == pytest.approx(pace / (1 + HEADROOM))
    pace = pacer.rate
    refused[0] += 3
    served.serve(20, 0.03)
    pacer.slots(now + 3.0, 2, 0)  # held back, none refused: the next probe waits one
    assert pacer.rate == pytest.approx(pace)
    refused[0] += 3
    served.serve(20, 0.03)
    pacer.slots(now + 3.5, 2, 0)  # ... then probes
    assert pacer.rate == pytest.approx((1 + HEADROOM) * pace)
    pacer.rate_shaped(now + 3.7)
    served.serve(20, 0.03)
    pacer.rate_shaped(now + 4.0)  # refused again: back, and the next probe waits two
    assert pacer.rate == pytest.approx(pace)
    for step in (4.5, 5.0):
        refused[0] += 3
        served.serve(20, 0.03)
        pacer.slots(now + step, 2, 0)
        assert pacer.rate == pytest.approx(pace)
    served.serve(20, 0.03)
    pacer.slots(now + 5.5, 2, 0)  # not held back: it stays
    assert pacer.rate == pytest.approx(pace)


def test_calls_ended_unserved_tell_a_refusal_the_errors_did_not() -> None:
    # Unnamed, a paced tool's 429s are mostly not told rate-shaped (its error share does not
    # rise with the calls in flight the pace holds): more than REFUSED_SHARE of the calls that
    # ended not served is a refusal all the same, and a probe is undone by it.
    served, held, ended = Served(), [0], [0]
    pacer = RatePacer(served, lambda: held[0], ended=lambda: ended[0])
    pacer.rate_shaped(0.0)
    served.serve(25, 0.03)
    ended[0] += 25
    pacer.rate_shaped(SERVED_WINDOW)
    now, pace = SERVED_WINDOW, pacer.rate
    held[0] += 5
    served.serve(30, 0.03)
    ended[0] += 30
    pacer.slots(now + 0.5, 2, 0)  # held back, all served: a probe
    assert pacer.rate == pytest.approx((1 + HEADROOM) * pace)
    served.serve(30, 0.03)
    ended[0] += 30 + math.ceil(REFUSED_SHARE * 40)  # a few ended unserved, none told
    pacer.slots(now + 1.0, 2, 0)
    assert pacer.rate == pytest.approx(pace)


def test_a_pace_that_holds_calls_back_is_not_let_go() -> None:
    # The hold runs out RATE_HOLD after the last rate-shaped error, unless the guard held calls
    # back for the pace meanwhile: letting go then admitted the excess load at once, into 429s.
    served, held = Served(), [0]
    pacer = RatePacer(served, lambda: held[0])
    pacer.rate_shaped(0.0)
    served.serve(25, 0.03)
    pacer.rate_shaped(SERVED_WINDOW)
    now = SERVED_WINDOW + RATE_HOLD + 0.01
    held[0] += 1
    served.serve(10, 0.03)
    assert pacer.slots(now, 2, 0) is not None  # held back, calls served: kept, RATE_HOLD more
    assert pacer.pacing
    assert pacer.until_token(now + RATE_HOLD - 0.01, 0) is not None
    assert pacer.slots(now + RATE_HOLD + 0.01, 2, 0) is None  # none held back since: let go
    assert not pacer.pacing
    pacer.rate_shaped(now + 10.0)
    held[0] += 1  # held back, but nothing served (a backend down): let go all the same
    assert pacer.slots(now + 10.0 + RATE_HOLD + 0.01, 2, 0) is None


def test_a_slot_taken_late_does_not_bring_the_next_token_sooner() -> None:
    # A slot opened for a token and taken later (or handed to a waiter whose task has not run
    # yet) spent the token when it was taken: the next comes 1 / pace after that, not sooner.
    latest = [0.0]
    pacer = RatePacer(Served(), latest_admission=lambda: latest[0])
    pacer.rate_shaped(0.0)
    pacer._feedback.serve(25, 0.03)  # type: ignore[attr-defined]
    pacer.rate_shaped(SERVED_WINDOW)
    now, pace = SERVED_WINDOW, pacer.rate
    pacer.slots(now, 1, 0)
    assert pacer.until_token(now + 1.0, 0) == 0.0  # a token, kept (one at most)
    latest[0] = now + 1.5  # taken half a second later
    assert pacer.until_token(now + 1.5, 1) == pytest.approx(1 / pace)
    pacer.granted(now + 2.0)  # the timer opened a slot: its call counts once its task runs
    assert pacer.slots(now + 2.0, 2, 1) == 1  # an end at that instant opens none
    assert pacer.until_token(now + 2.0, 1) == pytest.approx(1 / pace)


def test_an_overload_error_at_a_count_the_last_pace_needs_is_the_rates() -> None:
    # After the pacer let go, a bunch of arrivals refused at a count in flight the pace it
    # learnt needs is not a ceiling (a cut to it shed at 0.8x: the zoo's upstream_fast).
    pacer = RatePacer(Served())
    assert not pacer.explains(1)  # no pace learnt: the feedback's reading stands
    pacer, _, now = _measured(100.0, 0.03)
    needed = pacer.needed()
    pacer.slots(now + RATE_HOLD + 0.01, 3, 0)
    assert not pacer.pacing
    assert pacer.explains(needed)
    assert not pacer.explains(needed + 1)


def test_the_error_that_starts_the_pacer_again_does_not_lower_its_pace() -> None:
    pacer, served, now = _measured(50.0, 0.08)
    pace = pacer.rate
    pacer.slots(now + RATE_HOLD + 0.01, 3, 0)  # let go
    start = now + 10.0
    pacer.rate_shaped(start)  # an unpaced bunch refused: pacing again, at the pace learnt
    assert pacer.rate == pace
    served.serve(30, 0.08)  # 30 in a second: under the pace, none refused while paced
    pacer.slots(start + 1.0, 2, 0)
    assert pacer.rate == pace


def test_the_pacer_lets_go_after_a_hold_without_rate_shaped_errors() -> None:
    pacer, _, now = _measured(50.0, 0.08)
    assert pacer.slots(now + RATE_HOLD - 0.01, 3, 0) is not None
    assert pacer.pacing
    assert pacer.slots(now + RATE_HOLD + 0.01, 3, 0) is None
    assert not pacer.pacing
    assert pacer.needed() == 0
    pace = pacer.rate_learnt
    pacer.rate_shaped(now + 10.0)  # a new episode takes the pace learnt up again, at once
    assert pacer.pacing
    assert pacer.rate == pace


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.floats(0.0, 0.5),  # time to the next call's end
            st.integers(1, 30),  # calls in flight then
            st.integers(0, 5),  # calls admitted since the last end
            st.integers(0, 5),  # calls served since
            st.booleans(),  # a rate-shaped error now
        ),
        min_size=1,
        max_size=300,
    )
)
def test_the_pacer_never_closes_every_slot_nor_admits_past_its_tokens(
    steps: list[tuple[float, int, int, int, bool]],
) -> None:
    served = Served()
    pacer = RatePacer(served)
    now, admitted, granted = 0.0, 0, 0.0
    for dt, active, newly_admitted, newly_served, refused in steps:
        now += dt
        admitted += newly_admitted
        served.serve(newly_served, 0.05)
        if refused:
            pacer.rate_shaped(now)
        if pacer.pacing:
            slots = pacer.slots(now, active, admitted)
            if slots is not None:
                assert 1 <= slots <= max(1, active - 1 + CLUMP)
        rate = pacer.rate
        assert math.isnan(rate) or 0.0 < rate < math.inf
        assert pacer.needed() >= 0
        granted = max(granted, now)


# -- on the guard, in front of an upstream's token bucket ----------------------------------------


@dataclass
class Bucket:
    """An upstream API of ``rate`` calls a second (bursts of ``burst``), 80 ms calls; past the
    rate it answers 429 in 5 ms."""

    rate: float = 50.0
    burst: float = 10.0
    service: float = 0.080
    tokens: float = 10.0
    sigma: float = 0.0  # of its calls' log-normal spread (0: every call ``service`` long)
    at: float | None = None
    rng: random.Random = field(default_factory=lambda: random.Random(3))

    async def call(self) -> None:
        now = anyio.current_time()
        if self.at is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            await anyio.sleep(0.005)
            raise RateLimited
        self.tokens -= 1.0
        spread = self.rng.lognormvariate(0.0, self.sigma) if self.sigma else 1.0
        await anyio.sleep(self.service * spread)


@dataclass
class Figures:
    ok_at: list[float] = field(default_factory=list)
    errors: int = 0
    busy: int = 0
    advised: int = 0


async def _offer(
    guard: ConcurrencyGuard, rate: float, seconds: float, upstream: Bucket | None = None
) -> Figures:
    upstream = Bucket() if upstream is None else upstream
    figures, rng = Figures(), random.Random(7)

    async def one() -> None:
        try:
            async with guard.slot():
                await upstream.call()
            figures.ok_at.append(anyio.current_time() - start)
        except ServerBusy as refusal:
            figures.busy += 1
            figures.advised += refusal.retry_after is not None and refusal.retry_after > 0
        except RateLimited:
            figures.errors += 1

    start = anyio.current_time()
    async with anyio.create_task_group() as tg:
        now = start
        while (now := now + rng.expovariate(rate)) < start + seconds:
            await anyio.sleep(now - anyio.current_time())
            tg.start_soon(one)
    return figures


@pytest.mark.anyio
async def test_an_upstream_rate_limit_is_paced_not_cut_to_a_ceiling() -> None:
    # 4x an upstream of 50 calls a second: a fixed 10 sends everything and the upstream serves
    # its rate; the adaptive guard must serve as much, refusing the excess with advice. (Its
    # first seconds are a new limit's own: its first probe for the uncrowded latency.)
    fixed = await _offer(ConcurrencyGuard(10, clock=anyio.current_time), 200.0, 10.0)
    guard = ConcurrencyGuard(
        limit=GradientLimit(), clock=anyio.current_time, overload_errors=(RateLimited,)
    )
    paced = await _offer(guard, 200.0, 10.0)
    served = sum(1 for t in paced.ok_at if t >= 4.0)
    assert served >= 0.95 * sum(1 for t in fixed.ok_at if t >= 4.0)
    assert paced.busy > 0.5 * (paced.busy + paced.errors + len(paced.ok_at))  # refused, mostly
    assert paced.advised == paced.busy  # every refusal says when to come back


@pytest.mark.anyio
async def test_a_small_burst_is_paced_by_the_timer_which_stops_with_the_queue() -> None:
    # 4x an upstream of 100 calls a second in bursts of 2 (30 ms calls), after a warm-up under
    # its rate: released only at other calls' ends the paced calls came in clumps the bucket
    # refused (0.75x a fixed 10 in the zoo's upstream_fast); spaced by the timer, the guard
    # serves what a fixed 10 does.
    async def run(guard: ConcurrencyGuard) -> int:
        upstream = Bucket(rate=100.0, burst=2.0, service=0.030, tokens=2.0, sigma=0.3)
        await _offer(guard, 70.0, 3.0, upstream)
        figures = await _offer(guard, 400.0, 6.0, upstream)
        return sum(1 for t in figures.ok_at if t >= 2.0)

    fixed = await run(ConcurrencyGuard(10, clock=anyio.current_time))
    guard = ConcurrencyGuard(
        limit=GradientLimit(), clock=anyio.current_time, overload_errors=(RateLimited,)
    )
    assert await run(guard) >= 0.95 * fixed
    # The queue drained: the timer stopped, nothing of the guard's is left running.
    await anyio.sleep(1.0)
    assert not guard.statistics().pace_timer_running


@pytest.mark.anyio
async def test_closing_the_guard_stops_a_paced_tools_timer_at_once() -> None:
    # 4x an upstream of 100 calls a second in bursts of 2 after a warm-up under its rate (as
    # above): paced, the timer runs while calls wait. Closed mid-stream, the guard stops it at
    # once (not once its queue drains), and the calls still waiting are admitted as calls end.
    upstream = Bucket(rate=100.0, burst=2.0, service=0.030, tokens=2.0, sigma=0.3)
    guard = Guard(overload_errors=(RateLimited,), clock=anyio.current_time, metrics=False)
    answers: list[str] = []

    async def one() -> None:
        try:
            response = await guard.call("search", upstream.call)
        except GuardClosed:
            answers.append("closed")
        else:
            answers.append(response.code or "ok")

    async with anyio.create_task_group() as tg:
        rng, now, start = random.Random(5), anyio.current_time(), anyio.current_time()
        slots = guard.concurrency("search")
        assert slots is not None
        while not (slots.statistics().pace_timer_running and slots.queued):
            rate = 70.0 if now < start + 3.0 else 400.0
            now += rng.expovariate(rate)
            await anyio.sleep(now - anyio.current_time())
            tg.start_soon(one)
            assert now < start + 10.0
        before = slots.statistics()
        assert before.pace_timer_running
        assert before.paced_rate is not None
        assert slots.queued > 0
        await guard.aclose()
        after = slots.statistics()
        assert not after.pace_timer_running
        assert after.paced_rate is None
    assert slots.queued == 0  # every waiter was answered
    assert slots.active == 0
    assert not slots.statistics().pace_timer_running
    assert _pace_tasks() == []


@pytest.mark.anyio
async def test_a_tool_never_paced_starts_no_timer() -> None:
    guard = ConcurrencyGuard(
        limit=GradientLimit(), clock=anyio.current_time, overload_errors=(RateLimited,)
    )
    await _offer(guard, 40.0, 2.0)  # under the upstream's rate: never a 429
    figures = guard.statistics()
    assert figures.paced_rate is None
    assert not figures.pace_timer_running


def test_a_timer_started_outside_any_event_loop_leaves_the_ends_to_pace() -> None:
    timer = PaceTimer("search")
    timer.start(lambda: 0.01)
    assert not timer.running  # no loop to tick on: nothing runs, nothing raised


def _pace_tasks() -> list[str]:
    """The pace timers' tasks alive now (trio: system tasks; asyncio's timer is no task)."""
    if sniffio.current_async_library() != "trio":
        return []
    import trio

    names: list[str] = []
    tasks = [trio.lowlevel.current_root_task()]
    while tasks:
        task = tasks.pop()
        names.append(task.name)
        tasks += [child for nursery in task.child_nurseries for child in nursery.child_tasks]
    return [name for name in names if name.startswith("fusion_guard pace")]


@pytest.mark.anyio
async def test_a_stopped_timer_ticks_no_more_and_leaves_nothing_behind() -> None:
    ticks: list[float] = []

    def tick() -> float:
        ticks.append(anyio.current_time())
        return 0.01

    timer = PaceTimer("search")
    timer.start(tick)
    await anyio.sleep(0.035)
    assert len(ticks) == 4
    trio_run = sniffio.current_async_library() == "trio"
    assert _pace_tasks() == (["fusion_guard pace search"] if trio_run else [])
    timer.stop()
    assert not timer.running
    for _ in range(2):  # trio: the cancelled task ends within the scheduler's next turns
        await anyio.lowlevel.checkpoint()
    assert _pace_tasks() == []
    await anyio.sleep(0.1)
    assert len(ticks) == 4  # no callback was left pending (asyncio), no task kept (trio)
    timer.start(tick)  # a stopped timer starts again
    await anyio.sleep(0.005)
    assert len(ticks) == 5
    assert timer.running
    timer.stop()


@pytest.mark.anyio
async def test_a_failing_tick_stops_the_timer_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ticks: list[float] = []

    def tick() -> float | None:
        ticks.append(anyio.current_time())
        if len(ticks) == 3:
            raise ValueError("a bug")
        return 0.01

    timer = PaceTimer("search")
    timer.start(tick)
    timer.start(tick)  # one timer at most: a second start while it runs does nothing
    await anyio.sleep(0.1)
    assert len(ticks) == 3
    assert ticks[1] - ticks[0] == pytest.approx(0.01)
    assert not timer.running
    assert "pace_timer_failed" in caplog.text


def test_refused_probes_wait_longer_up_to_a_bound() -> None:
    probe = PaceProbe(1.5)
    assert probe.refused() is None  # no raise to undo
    assert probe.clean(10.0, 8.0, held_back=False) == 10.0  # not held back: stays
    waits = []
    for _ in range(PROBE_BACKOFF + 2):
        wait = 0
        while probe.clean(10.0, 8.0, held_back=True) == 10.0:  # held back, but waiting
            wait += 1
        assert probe.refused() == 10.0  # the probe (to 15) refused: back
        waits.append(wait)
    assert waits == [0, 1, 2, 4, 8, 16]  # doubling, up to 2 ** PROBE_BACKOFF
    assert PROBE_BACKOFF == 4
    while probe.clean(10.0, 8.0, held_back=True) == 10.0:
        pass
    assert probe.clean(15.0, 8.0, held_back=False) == 15.0  # the probe served: no wait now
    assert probe.clean(15.0, 8.0, held_back=True) == 22.5
