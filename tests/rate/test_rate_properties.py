"""Properties over random arrivals: GCRA agrees with an exact token-bucket model (admissions) and
its promise cursor (the retry_after of refusals), never admits more than ``burst + rate *
window`` in any window, and composed limits are all-or-nothing and advise the latest opening."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from fusion_guard import CallContext, MemoryBackend, RateLimiter, RateLimits
from fusion_guard.backends import _memory  # private: only to make sweeps frequent
from fusion_guard.testing import FakeClock

PERIODS = [Fraction(1), Fraction(2), Fraction(1, 2), Fraction(3)]


class Bucket:
    """The reference: a token bucket in exact arithmetic (GCRA's textbook equivalent)."""

    def __init__(self, rate: int, per: Fraction, burst: int) -> None:
        self.refill = Fraction(rate) / per  # tokens per second
        self.burst = burst
        self.tokens = Fraction(burst)
        self.last = Fraction(0)

    def wait(self, now: Fraction) -> Fraction:
        """Seconds until a token is there (0 when one is), without taking it."""
        self.tokens = min(Fraction(self.burst), self.tokens + (now - self.last) * self.refill)
        self.last = now
        return max(Fraction(0), (1 - self.tokens) / self.refill)

    def take(self) -> None:
        self.tokens -= 1

    def full(self, now: Fraction) -> bool:
        return self.tokens + (now - self.last) * self.refill >= self.burst


class Promised:
    """One limit in the reference: the exact bucket, the promise cursor (the next opening not
    yet promised to a refused caller; ``None`` before any refusal) and the frontier (one
    interval past the last opening promised to a known caller; ``None`` before any)."""

    def __init__(self, rate: int, per: Fraction, burst: int) -> None:
        self.bucket = Bucket(rate, per, burst)
        self.interval = per / rate
        self.burst = burst
        self.cursor: Fraction | None = None
        self.frontier: Fraction | None = None

    def opening(self, now: Fraction, known: bool = False) -> Fraction | None:
        """``None`` when this limit admits a call now, else the opening to promise: the next
        one not yet promised, for an anonymous caller at most ``burst`` openings past the later
        of the budget's own and the frontier (the anonymous bound)."""
        wait = self.bucket.wait(now)
        if wait == 0:
            return None
        budget = now + wait
        opening = budget if self.cursor is None or self.cursor < budget else self.cursor
        if not known:
            base = budget if self.frontier is None or self.frontier < budget else self.frontier
            opening = min(opening, base + self.burst * self.interval)
        return opening

    def live(self, now: Fraction) -> int:
        """How many entries the backend must still hold for this limit: its TAT until the bucket
        is full again, its cursor and frontier until their times have passed."""
        return (
            (not self.bucket.full(now))
            + (self.cursor is not None and self.cursor > now)
            + (self.frontier is not None and self.frontier > now)
        )


Held = dict[str, tuple[Fraction, int]]
"""The reference's known callers: each one's outstanding promise and its limit."""


def decide(
    limits: list[Promised], now: Fraction, caller: str | None = None, held: Held | None = None
) -> tuple[Fraction, int] | None:
    """The reference decision: ``None`` when admitted (every bucket spends a token), else the
    retry_after and which limit's opening is the latest; every refusing limit's cursor moves one
    of its intervals past that opening (never back). A known ``caller`` (its promises in
    ``held``) before its promise is told it again, admitted or not; its new promise moves the
    refusing limits' frontiers."""
    known = caller is not None and held is not None
    if known and caller in held and held[caller][0] > now:  # type: ignore[operator]
        promise, index = held[caller]  # type: ignore[index]
        return promise - now, index
    openings = [limit.opening(now, known) for limit in limits]
    refusing = [(i, at) for i, at in enumerate(openings) if at is not None]
    if not refusing:
        for limit in limits:
            limit.bucket.take()
        return None
    refused, latest = max(refusing, key=lambda item: item[1])
    for i, _ in refusing:
        limit = limits[i]
        after = latest + limit.interval
        limit.cursor = after if limit.cursor is None else max(limit.cursor, after)
        if known:
            limit.frontier = after if limit.frontier is None else max(limit.frontier, after)
    if known:
        held[caller] = (latest, refused)  # type: ignore[index]
    return latest - now, refused


limit_params = st.tuples(
    st.integers(min_value=1, max_value=20),
    st.sampled_from(PERIODS),
    st.integers(min_value=1, max_value=6),
)
gaps_ms = st.lists(st.integers(min_value=0, max_value=400), min_size=1, max_size=120)


def _arrivals(gaps: list[int]) -> list[Fraction]:
    times, now = [], 0
    for gap in gaps:
        now += gap
        times.append(Fraction(now, 1000))
    return times


@settings(max_examples=300, deadline=None)
@given(limit_params, gaps_ms)
def test_gcra_agrees_with_the_exact_token_bucket_and_promise_cursor(
    params: tuple[int, Fraction, int], gaps: list[int]
) -> None:
    rate, per, burst = params
    clock = FakeClock()
    limiter = RateLimiter(rate, per=float(per), burst=burst, clock=clock)
    model = Promised(rate, per, burst)
    for now in _arrivals(gaps):
        clock.now = float(now)
        decision = limiter.try_acquire("k")
        expected = decide([model], now)
        assert decision.allowed == (expected is None)
        if expected is not None:
            assert decision.retry_after >= float(model.bucket.wait(now)) - 1e-9
            assert abs(decision.retry_after - float(expected[0])) < 1e-6


@settings(max_examples=300, deadline=None)
@given(limit_params, gaps_ms)
def test_no_window_admits_more_than_burst_plus_rate_times_window(
    params: tuple[int, Fraction, int], gaps: list[int]
) -> None:
    rate, per, burst = params
    clock = FakeClock()
    limiter = RateLimiter(rate, per=float(per), burst=burst, clock=clock)
    admitted: list[Fraction] = []
    for now in _arrivals(gaps):
        clock.now = float(now)
        if limiter.try_acquire().allowed:
            admitted.append(now)
    for i, start in enumerate(admitted):
        for j in range(i, len(admitted)):
            window = admitted[j] - start
            assert j - i + 1 <= burst + window * rate / per


@settings(max_examples=200, deadline=None)
@given(
    limit_params, limit_params, st.lists(st.tuples(st.integers(0, 200), st.booleans()), max_size=80)
)
def test_composed_limits_are_all_or_nothing_and_advise_the_latest_opening(
    first: tuple[int, Fraction, int],
    second: tuple[int, Fraction, int],
    calls: list[tuple[int, bool]],
) -> None:
    clock = FakeClock()
    backend = MemoryBackend(clock)
    limits = RateLimits(
        [
            RateLimiter(first[0], per=float(first[1]), burst=first[2], backend=backend),
            RateLimiter(
                second[0], per=float(second[1]), burst=second[2], scope="client", backend=backend
            ),
        ]
    )
    server = Promised(*first)
    clients = {"a": Promised(*second), "b": Promised(*second)}
    held: Held = {}
    now = Fraction(0)
    for gap, is_a in calls:
        now += Fraction(gap, 1000)
        clock.now = float(now)
        client = "a" if is_a else "b"
        pair = [server, clients[client]]
        openings = [limit.opening(now, known=True) for limit in pair]
        early = client in held and held[client][0] > now
        refused = limits.check(CallContext("t", client=client))
        expected = decide(pair, now, client, held)
        assert (refused is None) == (expected is None)
        if refused is not None and expected is not None:
            assert abs(refused.retry_after - float(expected[0])) < 1e-6
            first_at, second_at = (now if at is None else at for at in openings)
            if not early and abs(first_at - second_at) > Fraction(1, 10**6):  # a near tie
                assert refused.scope == ("global" if first_at > second_at else "client")


SMALL_SWEEP = 4
LIMITS = {"slow": (1, Fraction(2), 2), "fast": (10, Fraction(1), 3)}


class MemoryBackendMachine(RuleBasedStateMachine):
    """Random calls on known and brand-new keys under two limits sharing one backend, with the
    clock moving in between and sweeps made frequent: every decision and every promise still
    matches the exact model (so clean-ups never drop live state, TAT or cursor) and the tables
    stay within their bound."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.backend = MemoryBackend(self.clock)
        self.limiters = {
            name: RateLimiter(rate, per=float(per), burst=burst, backend=self.backend, name=name)
            for name, (rate, per, burst) in LIMITS.items()
        }
        self.models: dict[tuple[str, str], Promised] = {}
        self.now = Fraction(0)
        self.new_keys = 0
        self.most_live = 0

    @rule(ms=st.integers(min_value=0, max_value=700))
    def advance(self, ms: int) -> None:
        self.now += Fraction(ms, 1000)
        self.clock.now = float(self.now)

    @rule(limit=st.sampled_from(sorted(LIMITS)), key=st.sampled_from(["a", "b", "c", None]))
    def call(self, limit: str, key: str | None) -> None:
        if key is None:
            self.new_keys += 1
            key = f"new-{self.new_keys}"
        model = self.models.setdefault((limit, key), Promised(*LIMITS[limit]))
        decision = self.limiters[limit].try_acquire(key)
        expected = decide([model], self.now)
        assert decision.allowed == (expected is None)
        if expected is not None:
            assert abs(decision.retry_after - float(expected[0])) < 1e-6

    @invariant()
    def table_is_bounded(self) -> None:
        live = sum(model.live(self.now) for model in self.models.values())
        self.most_live = max(self.most_live, live)
        assert len(self.backend) <= max(SMALL_SWEEP, 2 * self.most_live)


def test_memory_backend_state_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_memory, "_MIN_SWEEP", SMALL_SWEEP)
    run_state_machine_as_test(
        MemoryBackendMachine,
        settings=settings(max_examples=150, stateful_step_count=60, deadline=None),
    )
