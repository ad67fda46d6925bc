"""Clocks: the monotonic clock every limit reads, and a fake one for tests.

A clock is any zero-argument callable returning seconds as a float that never goes backwards.
Limits take one as a parameter instead of reading a hard-wired wall clock, so tests can put
calls at exact instants and check exact ``retry_after`` values without sleeping.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TypeAlias

__all__ = ["Clock", "FakeClock", "monotonic"]

Clock: TypeAlias = Callable[[], float]
"""Seconds, monotonic (never backwards); the origin is arbitrary."""

monotonic: Clock = time.monotonic


class FakeClock:
    """A manual clock: ``clock()`` returns :attr:`now`, which moves only through
    :meth:`advance` (or by assigning :attr:`now` a later time).

    >>> clock = FakeClock()
    >>> clock.advance(1.5)
    >>> clock()
    1.5
    """

    __slots__ = ("__weakref__", "now")

    def __init__(self, start: float = 0.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the time forward by ``seconds`` (>= 0: a monotonic clock never goes back)."""
        if not seconds >= 0 or seconds == math.inf:
            raise ValueError(f"advance({seconds!r}): expected a finite number of seconds >= 0")
        self.now += seconds

    def __repr__(self) -> str:
        return f"FakeClock(now={self.now!r})"
