"""The ceiling that overload errors set on an adaptive limit (``GradientLimit.on_overload``).

An overload error that started with ``n`` calls in flight says the tool serves fewer than ``n``:
the limit goes to ``n - 1`` at most and does not grow past that *ceiling* for
``CEILING_SECONDS`` (or ``CEILING_BASELINES`` uncrowded latencies, if longer); a ceiling
confirmed again by the first try above it, soon after it lapsed, is held twice as long the next
time (up to ``CEILING_MAX_SECONDS``). A call that failed alone (``n = 1``) tells no capacity
(the tool is down, say): it sets no ceiling, and marks the tool ``down``. The ceiling also keeps
the estimate the limit had before a run of overload errors, to go back to once a call is served
after calls that failed alone.

It holds no limit of its own: the limit asks it and sets its estimate from the answers.
"""

from __future__ import annotations

import math

from ._adaptive_tuning import CEILING_BASELINES, CEILING_MAX_SECONDS, CEILING_SECONDS

__all__ = ["OverloadCeiling"]


class OverloadCeiling:
    """The ceiling the last overload error set, until when it holds, and how long the next one
    holds; and the estimate to go back to after a run of overload errors (NaN: none). ``down``
    (read, not written): the last overload error failed alone."""

    __slots__ = ("_hold", "_restore", "_until", "_value", "down")

    def __init__(self, max_limit: int) -> None:
        self._value = max_limit
        self._until = -math.inf
        self._hold = CEILING_SECONDS
        self._restore = math.nan
        self.down = False

    @property
    def hold(self) -> float:
        """How long (seconds) the ceiling in force, or the last one, holds."""
        return self._hold

    def lower(self, end: float, inflight: int, estimate: float, baseline: float) -> float:
        """An overload error ended at ``end`` with ``inflight`` calls in flight, itself included,
        while the limit's estimate was ``estimate``: the ceiling now in force (the lower of
        ``inflight - 1`` and one still holding). Infinite for a call that failed alone: no
        capacity to learn, and no cut below one call."""
        if inflight <= 1:
            self.down = True
            return math.inf
        ceiling = int(inflight) - 1
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
        return float(self._value)

    def lift(self, max_limit: int, estimate: float) -> float:
        """A call served after calls failed alone (``down``): the tool is up, no ceiling any
        more. Returns the estimate held before the overload errors, to go back to if above
        ``estimate`` (NaN: none, or not above)."""
        restore = self._restore
        self.down = False
        self._restore = math.nan
        self._value = max_limit
        self._until = -math.inf
        return restore if restore > estimate else math.nan  # (NaN > estimate: False)

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
