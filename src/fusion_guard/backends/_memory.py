"""GCRA state in this process: one float (the theoretical arrival time) per key.

Bounded memory: a key whose TAT is in the past is back to a full budget, so it is the same as an
absent key and can be dropped. Two amortised O(1) clean-ups keep the table small:

- once the clock passes the latest TAT handed out (the *horizon*), every key is back to full and
  the whole table is cleared in one step: a million keys used once, then idle, cost nothing once
  the next new key arrives;
- while new keys keep coming, the table is swept (expired keys dropped, the dict rebuilt
  compact) whenever it has doubled since the previous sweep, so the sweep's O(n) is paid for by
  the n/2 insertions before it.

Only a new key grows the table, so only its insertion checks whether a clean-up is due: a
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

    __slots__ = ("_clock", "_horizon", "_sweep_at", "_tats")

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = monotonic if clock is None else clock
        self._tats: dict[str, float] = {}
        self._horizon = float("-inf")  # the latest TAT stored: past it, every key is full
        self._sweep_at = _MIN_SWEEP

    @property
    def clock(self) -> Clock:
        return self._clock

    def __len__(self) -> int:
        """How many keys hold state now (keys back to full may linger until a clean-up)."""
        return len(self._tats)

    def wait_one(self, key: str, emission_interval: float, tolerance: float) -> float:
        """Decide one limit: 0.0 when admitted (and recorded), else the seconds to wait."""
        now = self._clock()
        stored = self._tats.get(key)
        tat = now if stored is None or stored < now else stored
        wait = tat - tolerance - now
        if wait > _SLACK:
            return wait
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

    def _refusal(self, requests: Sequence[GcraRequest], now: float) -> GcraResult:
        """The longest wait among the refusing limits, and which one it is; records nothing."""
        waits = [max(self._tats.get(key, now), now) - tau - now for key, _, tau in requests]
        longest = max(waits)
        return GcraResult(False, longest, waits.index(longest))

    async def decide(self, requests: Sequence[GcraRequest]) -> GcraResult:
        """:meth:`decide_now`; nothing is awaited, so the decision stays atomic."""
        return self.decide_now(requests)

    def _clean_if_due(self, now: float) -> None:
        if now >= self._horizon:
            self._tats.clear()
        elif len(self._tats) >= self._sweep_at:
            self._tats = {key: tat for key, tat in self._tats.items() if tat > now}
        else:
            return
        self._sweep_at = max(_MIN_SWEEP, 2 * len(self._tats))

    def __repr__(self) -> str:
        return f"MemoryBackend(keys={len(self._tats)})"
