"""Concurrency limits: what *decides* how many calls of a tool may run at once.

A limit is separate from the limiter that enforces it (Netflix concurrency-limits' shape): the
limiter holds the slots, the waiters and the hand-off; the limit only answers "how many slots now?"
and learns from one sample per finished call. A limit does no I/O, reads no clock of its own and
holds no lock: every sample carries its own timestamps, so a limit is tested with a ``FakeClock``
(or plain numbers) alone.

The limiter feeds a sample when a call that held a slot ends, then reads :attr:`Limit.limit`; a
limit changes only inside :meth:`Limit.on_sample`, so the limiter always knows the limit in force.
"""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

from .._checks import check_int

__all__ = ["FixedLimit", "Limit", "OvertakingLimit"]


@runtime_checkable
class Limit(Protocol):
    """Decides the number of slots from the calls that finished.

    Implementations keep ``min_limit <= limit <= max_limit`` (for a fixed limit the three are the
    same) and never return NaN or a number below 1. A limit that runs above what the tool serves
    in parallel (to find it) may also have a ``parallelism`` attribute, its estimate of that
    number: the guard then holds a standing queue to a few calls per such call, not per slot.
    A limit whose class sets ``learns_overtaking = True`` is also told, with each sample, how
    many calls admitted before it the call overtook (see :class:`OvertakingLimit`).
    """

    @property
    def limit(self) -> int:
        """The number of calls that may run at once now."""
        ...

    def on_sample(self, start: float, duration: float, inflight: int, dropped: bool) -> bool | None:
        """Learn from one finished call.

        Returns nothing, or False to say that neither ``limit`` nor ``parallelism`` moved: the
        limiter then reads neither until a sample says otherwise (under an adaptive limit every
        call is a sample, and most move nothing).

        Args:
            start: when the call took its slot (seconds on the limiter's monotonic clock).
            duration: how long it held the slot, in seconds.
            inflight: calls holding a slot when it took its own, itself included.
            dropped: it ended by its handler deadline (TIMEOUT): a sign of overload, whatever
                the duration says. The guard does not feed a timeout that its other clients'
                calls show to be the caller's own, nor a call whose arguments failed
                validation (``_feedback.py``).
        """
        ...


class OvertakingLimit(Limit, Protocol):
    """A limit that also learns, with each sample, how many calls the call *overtook*: calls
    that took their slot before it and still held it when it ended. A tool that serves its
    calls one at a time, in the order they reach it, never lets a call overtake; one that is
    seen overtaking ``k`` serves at least ``k + 1`` at once (or answers some calls without
    waiting for the others, a cache hit say), whatever the latencies say. The limiter counts it
    with two counters, so no sample costs a search of the calls in flight."""

    learns_overtaking: ClassVar[bool]
    """True: the limiter passes ``overtook``."""

    def on_sample(
        self,
        start: float,
        duration: float,
        inflight: int,
        dropped: bool,
        *,
        overtook: int = 0,
    ) -> bool | None:
        """:meth:`Limit.on_sample`, and ``overtook``: how many calls that took their slot before
        this one still held it when this one ended, as far as the limiter can be sure: the calls
        before it less every call ended so far (when calls after it have ended too, the count
        reads low, never high). Returns as :meth:`Limit.on_sample` does."""
        ...


class FixedLimit:
    """A limit that never moves: ``FixedLimit(10)`` is ``max_active=10``."""

    __slots__ = ("_limit",)

    def __init__(self, limit: int) -> None:
        self._limit = check_int("limit", limit, 1)

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def min_limit(self) -> int:
        return self._limit

    @property
    def max_limit(self) -> int:
        return self._limit

    def on_sample(self, start: float, duration: float, inflight: int, dropped: bool) -> None:
        """A fixed limit learns nothing."""

    def __repr__(self) -> str:
        return f"FixedLimit({self._limit})"
