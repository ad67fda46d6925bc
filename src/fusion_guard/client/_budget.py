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
  short window.

None of them is thread-safe beyond what the GIL gives: their updates are a few arithmetic steps
on floats, and a lost update under threads only shifts a budget by one token.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = [
    "AdaptiveThrottle",
    "Budget",
    "RetryBudget",
    "TokenBucket",
    "default_budget",
    "reset_shared_budgets",
    "shared_budget",
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
    whatever the call rate, and a count leaves the window at most one slice late."""

    __slots__ = ("_counts", "_slice", "_starts")

    def __init__(self, span: float, slices: int = 10) -> None:
        self._slice = span / slices
        self._counts = [0.0] * slices
        self._starts = [-math.inf] * slices

    def add(self, now: float, amount: float = 1.0) -> None:
        index = math.floor(now / self._slice)
        at = index % len(self._counts)
        if self._starts[at] != index:
            self._starts[at] = index
            self._counts[at] = 0.0
        self._counts[at] += amount

    def total(self, now: float) -> float:
        oldest = math.floor(now / self._slice) - len(self._counts) + 1
        return sum(c for c, s in zip(self._counts, self._starts, strict=True) if s >= oldest)


class RetryBudget:
    """A ratio retry budget, Finagle-style (see the module): over the last ``window`` seconds,
    retries at most ``ratio`` x first attempts + ``min_per_second`` x ``window``.

    ``RetryBudget()`` is the default every server gets (15 %, 0.1 a second, 30 s; see
    ``default_budget``); ``RetryBudget(0.2, min_per_second=10, window=10)`` is Finagle's and
    Linkerd's, ``RetryBudget(0.1, min_per_second=0)`` .NET's."""

    __slots__ = ("_clock", "_first", "_floor", "_ratio", "_retries")

    def __init__(
        self,
        ratio: float = 0.15,
        *,
        min_per_second: float = 0.1,
        window: float = 30.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self._ratio = _positive("ratio", ratio, zero=True)
        self._floor = _positive("min_per_second", min_per_second, zero=True) * _positive(
            "window", window
        )
        self._first = _Window(window)
        self._retries = _Window(window)
        self._clock = clock

    def sent(self, *, retry: bool) -> None:
        if not retry:
            self._first.add(self._clock())

    def answered(self, *, refused: bool) -> None:
        pass  # the ratio counts what is sent, whatever the answer

    def withdraw(self) -> bool:
        now = self._clock()
        if self._balance(now) < 1:
            return False
        self._retries.add(now)
        return True

    def _balance(self, now: float) -> float:
        allowed = self._ratio * self._first.total(now) + self._floor
        return max(0.0, allowed - self._retries.total(now))

    @property
    def balance(self) -> float:
        return self._balance(self._clock())

    def __repr__(self) -> str:
        return f"RetryBudget(balance={self.balance:.1f})"


class AdaptiveThrottle:
    """Google SRE client-side throttling (see the module): ``k`` >= 1 (2 by default: the
    server may refuse up to half of what it is sent before the client holds back), over the
    last ``window`` seconds (short, so the client trusts a recovered server again quickly)."""

    __slots__ = ("_accepts", "_clock", "_k", "_random", "_requests")

    def __init__(
        self,
        k: float = 2.0,
        *,
        window: float = 2.0,
        clock: Clock = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._k = _positive("k", k)
        if self._k < 1:
            raise ValueError(
                f"k must be >= 1 (below 1 the client refuses what would pass), got {k!r}"
            )
        self._requests = _Window(_positive("window", window))
        self._accepts = _Window(window)
        self._clock = clock
        self._random = rng or random.Random()

    def rejection_probability(self) -> float:
        now = self._clock()
        requests = self._requests.total(now)
        return max(0.0, (requests - self._k * self._accepts.total(now)) / (requests + 1))

    def admit(self) -> bool:
        """Whether to send a call now; counted as a request either way (a call refused here
        still tells the throttle how much is wanted)."""
        rejected = self._random.random() < self.rejection_probability()
        self._requests.add(self._clock())
        return not rejected

    def accepted(self) -> None:
        """The server accepted a call (any answer but a refusal)."""
        self._accepts.add(self._clock())


def default_budget(clock: Clock = time.monotonic) -> RetryBudget:
    """The budget a server gets unless told otherwise, chosen by measurement
    (``benchmarks/retry_budget.py``, docs/client.md): retries within 15 % of the first attempts
    of the last 30 s, plus 3 (0.1 a second) so a quiet client may still retry.

    A ratio scales with the process's own traffic, so the fleet's retries stay within 15 % of
    its load however many processes share it (a token bucket's fixed size, or Finagle's floor
    of 10 a second in every process, does not); the 30 s of deposits let a 1 s blip's refusals
    all be retried."""
    return RetryBudget(clock=clock)


_shared: dict[str, Budget] = {}
_shared_lock = threading.Lock()


def shared_budget(server: str, factory: Callable[[], Budget] = default_budget) -> Budget:
    """The one budget of ``server`` in this process, made by ``factory`` the first time (later
    factories are ignored: the first caller decides)."""
    budget = _shared.get(server)
    if budget is None:
        with _shared_lock:
            budget = _shared.setdefault(server, factory())
    return budget


def reset_shared_budgets() -> None:
    """Forget every shared budget (for tests, and after a fork)."""
    with _shared_lock:
        _shared.clear()
