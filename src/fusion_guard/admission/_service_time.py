"""How long a slot is held, and when the next openings are expected (retry_after promises).

The guard measures every slot hold (handler time, whatever the outcome) and keeps a moving
average. With ``max_active`` slots all busy, one slot frees up every ``mean / max_active``
seconds on average (Little's law), which is the *drain step*. Two things are derived from it:

- the expected wait of a caller at queue position ``p``: ``p * step``, which drives predictive
  early shedding;
- ``retry_after`` for a refused caller. Each refusal is a small promise (wire contract section 6):
  the k-th refused caller is told when the k-th coming opening is expected, so callers who follow
  the advice come back spread out at the drain rate, not all at once into a second refusal. A
  *promise cursor* holds the time of the last opening promised; every refusal advances it by one
  step, and it never lags behind ``now + (queued + 1) * step`` (the queue ahead drains first).
"""

from __future__ import annotations

import math

__all__ = ["ServiceTimeEstimator", "RetryPromises"]

#: Weight of the newest sample in the moving average. Handler times are heavy-tailed
#: (log-normal), so a long memory (about 20 samples) keeps one slow call from swinging the mean.
EWMA_ALPHA = 0.05

#: retry_after is never below one millisecond (the wire contract needs it > 0).
MIN_RETRY_AFTER = 0.001


class ServiceTimeEstimator:
    """Exponentially weighted mean of slot hold times, starting from a prior.

    The first observation replaces the prior outright (the prior is a guess, not a sample); later
    ones move the mean by ``EWMA_ALPHA``. The guard updates ``mean`` and ``samples`` inline on its
    release path through :meth:`observe`.
    """

    __slots__ = ("mean", "samples")

    def __init__(self, prior: float) -> None:
        self.mean = prior
        self.samples = 0

    def observe(self, duration: float) -> None:
        if self.samples:
            self.mean += EWMA_ALPHA * (duration - self.mean)
        else:
            self.mean = duration
        self.samples += 1


class RetryPromises:
    """The promise cursor: successive refusals are told successive expected openings."""

    __slots__ = ("_cursor", "_max")

    def __init__(self, max_retry_after: float) -> None:
        self._cursor = -math.inf
        self._max = max_retry_after

    def promise(self, now: float, queued: int, step: float) -> float:
        """retry_after (seconds) for the caller refused at ``now`` with ``queued`` ahead.

        ``step`` is the drain step (mean hold time / slots). The result is at least one step
        (the next opening cannot be sooner than that), at most ``max_retry_after``.
        """
        cursor = self._cursor + step
        floor = now + (queued + 1) * step
        if cursor < floor:
            cursor = floor
        ceiling = now + self._max
        if cursor > ceiling:
            cursor = ceiling
        self._cursor = cursor
        wait = cursor - now
        return wait if wait > MIN_RETRY_AFTER else MIN_RETRY_AFTER
