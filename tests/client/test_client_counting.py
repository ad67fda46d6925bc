"""The default budget and throttle decide as their published rules say, over any sequence of
calls, refusals, acceptances and clock steps (hypothesis): a reference keeps every event with its
time and sums what is in the window, where the package counts in slices, keeps only the newest
slice's count apart and counts the throttle's requests and acceptances in one record
(``_Tally``); the two must agree on every decision, each probability and each balance, exactly."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from hypothesis import event, given, settings
from hypothesis import strategies as st

from fusion_guard.client import AdaptiveThrottle, RetryBudget
from fusion_guard.client._budget import Counting, _Window

K, RATIO, PER_SECOND, BUDGET_WINDOW, SLICES = 1.8, 0.25, 0.1, 30.0, 10
# The throttle's 4 s would make slices of 0.4 s, which no float holds: at a clock reading of
# 100.0, ``100 // 0.4`` is slice 249, whose end ``250 * 0.4`` is 100.0 itself: the package
# corrects for it (a reading's slice is the one that ends after it), the reference's plain
# ``now // slice`` would not. So the clock here steps by sixteenths of a second over slices of
# 0.5 s and 3 s, which floats hold exactly; the package and the reference then read the same
# slices.
THROTTLE_WINDOW = 5.0


class _Events:
    """A window as a list of (slice number, amount): the total is every event whose slice is
    one of the last ``SLICES`` at ``now``."""

    def __init__(self, span: float) -> None:
        self.slice = span / SLICES
        self.events: list[tuple[float, float]] = []

    def add(self, now: float) -> None:
        self.events.append((now // self.slice, 1.0))

    def total(self, now: float) -> float:
        newest = now // self.slice
        return sum(amount for index, amount in self.events if index > newest - SLICES)


class _Reference:
    """The budget (Finagle's ratio) and the throttle (SRE's, with the gate documented on
    ``AdaptiveThrottle``) over ``_Events``, with no cached state but when the gate shut."""

    def __init__(self, clock: Callable[[], float], rng: random.Random) -> None:
        self.clock, self.rng = clock, rng
        self.requests, self.accepts = _Events(THROTTLE_WINDOW), _Events(THROTTLE_WINDOW)
        self.refusals = _Events(THROTTLE_WINDOW)
        self.first, self.retries = _Events(BUDGET_WINDOW), _Events(BUDGET_WINDOW)
        self.shut_until = -math.inf

    def open(self, now: float) -> bool:
        accepts, refusals = self.accepts.total(now), self.refusals.total(now)
        if now < self.shut_until:
            shut = refusals > (K - 1) / 2 * accepts
        else:
            shut = refusals > max((K - 1) * accepts, 10)
        if shut:
            self.shut_until = now + THROTTLE_WINDOW
        return not shut

    def admit(self) -> bool:
        now = self.clock()
        if self.open(now):
            self.requests.add(now)
            return True
        requests = self.requests.total(now)
        self.requests.add(now)
        excess = requests - K * self.accepts.total(now)
        return excess <= 0 or self.rng.random() * (requests + 1) >= excess

    def admit_first(self) -> bool:
        if not self.admit():
            return False
        self.first.add(self.clock())
        return True

    def probability(self) -> float:
        now = self.clock()
        if self.open(now):
            return 0.0
        requests = self.requests.total(now)
        return max(0.0, (requests - K * self.accepts.total(now)) / (requests + 1))

    def balance(self) -> float:
        now = self.clock()
        allowed = RATIO * self.first.total(now) + PER_SECOND * BUDGET_WINDOW
        return max(0.0, allowed - self.retries.total(now))

    def withdraw(self) -> bool:
        if self.balance() < 1:
            return False
        self.retries.add(self.clock())
        return True


STEPS = st.lists(
    st.tuples(
        # steps within a slice, onto a slice's edge, across a few, past the window
        st.one_of(
            st.integers(0, 12).map(lambda sixteenths: sixteenths / 16),
            st.sampled_from([0.5, 1.0, 3.0, 4.5, 5.0, 31.0]),
        ),
        st.sampled_from(["first", "retry", "accepted", "refused", "probability", "balance"]),
        st.integers(1, 40),  # times in a row: enough refusals to shut the gate
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps=STEPS, seed=st.integers(0, 2**16))
def test_the_default_pair_decides_as_the_reference(
    steps: list[tuple[float, str, int]], seed: int
) -> None:
    now = [100.0]

    def clock() -> float:
        return now[0]

    budget = RetryBudget(RATIO, min_per_second=PER_SECOND, window=BUDGET_WINDOW, clock=clock)
    throttle = AdaptiveThrottle(K, window=THROTTLE_WINDOW, clock=clock, rng=random.Random(seed))
    counting = Counting(budget, throttle)
    reference = _Reference(clock, random.Random(seed))
    shut = False
    for gap, step, times in steps:
        now[0] += gap
        for _ in range(times):
            shut |= _step(step, counting, reference)
    if shut:
        event("the gate shut")


def _step(step: str, counting: Counting, reference: _Reference) -> bool:
    """One step on both sides; True when the gate was shut."""
    budget, throttle = counting.budget, counting.throttle
    assert isinstance(budget, RetryBudget)
    assert throttle is not None
    assert counting.admit_first is not None
    assert counting.on_accepted is not None
    clock = reference.clock
    if step == "first":
        assert counting.admit_first() == reference.admit_first()
    elif step == "retry":  # as ``Retrying`` asks before a retry
        admitted = throttle.admit()
        assert admitted == reference.admit()
        if admitted:
            assert budget.withdraw() == reference.withdraw()
    elif step == "accepted":
        counting.on_accepted()
        reference.accepts.add(clock())
    elif step == "refused":
        throttle.refused()
        reference.refusals.add(clock())
    elif step == "probability":
        assert throttle.rejection_probability() == reference.probability()
    else:
        assert budget.balance == reference.balance()
    return reference.shut_until > clock()


def test_a_window_moves_on_at_a_slice_edge_its_division_rounds_down() -> None:
    # 100.0 // 0.4 is 249.0 while 250 * 0.4 is 100.0: at that reading the newest slice has
    # ended, and the window must move on by one slice, not keep a slice more than it holds.
    window = _Window(4.0)
    window.add(99.9)
    window.add(100.0)
    for step in range(1, 30):
        window.add(100.0 + 0.4 * step)
    assert window.total(100.0 + 0.4 * 29) == 10  # the last 10 slices of 0.4 s, one call each
