"""Retry budgets: how many retries a process may add to one server's load, and client-side
adaptive throttling.

A budget hears of every attempt and its answer and is asked before each retry; once spent, a
refused call goes back to its caller at once. Every session to one server in the process shares
one budget (``shared_budget``), so a fleet of callers in one process cannot multiply its load.

Each kind follows a published design:

- ``TokenBucket``: gRPC's retry throttling. ``max_tokens`` tokens at first; a refusal takes one,
  a success gives back ``token_ratio``; retries go only while more than half remain.
- ``RetryBudget``: Finagle's and Linkerd's retry budget, a ratio. Over the last ``window``
  seconds, retries stay within ``ratio`` of first attempts plus ``min_per_second`` a second (a
  floor, so a quiet client may still retry). .NET's ``HttpRetryBudgetOptions`` is
  ``ratio=0.1`` with no floor.
- ``AdaptiveThrottle``: Google SRE's client-side throttling: each call is refused locally, before
  it is sent, with probability ``max(0, (requests - k * accepts) / (requests + 1))`` over a
  short window, while the server refuses more than ``(k - 1) / 2`` attempts per acceptance.

None of them is thread-safe beyond what the GIL gives: their updates are a few arithmetic steps
on floats, and a lost update under threads only shifts a budget by one token.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Protocol

__all__ = [
    "AdaptiveThrottle",
    "Budget",
    "RetryBudget",
    "TokenBucket",
    "default_budget",
    "default_throttle",
    "reset_shared_budgets",
    "shared_budget",
    "shared_throttle",
]

Clock = Callable[[], float]


class Budget(Protocol):
    """What a retry budget hears and answers (``RetryBudget`` and ``TokenBucket`` are two; any
    object with these methods is one); ``balance`` is what is left (never negative)."""

    def sent(self, *, retry: bool) -> None:
        """An attempt went out (``retry``: not the call's first)."""

    def answered(self, *, refused: bool) -> None:
        """An attempt came back: refused (SERVER_BUSY, RATE_LIMITED) or not."""

    def withdraw(self) -> bool:
        """Whether one more retry may go now (and, when it may, counts it as taken)."""

    @property
    def balance(self) -> float:
        """What is left to spend, in the budget's own unit (tokens, retries)."""


def _positive(name: str, value: float, *, zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not zero):
        bound = ">= 0" if zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return float(value)


class TokenBucket:
    """gRPC-style retry throttling (see the module). ``max_tokens`` in (0, 1000],
    ``token_ratio`` > 0."""

    __slots__ = ("_ratio", "_threshold", "max_tokens", "tokens")

    def __init__(self, max_tokens: float = 10, token_ratio: float = 0.1) -> None:
        self.max_tokens = _positive("max_tokens", max_tokens)
        if self.max_tokens > 1000:  # gRPC's bound: a larger bucket never throttles
            raise ValueError(f"max_tokens must be at most 1000, got {max_tokens!r}")
        self._ratio = _positive("token_ratio", token_ratio)
        self._threshold = self.max_tokens / 2
        self.tokens = self.max_tokens

    def sent(self, *, retry: bool) -> None:
        pass  # the bucket moves on answers only

    def answered(self, *, refused: bool) -> None:
        if refused:
            self.tokens = max(0.0, self.tokens - 1)
        else:
            self.tokens = min(self.max_tokens, self.tokens + self._ratio)

    def withdraw(self) -> bool:
        return self.tokens > self._threshold

    @property
    def balance(self) -> float:
        return self.tokens

    def __repr__(self) -> str:
        return f"TokenBucket(tokens={self.tokens:.2f}/{self.max_tokens:g})"


class _Window:
    """Counts over the last ``span`` seconds in ``slices`` buckets: memory stays bounded
    whatever the call rate, and a count leaves the window at most one slice late. The newest
    slice's count is kept apart from the older slices' total: while it lasts, adding is one
    comparison and one addition, and reading one addition (the client counts on every call).
    ``end`` and ``newest`` are public so that the counters on a call's path add in place
    (``if now < w.end: w.newest += 1``, else ``add``): a function call there is a measurable
    part of the wrapper's overhead."""

    __slots__ = ("_counts", "_index", "_older", "_slice", "end", "newest")

    def __init__(self, span: float, slices: int = 10) -> None:
        self._slice = span / slices
        self._counts = [0.0] * (slices - 1)  # the older slices, oldest first
        self._index = -math.inf  # the newest slice's number (time // slice)
        self.end = -math.inf  # when it ends
        self.newest = 0.0  # its count
        self._older = 0.0  # the older slices' total

    def _advance(self, now: float) -> None:
        """Make the slice of ``now`` the newest: the slices passed over leave the window."""
        counts = self._counts
        index = now // self._slice
        if (index + 1) * self._slice <= now:
            # A floor division can round down to the slice that ends at ``now`` (100.0 // 0.4
            # is 249, and 250 * 0.4 is 100.0): the slice of ``now`` is the next one. Without
            # this a shift of none grew the window by a slice, and a slice ending at ``now``
            # left the next reading at ``now`` to move it on (two readings, two totals).
            index += 1
        passed = index - self._index  # >= 1
        if passed > len(counts):
            counts[:] = [0.0] * len(counts)
        else:
            steps = int(passed)
            # The newest slice becomes the youngest of the older ones, followed by the empty
            # slices passed over; as many of the oldest leave.
            counts[:] = [*counts[steps:], self.newest, *([0.0] * (steps - 1))]
        self._index = index
        self.end = (index + 1) * self._slice
        self.newest = 0.0
        self._older = sum(counts)  # summed again, not decremented: no float drift

    def add(self, now: float, amount: float = 1.0) -> None:
        if now >= self.end:
            self._advance(now)
        # (a clock read a moment before the newest slice began counts in it)
        self.newest += amount

    def total(self, now: float) -> float:
        if now >= self.end:
            self._advance(now)
        return self._older + self.newest


class RetryBudget:
    """A ratio retry budget, Finagle-style (see the module): over the last ``window`` seconds,
    retries at most ``ratio`` x first attempts + ``min_per_second`` x ``window``.

    ``RetryBudget()`` is the default every server gets (25 %, 0.1 a second, 30 s; see
    ``default_budget``); ``RetryBudget(0.2, min_per_second=10, window=10)`` is Finagle's and
    Linkerd's, ``RetryBudget(0.1, min_per_second=0)`` .NET's.

    ``refund=True``: a retry the server answered without a refusal gives its withdrawal back
    (with a throttle, unless the throttle's gate was shut within its window), so the budget
    bounds the retries that were refused, not those that found an opening. Off by default: it
    lets a blip's calls, refused again and again, all be retried, but more retries of a
    sustained overload through at 16 client processes (docs/client-measured.md, "The server's
    advice and a patient gate")."""

    __slots__ = ("_clock", "_first", "_floor", "_ratio", "_retries", "retry_accepted")

    def __init__(
        self,
        ratio: float = 0.25,
        *,
        min_per_second: float = 0.1,
        window: float = 30.0,
        refund: bool = False,
        clock: Clock = time.monotonic,
    ) -> None:
        self.retry_accepted: Callable[[], None] | None = self._refund if refund else None
        """Called by a retrying client when a retry was answered with no refusal (None: the
        budget keeps no such count, and the client calls nothing)."""
        self._ratio = _positive("ratio", ratio, zero=True)
        self._floor = _positive("min_per_second", min_per_second, zero=True) * _positive(
            "window", window
        )
        self._first = _Window(window)
        self._retries = _Window(window)
        self._clock = clock

    def sent(self, *, retry: bool) -> None:
        if not retry:
            first, now = self._first, self._clock()
            if now < first.end:
                first.newest += 1
            else:
                first.add(now)

    def answered(self, *, refused: bool) -> None:
        pass  # the ratio counts what is sent, whatever the answer

    def first_attempts_on(self, clock: Clock) -> _Window | None:
        """The window counting first attempts, for a caller that reads ``clock`` anyway and
        counts them itself (``AdaptiveThrottle.admit_first``), as ``sent(retry=False)`` does;
        None when this budget keeps another clock."""
        return self._first if clock is self._clock else None

    def withdraw(self) -> bool:
        now = self._clock()
        if self._balance(now) < 1:
            return False
        self._retries.add(now)
        return True

    def _refund(self) -> None:
        self._retries.add(self._clock(), -1.0)

    def _balance(self, now: float) -> float:
        allowed = self._ratio * self._first.total(now) + self._floor
        # A refund counts in a later slice than its withdrawal, so it may outstay it: the
        # window's retries are never counted below none.
        return max(0.0, allowed - max(0.0, self._retries.total(now)))

    @property
    def balance(self) -> float:
        return self._balance(self._clock())

    def __repr__(self) -> str:
        return f"RetryBudget(balance={self.balance:.1f})"


_EVIDENCE = 10
"""Refusals in a throttle's window that are no evidence yet, whatever the acceptances: a
client's first refusal, before any acceptance, would otherwise hold back half of what follows it
(the server's retry-storm rule waits for 10 arrivals likewise)."""


class AdaptiveThrottle:
    """Google SRE client-side throttling (see the module): ``k`` >= 1, over the last ``window``
    seconds (short, so the client trusts a recovered server again within seconds).

    One change to the book's rule, a gate: calls are held back only once the server refuses
    more than ``k - 1`` attempts per acceptance over the window (and more than 10: a few
    refusals are no evidence), and from then on, until a window has passed with the gate
    open, while it refuses more than ``(k - 1) / 2`` (with no floor). A burst (a 1 s blip)
    stays within the first share and is sent; a sustained overload shuts the gate and keeps
    it shut, where the book's probability holds the refusals near ``k - 1`` per acceptance;
    one gate at the half share with the floor (the rule before) held back a blip's retries,
    and let each of 16 processes seeing a sixteenth of an overload send 10 refusals a window
    unthrottled (1.1-1.3 refusals per acceptance). The book's probability counts the
    calls held back as demand, so once a crowd's refusals (say, agents starting together) have
    driven it up, the client sends about ``k`` x what the server accepts, and the server, now
    accepting all it is sent, is trusted again only by a factor of ``k`` a window: an idle
    server and a starving client (a fleet of agents in ``fusion-guard demo --scenario agents``
    sent 0.13 attempts per call for a whole overload). With the gate, a server that stops
    refusing gets everything at once, and under sustained overload the refusals stay near
    ``k - 1`` per acceptance.

    ``patience``: seconds the refusals must stay past the full share before the gate first
    shuts (once shut, it shuts again at once for a window): a burst shorter than that is sent
    whole. 0 (the default): a blip in batches shut the gate at 4 client processes, a patience
    of 1 s let 16 processes' sustained overload through at more than one refusal per
    acceptance (docs/client-measured.md, "The server's advice and a patient gate").

    ``AdaptiveThrottle()`` is the default every server gets (``k=1.8`` over 4 s; see
    ``default_throttle``)."""

    __slots__ = ("_accepts", "_clock", "_gate", "_k", "_open_until", "_over_since",
                 "_patience", "_random", "_refusals", "_requests", "_share", "_shut_until",
                 "_span")  # fmt: skip

    def __init__(
        self,
        k: float = 1.8,
        *,
        window: float = 4.0,
        patience: float = 0.0,
        clock: Clock = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._k = _positive("k", k)
        self._patience = _positive("patience", patience, zero=True)
        self._over_since = math.inf  # since when the refusals are past the full share
        if self._k < 1:
            raise ValueError(
                f"k must be >= 1 (below 1 the client refuses what would pass), got {k!r}"
            )
        # The gate shuts when the server refuses more than the share the book's probability
        # holds it to (``k - 1`` per acceptance, and more than ``_EVIDENCE``); within a window
        # of being shut, it opens and shuts at half of it, with no floor. Once shut, a gate at
        # the full share flapped with chance under a steady overload, each opening a burst of
        # refusals; the floor let 10 through a window in every process.
        self._share = self._k - 1
        self._gate = self._share / 2
        self._span = _positive("window", window)
        self._shut_until = -math.inf
        self._requests = _Window(_positive("window", window))
        self._accepts = _Window(window)
        self._refusals = _Window(window)
        self._clock = clock
        self._random = rng or random.Random()
        # Until when the gate is known to be open: till the newest slice ends (a slice leaving
        # the window may take acceptances with it) or the next refusal, whichever is first.
        self._open_until = -math.inf

    def _open(self, now: float) -> bool:
        """Whether the server refuses within its share (then nothing is held back)."""
        accepts = self._accepts.total(now)
        refusals = self._refusals.total(now)
        if now < self._shut_until:  # shut within the window: the half share alone, both ways
            shut = refusals > self._gate * accepts
        else:
            shut = refusals > max(self._share * accepts, _EVIDENCE)
            if shut and self._patience:
                if self._over_since == math.inf:
                    self._over_since = now
                if now - self._over_since < self._patience:
                    return True
        if shut:
            self._shut_until = now + self._span
            return False
        self._over_since = math.inf
        self._open_until = self._accepts.end
        return True

    def shut_lately(self) -> bool:
        """Whether the gate has been shut within the last window (the server's refusals were
        judged an overload)."""
        return self._clock() < self._shut_until

    def rejection_probability(self) -> float:
        """The probability that a call is held back now."""
        now = self._clock()
        if self._open(now):
            return 0.0
        requests = self._requests.total(now)
        return max(0.0, (requests - self._k * self._accepts.total(now)) / (requests + 1))

    def admit(self) -> bool:
        """Whether to send a call now; counted as a request either way (a call refused here
        still tells the throttle how much is wanted)."""
        now = self._clock()
        window = self._requests
        if now < self._open_until or self._open(now):  # the path of every call
            if now < window.end:
                window.newest += 1
            else:
                window.add(now)
            return True
        requests = window.total(now)
        window.add(now)
        excess = requests - self._k * self._accepts.total(now)
        return excess <= 0 or self._random.random() * (requests + 1) >= excess

    def admit_first(self, first_attempts: _Window) -> bool:
        """``admit()`` for a first attempt that, once admitted, is also counted in
        ``first_attempts`` (a retry budget's, ``RetryBudget.first_attempts_on``) at the same
        reading of the clock: one clock read and one call on the path of every call."""
        now = self._clock()
        if now < self._open_until or self._open(now):
            window = self._requests
            if now < window.end:
                window.newest += 1
            else:
                window.add(now)
            if now < first_attempts.end:
                first_attempts.newest += 1
            else:
                first_attempts.add(now)
            return True
        if not self.admit():
            return False
        first_attempts.add(now)
        return True

    @property
    def clock(self) -> Clock:
        """The clock the window runs on."""
        return self._clock

    def accepted(self) -> None:
        """The server accepted a call (any answer but a refusal)."""
        accepts, now = self._accepts, self._clock()
        if now < accepts.end:
            accepts.newest += 1
        else:
            accepts.add(now)

    def refused(self) -> None:
        """The server refused a call (SERVER_BUSY, RATE_LIMITED)."""
        self._refusals.add(self._clock())
        self._open_until = -math.inf

    def __repr__(self) -> str:
        return f"AdaptiveThrottle(k={self._k:g}, rejecting={self.rejection_probability():.0%})"


def default_budget(clock: Clock = time.monotonic) -> RetryBudget:
    """The budget a server gets unless told otherwise, chosen by measurement
    (``benchmarks/retry_budget.py``, docs/client.md): retries within 25 % of the first attempts
    of the last 30 s, plus 3 (0.1 a second) so a quiet client may still retry.

    A ratio scales with the process's own traffic, so the fleet's retries stay within 25 % of
    its load however many processes share it (a token bucket's fixed size, or Finagle's floor
    of 10 a second in every process, does not). At sustained overload the throttle
    (``default_throttle``), not the budget, holds the attempts down; the budget is for the
    bursts the throttle's window is too slow to see, and its 30 s of deposits let a 1 s blip's
    refusals all be retried, also soon after an overload whose retries the window still counts
    (at 15 % and 20 %, the agents demo's blip lost calls to a budget spent 12 s before)."""
    return RetryBudget(clock=clock)


def default_throttle(
    clock: Clock = time.monotonic, rng: random.Random | None = None
) -> AdaptiveThrottle:
    """The client-side throttle a server gets unless told otherwise, chosen by measurement
    (``benchmarks/retry_budget.py``, docs/client.md): ``k=1.8`` over the last 4 s.

    Without a throttle, the first attempts alone at 3x overload are refused twice per
    acceptance, whatever the retry policy. With ``k`` the client sends about ``k`` x what the
    server accepts, so refusals settle below ``k - 1`` per acceptance (docs/client-measured.md
    has the figures). The book's ``k=2`` over 2 s let more through; with the gate's two
    shares, ``k=1.7`` cost the agents demo's short run its capacity back (15 calls a second of
    20), and windows of 2 or 3 s made more refusals at 3x and held back calls of a 1 s blip
    (``busy`` seed 5: 90.2 / 96.7 % served in time). 4 s: a 1 s blip moves a 4 s window too
    little to throttle it, and a server that stops refusing is sent everything once its
    refusals fall to half the share (the gate in ``AdaptiveThrottle``); over 5 s an
    overload's refusals, still in the window 2 s after capacity came back, cost the agents
    demo's short run part of its second back."""
    return AdaptiveThrottle(clock=clock, rng=rng)


_shared: dict[str, Budget] = {}
_throttles: dict[str, AdaptiveThrottle] = {}
_shared_lock = threading.Lock()


def shared_budget(server: str, factory: Callable[[], Budget] = default_budget) -> Budget:
    """The one budget of ``server`` in this process, made by ``factory`` the first time (later
    factories are ignored: the first caller decides)."""
    budget = _shared.get(server)
    if budget is None:
        with _shared_lock:
            budget = _shared.setdefault(server, factory())
    return budget


def shared_throttle(
    server: str, factory: Callable[[], AdaptiveThrottle] = default_throttle
) -> AdaptiveThrottle:
    """The one client-side throttle of ``server`` in this process, made by ``factory`` the
    first time (later factories are ignored: the first caller decides)."""
    throttle = _throttles.get(server)
    if throttle is None:
        with _shared_lock:
            throttle = _throttles.setdefault(server, factory())
    return throttle


class Counting:
    """What a retrying client (``Retrying``) counts for its ``budget`` and ``throttle`` (either
    may be None) on the path of every call that succeeds at once, chosen once as the fewest
    Python calls for the pair (each is a measurable part of the wrapper's overhead,
    docs/client-measured.md): None when there is nothing to count.

    - ``admit_first``: counts a first attempt sent with no ``RetryCall``; False: held back.
    - ``on_accepted``: counts an attempt answered with no refusal.
    - ``answers``: the budget, unless it ignores answers (a ``RetryBudget`` counts what is
      sent): told of each answer, one call fewer on the path of every call when it is None.
    - ``retry_accepted``: tells the budget a retry was answered with no refusal (its
      ``retry_accepted``, with a throttle only while the throttle has not shut lately); None
      when the budget has none.
    """

    __slots__ = (
        "_refund",
        "admit_first",
        "answers",
        "budget",
        "on_accepted",
        "retry_accepted",
        "throttle",
    )

    def __init__(self, budget: Budget | None, throttle: AdaptiveThrottle | None) -> None:
        self.budget, self.throttle = budget, throttle
        self.retry_accepted: Callable[[], object] | None = getattr(budget, "retry_accepted", None)
        self._refund = self.retry_accepted
        if self.retry_accepted is not None and throttle is not None:
            self.retry_accepted = self._refund_unless_shut
        self.answers = (
            None
            if budget is None or getattr(type(budget), "answered", None) is RetryBudget.answered
            else budget
        )
        # The default pair (exactly: a subclass may count otherwise), a RetryBudget on the
        # throttle's clock, lets the throttle count the budget's first attempts.
        first_attempts = (
            budget.first_attempts_on(throttle.clock)
            if type(budget) is RetryBudget and type(throttle) is AdaptiveThrottle
            else None
        )
        self.admit_first: Callable[[], bool] | None
        if throttle is None:
            self.admit_first = None if budget is None else self._first_sent
        elif first_attempts is not None:  # the defaults: both at one clock reading
            self.admit_first = partial(throttle.admit_first, first_attempts)
        else:
            self.admit_first = throttle.admit if budget is None else self._first_sent
        self.on_accepted: Callable[[], object] | None
        if self.answers is None:
            self.on_accepted = None if throttle is None else throttle.accepted
        else:
            self.on_accepted = (
                partial(self.answers.answered, refused=False)
                if throttle is None
                else self._accepted
            )

    def _refund_unless_shut(self) -> None:
        """``retry_accepted`` with a throttle: a retry accepted while the throttle judges the
        refusals an overload is no evidence of a passing burst, and keeps its withdrawal (each
        refund in a sustained overload sends one more retry to be refused)."""
        throttle, refund = self.throttle, self._refund
        if throttle is not None and refund is not None and not throttle.shut_lately():
            refund()

    def _first_sent(self) -> bool:
        """``admit_first`` for the pairs it has no shorter form for: True when the throttle
        lets the first attempt go (then counted by the budget)."""
        throttle = self.throttle
        if throttle is not None and not throttle.admit():
            return False
        if self.budget is not None:
            self.budget.sent(retry=False)
        return True

    def _accepted(self) -> None:
        """``on_accepted`` for a budget told of answers, and a throttle."""
        if self.answers is not None:
            self.answers.answered(refused=False)
        if self.throttle is not None:
            self.throttle.accepted()


class Pushback:
    """What a server told this process's calls about retrying, kept for every call to it: the
    time (the event loop's clock) before which no retry goes, set by a refusal carrying
    ``retry_now`` = ``false``; and, per tool, the next free opening of its rate limit, so that
    the process's own rate-limited retries come back one emission interval apart (see
    ``Retrying``)."""

    __slots__ = ("hold_until", "paced_until")

    def __init__(self) -> None:
        self.hold_until = -math.inf
        self.paced_until: dict[str, float] = {}

    def hold(self, until: float) -> None:
        """No retry before ``until`` (a later hold wins)."""
        if until > self.hold_until:
            self.hold_until = until


_holds: dict[str, Pushback] = {}


def shared_pushback(server: str) -> Pushback:
    """The one ``Pushback`` of ``server`` in this process."""
    pushback = _holds.get(server)
    if pushback is None:
        with _shared_lock:
            pushback = _holds.setdefault(server, Pushback())
    return pushback


def reset_shared_budgets() -> None:
    """Forget every shared budget, throttle and server pushback (for tests, and after a
    fork)."""
    with _shared_lock:
        _shared.clear()
        _throttles.clear()
        _holds.clear()
