"""GCRA state in this process: per key, the theoretical arrival time, and a promise cursor.

**Promises.** A refusal tells the caller when the budget next opens, and callers refused while
the budget is exhausted are told *successive* openings, one emission interval apart (see
``_base.py``): a key refused once holds a *promise cursor*, the time of the next opening not yet
promised. Only refusals read or move it; an admitted call never touches it, so the admit path is
what it was.

Bounded memory: a key whose TAT is in the past is back to a full budget, and a cursor in the
past promises nothing (every refusal's opening is later than ``now``), so either is the same as
an absent one and can be dropped. Two amortised O(1) clean-ups keep the tables small:

- once the clock passes the latest TAT or cursor handed out (the *horizon*), every key is back
  to full with nothing promised, and both tables are cleared in one step: a million keys used
  once, then idle, cost nothing once the next new key arrives;
- while new keys keep coming, the tables are swept (past entries dropped, the dicts rebuilt
  compact) whenever they have doubled since the previous sweep, so the sweep's O(n) is paid for
  by the n/2 insertions before it.

Only a new key grows a table, so only its insertion checks whether a clean-up is due: a
decision on a known key does no housekeeping at all.

Atomic under concurrency: a decision never awaits, so within one event loop no other task runs
between its check and its record. Not thread-safe: use it from the event loop's thread.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._clock import Clock, monotonic
from ._base import ALLOWED, GcraRequest, GcraResult

__all__ = ["MemoryBackend"]

# Float sums drift by a few ulps: a caller who comes back after exactly the retry_after it was
# given must pass, so a wait of up to a nanosecond counts as none.
_SLACK = 1e-9
_MIN_SWEEP = 1024


class MemoryBackend:
    """In-process GCRA state (the default backend). ``clock``: monotonic seconds, injectable."""

    __slots__ = ("_clock", "_cursors", "_horizon", "_sweep_at", "_tats")

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = monotonic if clock is None else clock
        self._tats: dict[str, float] = {}
        self._cursors: dict[str, float] = {}  # per refused key: the next opening not promised
        self._horizon = float("-inf")  # the latest TAT or cursor stored: past it, all is full
        self._sweep_at = _MIN_SWEEP

    @property
    def clock(self) -> Clock:
        return self._clock

    def __len__(self) -> int:
        """How many entries (TATs and promise cursors) are held now (entries in the past may
        linger until a clean-up)."""
        return len(self._tats) + len(self._cursors)

    def wait_one(self, key: str, emission_interval: float, tolerance: float) -> float:
        """Decide one limit: 0.0 when admitted (and recorded), else the seconds to wait."""
        now = self._clock()
        stored = self._tats.get(key)
        tat = now if stored is None or stored < now else stored
        opening = tat - tolerance
        if opening - now > _SLACK:
            return self._promise_one(key, opening, emission_interval, now)
        if stored is None:  # only a new key grows the table: clean up first when due
            self._clean_if_due(now)
        tat += emission_interval
        self._tats[key] = tat
        if tat > self._horizon:
            self._horizon = tat
        return 0.0

    def decide_now(self, requests: Sequence[GcraRequest]) -> GcraResult:
        """Decide a call against every request's limit, all or nothing."""
        now = self._clock()
        get = self._tats.get
        new_key = False
        for key, _, tolerance in requests:
            tat = get(key)
            if tat is None:  # a new key has a full budget
                new_key = True
            # A key behind the clock waits less than nothing: no need to clamp it to now here.
            elif tat - tolerance - now > _SLACK:
                return self._refusal(requests, now)
        if new_key:  # only a new key grows the table: clean up first when due
            self._clean_if_due(now)
        tats = self._tats
        horizon = self._horizon
        for key, emission_interval, _ in requests:
            tat = tats.get(key, now)
            tat = (now if tat < now else tat) + emission_interval
            tats[key] = tat
            if tat > horizon:
                horizon = tat
        self._horizon = horizon
        return ALLOWED

    def _promise_one(self, key: str, opening: float, emission_interval: float, now: float) -> float:
        """Promise ``opening`` (the budget's next one) or, when it is promised already, the next
        one not yet promised; record the cursor past it. The seconds until it; spends no budget.

        A cursor behind ``opening`` has lapsed (its callers never came back, or time moved on:
        every opening up to the budget's own is free again) and counts for nothing."""
        cursor = self._cursors.get(key)
        if cursor is None:  # only a new key grows the table: clean up first when due
            self._clean_if_due(now)
        elif cursor > opening:  # the budget's next opening is promised already
            opening = cursor
        cursor = self._cursors[key] = opening + emission_interval
        if cursor > self._horizon:
            self._horizon = cursor
        return opening - now

    def _refusal(self, requests: Sequence[GcraRequest], now: float) -> GcraResult:
        """Promise the latest opening among the refusing limits; spends no budget.

        The caller is told to come back at that opening, when it takes one opening of every
        limit at once: each refusing limit's cursor moves one interval past it. For the limit
        that decided the time this is its next opening; for the others it is conservative (the
        openings they have before it stay unpromised, free for other callers), because a caller
        who comes back later than its own limit's opening may find that opening lost to the
        burst cap.
        """
        get, cursor_of = self._tats.get, self._cursors.get
        latest, refused = now, -1
        refusing: list[tuple[str, float]] = []
        for index, (key, emission_interval, tolerance) in enumerate(requests):
            opening = get(key, now) - tolerance
            if opening - now > _SLACK:
                refusing.append((key, emission_interval))
                cursor = cursor_of(key, opening)
                if cursor > opening:  # the next opening is promised already
                    opening = cursor
                if opening > latest:
                    latest, refused = opening, index
        for key, emission_interval in refusing:
            self._promise_one(key, latest, emission_interval, now)
        return GcraResult(False, latest - now, refused)

    async def decide(self, requests: Sequence[GcraRequest]) -> GcraResult:
        """:meth:`decide_now`; nothing is awaited, so the decision stays atomic."""
        return self.decide_now(requests)

    def _clean_if_due(self, now: float) -> None:
        if now >= self._horizon:
            self._tats.clear()
            self._cursors.clear()
        elif len(self._tats) + len(self._cursors) >= self._sweep_at:
            self._tats = {key: tat for key, tat in self._tats.items() if tat > now}
            self._cursors = {key: at for key, at in self._cursors.items() if at > now}
        else:
            return
        self._sweep_at = max(_MIN_SWEEP, 2 * (len(self._tats) + len(self._cursors)))

    def __repr__(self) -> str:
        return f"MemoryBackend(keys={len(self._tats)}, promised={len(self._cursors)})"
