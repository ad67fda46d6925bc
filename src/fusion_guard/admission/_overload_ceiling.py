"""The ceiling that overload errors set on an adaptive limit (``GradientLimit.on_overload``).

An overload error that started with ``n`` calls in flight says the tool serves fewer than ``n``:
the limit goes to ``n - 1`` at most and does not grow past that *ceiling* for
``CEILING_SECONDS`` (or ``CEILING_BASELINES`` uncrowded latencies, if longer); a ceiling
confirmed again by the first try above it, soon after it lapsed, is held twice as long the next
time (up to ``CEILING_MAX_SECONDS``). The ceiling also keeps the estimate the limit had before a
run of overload errors, to go back to once a call is served after calls that failed alone.

It holds no limit of its own: the limit asks it and sets its estimate from the answers.
"""

from __future__ import annotations

import math

from ._adaptive_tuning import CEILING_BASELINES, CEILING_MAX_SECONDS, CEILING_SECONDS

__all__ = ["OverloadCeiling"]


class OverloadCeiling:
    """The ceiling the last overload error set, until when it holds, and how long the next one
    holds; and the estimate to go back to after a run of overload errors (NaN: none)."""

    __slots__ = ("_hold", "_restore", "_until", "_value")

    def __init__(self, max_limit: int) -> None:
        self._value = max_limit
        self._until = -math.inf
        self._hold = CEILING_SECONDS
        self._restore = math.nan

    @property
    def hold(self) -> float:
        """How long (seconds) the ceiling in force, or the last one, holds."""
        return self._hold

    def lower(self, end: float, ceiling: int, estimate: float, baseline: float) -> int:
        """An overload error ended at ``end`` with ``ceiling + 1`` calls in flight, while the
        limit's estimate was ``estimate``: the ceiling now in force (the lower of this one and
        one still holding)."""
        if self._restore != self._restore:  # NaN: the first of a run of overload errors
            self._restore = estimate
        hold = self._hold
        if end >= self._until:  # none in force: a new one
            if end < self._until + hold and ceiling >= self._value:
                hold = min(2.0 * hold, CEILING_MAX_SECONDS)  # the same size, confirmed again
            else:
                hold = max(CEILING_SECONDS, CEILING_BASELINES * baseline)  # NaN: the first
            self._hold = hold
            self._value = ceiling
        elif ceiling < self._value:
            self._value = ceiling
        self._until = end + hold
        return self._value

    def lift(self, max_limit: int) -> float:
        """A call served after calls failed alone: no ceiling any more. Returns the estimate to
        go back to (NaN: none)."""
        restore = self._restore
        self._restore = math.nan
        self._value = max_limit
        self._until = -math.inf
        return restore

    def served(self) -> None:
        """A window of calls served: the estimate before the overload errors is history now."""
        self._restore = math.nan

    def allows(self, grown: float, end: float, max_limit: int) -> bool:
        """Whether the limit may grow to ``grown`` at ``end``: not past a ceiling in force. A
        slot past a lapsed ceiling that served a window forgets it."""
        if grown > self._value:
            if end < self._until:
                return False
            if grown > self._value + 1:
                self._value = max_limit
                self._hold = CEILING_SECONDS
        return True
