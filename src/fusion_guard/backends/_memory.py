"""GCRA state in this process: per key, the theoretical arrival time, and a promise cursor.

**Promises.** A refusal tells the caller when the budget next opens, and callers refused while
the budget is exhausted are told *successive* openings, one emission interval apart (see
``_base.py``): a key refused once holds a *promise cursor*, the time of the next opening not yet
promised. Only refusals move it. A known caller (``caller``: its client key) holds one
promise per decision until its time, kept under a hash of the caller and the keys
(never the keys themselves): it is told that promise again instead of taking a new one, and is
refused with it while it comes back early, even when the budget has room (the openings before
it are promised to others). Anonymous refusals take a promise each, but never one more than
``burst`` openings past the budget's own next opening or the last opening promised to a known
caller, whichever is later (the *anonymous bound*, ``_base.py``). An anonymous call on the admit
path costs what it did; a known caller's costs one comparison while no promise is outstanding.

Bounded memory: a key whose TAT is in the past is back to a full budget, and a cursor or promise
in the past promises nothing (every refusal's opening is later than ``now``), so either is the
same as an absent one and can be dropped. Two amortised O(1) clean-ups keep the tables small:

- once the clock passes the latest TAT or cursor handed out (the *horizon*), every key is back
  to full with nothing promised, and every table is cleared in one step: a million keys used
  once, then idle, cost nothing once the next new key arrives;
- while new keys keep coming, the tables are swept (past entries dropped, the dicts rebuilt
  compact) whenever they have doubled since the previous sweep, so the sweep's O(n) is paid for
  by the n/2 insertions before it. The known callers' promises are swept the same way as they
  grow, and are capped (``MAX_CALLERS``): past it, a caller is treated as anonymous.

Only a new key or a refusal grows a table, so only they check whether a clean-up is due: an
admission on a known key does no housekeeping at all.

Atomic under concurrency: a decision never awaits, so within one event loop no other task runs
between its check and its record. Not thread-safe: use it from the event loop's thread.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._clock import Clock, monotonic
from ._base import ALLOWED, GcraRequest, GcraResult

__all__ = ["MAX_CALLERS", "MemoryBackend"]

# Float sums drift by a few ulps: a caller who comes back after exactly the retry_after it was
# given must pass, so a wait of up to a nanosecond counts as none.
_SLACK = 1e-9
_MIN_SWEEP = 1024
MAX_CALLERS = 65_536
"""Known callers' promises kept at most (about 100 bytes each); past it, anonymous advice."""


class MemoryBackend:
    """In-process GCRA state (the default backend). ``clock``: monotonic seconds, injectable."""

    __slots__ = ("_callers", "_callers_sweep_at", "_clock", "_cursors", "_frontiers",
                 "_horizon", "_known_until", "_sweep_at", "_tats")  # fmt: skip

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = monotonic if clock is None else clock
        self._tats: dict[str, float] = {}
        self._cursors: dict[str, float] = {}  # per refused key: the next opening not promised
        # Per key: one interval past the last opening promised to a known caller.
        self._frontiers: dict[str, float] = {}
        # Per known caller and decision (a hash of both): (the opening promised, its limit).
        self._callers: dict[int, tuple[float, int]] = {}
        self._known_until = float("-inf")  # the latest opening promised to a known caller
        self._horizon = float("-inf")  # the latest TAT or cursor stored: past it, all is full
        self._sweep_at = _MIN_SWEEP
        self._callers_sweep_at = _MIN_SWEEP

    @property
    def clock(self) -> Clock:
        return self._clock

    def __len__(self) -> int:
        """How many entries (TATs, promise cursors, known callers' promises) are held now
        (entries in the past may linger until a clean-up)."""
        return len(self._tats) + len(self._cursors) + len(self._frontiers) + len(self._callers)

    def wait_one(
        self, key: str, emission_interval: float, tolerance: float, caller: str | None = None
    ) -> float:
        """Decide one limit: 0.0 when admitted (and recorded), else the seconds to wait.
        ``caller``: who is asking, when known (one promise per caller)."""
        now = self._clock()
        if caller is not None and now < self._known_until:
            held = self._callers.get(hash((caller, key)))
            if held is not None and held[0] - now > _SLACK:  # back before its promise
                return held[0] - now
        stored = self._tats.get(key)
        tat = now if stored is None or stored < now else stored
        opening = tat - tolerance
        if opening - now > _SLACK:
            return self._promise_one(key, opening, emission_interval, tolerance, now, caller)
        if stored is None:  # only a new key grows the table: clean up first when due
            self._clean_if_due(now)
        tat += emission_interval
        self._tats[key] = tat
        if tat > self._horizon:
            self._horizon = tat
        return 0.0

    def decide_now(self, requests: Sequence[GcraRequest], caller: str | None = None) -> GcraResult:
        """Decide a call against every request's limit, all or nothing. ``caller``: who is
        asking, when known (one promise per caller)."""
        now = self._clock()
        if caller is not None and now < self._known_until:
            held = self._callers.get(hash((caller, *[key for key, _, _ in requests])))
            if held is not None and held[0] - now > _SLACK:  # back before its promise
                return GcraResult(False, held[0] - now, held[1])
        get = self._tats.get
        new_key = False
        for key, _, tolerance in requests:
            tat = get(key)
            if tat is None:  # a new key has a full budget
                new_key = True
            # A key behind the clock waits less than nothing: no need to clamp it to now here.
            elif tat - tolerance - now > _SLACK:
                return self._refusal(requests, now, caller)
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

    def _promise_one(
        self,
        key: str,
        budget: float,
        interval: float,
        tolerance: float,
        now: float,
        caller: str | None,
    ) -> float:
        """:meth:`_refusal` for one limit (the common case), without the request list: the
        seconds until the opening promised."""
        ident = None if caller is None else self._room_for(hash((caller, key)), now)
        if len(self._cursors) + len(self._frontiers) >= self._sweep_at:
            self._clean_if_due(now)  # refusals grow the cursors: clean up first when due
        opening = self._offer(key, budget, interval, tolerance, ident is None)
        self._take(key, opening, interval, ident is not None)
        if ident is not None:
            self._keep(ident, opening, 0)
        return opening - now

    def _refusal(
        self, requests: Sequence[GcraRequest], now: float, caller: str | None
    ) -> GcraResult:
        """Promise the latest opening among the refusing limits; spends no budget.

        Each refusing limit offers its next opening not yet promised (:meth:`_offer`). The
        caller is told to come back at the latest of these, when it takes one opening of every
        limit at once: each refusing limit's cursor moves one interval past it. For the limit
        that decided the time this is its next opening; for the others it is conservative (the
        openings they have before it stay unpromised, free for other callers), because a caller
        who comes back later than its own limit's opening may find that opening lost to the
        burst cap. A known caller's promise is kept (it is told it again until its time).
        """
        ident = None
        if caller is not None:
            ident = self._room_for(hash((caller, *[key for key, _, _ in requests])), now)
        if len(self._cursors) + len(self._frontiers) >= self._sweep_at:
            self._clean_if_due(now)  # refusals grow the cursors: clean up first when due
        get = self._tats.get
        latest, refused = now, -1
        refusing: list[tuple[str, float]] = []
        for index, (key, interval, tolerance) in enumerate(requests):
            budget = get(key, now) - tolerance
            if budget - now > _SLACK:
                refusing.append((key, interval))
                opening = self._offer(key, budget, interval, tolerance, ident is None)
                if opening > latest:
                    latest, refused = opening, index
        for key, interval in refusing:
            self._take(key, latest, interval, ident is not None)
        if ident is not None:
            self._keep(ident, latest, refused)
        return GcraResult(False, latest - now, refused)

    def _offer(
        self, key: str, budget: float, interval: float, tolerance: float, anonymous: bool
    ) -> float:
        """The opening a refusing limit can promise: its next one not yet promised (a cursor
        behind the budget's own next opening, ``budget``, has lapsed: its callers never came
        back, or time moved on); for an anonymous caller at most ``burst`` openings past the
        later of ``budget`` and the known callers' frontier (the anonymous bound)."""
        opening = self._cursors.get(key, budget)
        if opening < budget:
            opening = budget
        if anonymous:
            frontier = self._frontiers.get(key, budget)
            bound = (frontier if frontier > budget else budget) + tolerance + interval
            if opening > bound:
                opening = bound
        return opening

    def _take(self, key: str, opening: float, interval: float, known: bool) -> None:
        """Move the key's cursor one interval past the promised ``opening`` (never back), and
        its frontier with it for a known caller."""
        after = opening + interval
        cursor = self._cursors.get(key)
        if cursor is None or after > cursor:
            self._cursors[key] = after
            if after > self._horizon:
                self._horizon = after
        if known:
            frontier = self._frontiers.get(key)
            if frontier is None or after > frontier:
                self._frontiers[key] = after

    def _keep(self, ident: int, opening: float, refused: int) -> None:
        """Keep a known caller's promise until its time."""
        self._callers[ident] = (opening, refused)
        if opening > self._known_until:
            self._known_until = opening

    def _room_for(self, ident: int, now: float) -> int | None:
        """``ident`` (the hash a known caller's promise is kept under), or None when the table
        is full of live promises (the caller is then advised as an anonymous one)."""
        callers = self._callers
        if len(callers) >= self._callers_sweep_at:
            callers = self._callers = {i: p for i, p in callers.items() if p[0] > now}
            self._callers_sweep_at = max(_MIN_SWEEP, 2 * len(callers))
        return None if len(callers) >= MAX_CALLERS else ident

    async def decide(
        self, requests: Sequence[GcraRequest], caller: str | None = None
    ) -> GcraResult:
        """:meth:`decide_now`; nothing is awaited, so the decision stays atomic."""
        return self.decide_now(requests, caller)

    def _clean_if_due(self, now: float) -> None:
        if now >= self._horizon:
            self._tats.clear()
            self._cursors.clear()
            self._frontiers.clear()
            self._callers.clear()
        elif self._entries() >= self._sweep_at:
            self._tats = {key: tat for key, tat in self._tats.items() if tat > now}
            self._cursors = {key: at for key, at in self._cursors.items() if at > now}
            self._frontiers = {key: at for key, at in self._frontiers.items() if at > now}
        else:
            return
        self._sweep_at = max(_MIN_SWEEP, 2 * self._entries())

    def _entries(self) -> int:
        """The entries the main clean-up counts (the known callers' are swept apart)."""
        return len(self._tats) + len(self._cursors) + len(self._frontiers)

    def __repr__(self) -> str:
        return (
            f"MemoryBackend(keys={len(self._tats)}, promised={len(self._cursors)},"
            f" callers={len(self._callers)})"
        )
