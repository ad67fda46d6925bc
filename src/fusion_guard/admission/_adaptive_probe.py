"""The warm-up and the probes of an adaptive limit (``GradientLimit``): when it has quiet calls
enough for a baseline, and when it must make room for some.

A new limit holds its initial value and takes its first baseline from the first
``FIRST_SAMPLES`` quiet calls as they come, or ``FIRST_PROBE_SAMPLES`` if those lie within
``LEVEL_SPREAD`` of one another (a steady tool's median is told by 15 calls as well as by 30,
and a fresh guard crowded from the start took a second to gather 30 at 3 slots in force); a
slow tool's once they amount to ``FIRST_SAMPLES x window`` seconds of service
(``SLOW_WINDOW_SAMPLES`` calls at the least). If ``FIRST_PROBE_CALLS``
crowded calls come first, it makes room for quiet ones (a probe). A probe holds the limit at
the quiet bound until ``probe_samples`` quiet calls have finished; the first one until
``FIRST_PROBE_SAMPLES`` have (those of the warm-up count), and it holds the parallelism first,
if higher, dropping to the bound only after ``PROBE_GRACE_CALLS`` crowded calls admitted under
it.

Until the first baseline, calls that started with more in flight than the quiet bound count as
quiet too once their latency shows the tool queued none of them (``observe``: the median of
``LEVEL_SAMPLES`` calls at one count within ``DEAD_BAND`` of the calls that came alone): a pool
that serves calls in order is never seen overtaking, and its quiet bound stays one slot.

The probe counts and answers; the limit sets its own slots from the answers (``begin``,
``step``).
"""

from __future__ import annotations

import math
from bisect import insort
from collections import deque
from typing import Literal

from ._adaptive_tuning import (
    DEAD_BAND,
    FIRST_PROBE_CALLS,
    FIRST_PROBE_SAMPLES,
    FIRST_SAMPLES,
    LEVEL_REFERENCE,
    LEVEL_SAMPLES,
    LEVEL_SPREAD,
    PROBE_GRACE_CALLS,
    SLOW_WINDOW_SAMPLES,
)
from ._latency_estimates import median_of_sorted

__all__ = ["Probe", "ProbeStep"]

#: What a sample of the warm-up or of a probe asks of the limit: nothing more (``hold``), the
#: baseline is measured and the probe is over (``done``), the first probe's room moved (its
#: grace is over, or the calls in flight shown uncrowded changed): hold ``room`` (``room``), or
#: crowded calls came first: begin the first probe (``start``).
ProbeStep = Literal["hold", "done", "room", "start"]


class Probe:
    """Whether the limit is measured (has a baseline) and probing, the quiet calls counted
    towards a baseline, the warm-up's crowded ones, and the first probe's grace. ``measured``,
    ``probing``, ``active`` (either probing or not measured: ``step`` is due) and ``level``
    (until measured, the calls in flight shown uncrowded: ``observe``) are read, not written."""

    __slots__ = (
        "_alone",
        "_crowded",
        "_crowded_unmeasured",
        "_first",
        "_grace",
        "_grace_slots",
        "_held",
        "_levels",
        "_moved",
        "_taken",
        "active",
        "level",
        "measured",
        "probing",
    )

    def __init__(self) -> None:
        self.measured = False  # no baseline yet: the first one is taken from calls as they come
        self.probing = False
        self.active = True
        self._taken = 0
        self._crowded_unmeasured = 0
        # The warm-up's quiet calls, (start, duration): a slow tool's first baseline
        # (``_settled``).
        self._first: list[tuple[float, float]] = []
        # The first probe's grace (``grace``): when it began (infinite: none pending), and the
        # crowded calls admitted since.
        self._grace = math.inf
        self._crowded = 0
        # The first probe's room (``room``): the limit it began at, the slots of its grace while
        # pending (0: none), and whether the calls in flight shown uncrowded moved since.
        self._held = 0
        self._grace_slots = 0
        self._moved = False
        # ``observe``: the durations of the warm-up's calls at the quiet bound (sorted), and of
        # the last crowded ones at each count in flight.
        self._alone: list[float] = []
        self._levels: dict[int, deque[float]] = {}
        self.level = 0

    def observe(self, inflight: int, duration: float, calm: bool) -> bool:
        """Whether a call of the warm-up or of the first probe, started with ``inflight`` in
        flight, is quiet: ``calm`` (at the quiet bound), or at no more than a count whose calls
        the tool was shown to queue none of (``level``, ``_prove``). Asked only until
        measured."""
        if calm:
            if len(self._alone) < FIRST_SAMPLES:
                insort(self._alone, duration)
                self._prove()
            return True
        levels = self._levels
        last = levels.get(inflight)
        if last is None:
            last = levels[inflight] = deque(maxlen=LEVEL_SAMPLES)
        last.append(duration)
        if len(last) == LEVEL_SAMPLES:
            self._prove()
        return inflight <= self.level

    def _prove(self) -> None:
        """``level``: the most calls in flight whose last ``LEVEL_SAMPLES``, and those of every
        count below with as many, have their median within ``DEAD_BAND`` of the calls at the
        quiet bound (``LEVEL_REFERENCE`` of them at least), and lie within ``LEVEL_SPREAD`` of
        one another (a few calls of a heavy-tailed tool tell no median). A count whose last
        calls are slower takes the level below it again (a tool that lost a worker
        meanwhile)."""
        alone = self._alone
        if len(alone) < LEVEL_REFERENCE:
            return
        bar = DEAD_BAND * median_of_sorted(alone)
        level = 0
        for count in sorted(self._levels):
            calls = self._levels[count]
            if len(calls) == LEVEL_SAMPLES:
                ordered = sorted(calls)
                if median_of_sorted(ordered) > bar or ordered[-1] > LEVEL_SPREAD * ordered[0]:
                    break
                level = count
        if level != self.level:
            self._moved = self.probing
        self.level = level

    def begin(self, now: float, held: int, bound: int, parallelism: float) -> int:
        """A probe begins at ``now``, the limit at ``held`` slots: the slots to hold, the quiet
        ``bound``, or for the first probe the ``parallelism`` (whole) if higher (a burst may be
        ending), until ``PROBE_GRACE_CALLS`` crowded calls more. A later probe counts its quiet
        calls from none."""
        self.probing = self.active = True
        if self.measured:
            self._taken = 0
        if not self.measured:  # counts shown uncrowded are room enough
            bound = max(bound, min(held, self.level))
        self._held = held
        self._moved = False
        graced = min(held, math.floor(parallelism))
        if not self.measured and graced > bound:
            self._grace = now
            self._crowded = 0
            self._grace_slots = graced
            return graced
        return bound

    def room(self, bound: int) -> int:
        """The slots the first probe holds once its room moved (``step`` said ``room``): the
        quiet ``bound``, its grace's slots while pending, or the calls in flight shown
        uncrowded (within the limit it began at), the most of them."""
        return max(bound, self._grace_slots, min(self._held, self.level))

    def step(
        self,
        start: float,
        duration: float,
        calm: bool,
        needed: int,
        baseline: float,
        window: float,
    ) -> ProbeStep:
        """One finished call of the warm-up or of a probe (while ``active``): ``calm`` if quiet;
        ``needed``: the quiet calls a later probe waits for; ``baseline`` as now measured,
        ``window`` the limit's."""
        measured = self.measured
        if calm:
            self._taken += 1
            if not measured:
                self._first.append((start, duration))
        elif not measured:
            self._crowded_unmeasured += 1
        taken = self._taken
        # The first baseline's quiet calls: fewer if the first probe holds slots for them, or
        # if those come steady (``_steady``).
        first = FIRST_PROBE_SAMPLES if self.probing or self._steady() else FIRST_SAMPLES
        if taken >= (needed if measured else first) or (
            not measured
            and taken >= SLOW_WINDOW_SAMPLES
            and taken * baseline >= first * window
            and self._settled(start + duration, first * window)
        ):
            self._first.clear()
            self._alone.clear()
            self._levels.clear()
            self.level = 0
            self._grace = math.inf
            self._grace_slots = 0
            self._moved = False
            self.probing = self.active = False
            self.measured = True
            return "done"
        if not calm and start >= self._grace:  # admitted under the probe's grace
            self._crowded += 1
            if self._crowded >= PROBE_GRACE_CALLS:  # a standing load: make room
                self._grace = math.inf
                self._grace_slots = 0
                return "room"
        if self._moved:  # the calls in flight shown uncrowded moved: room for them, or not
            self._moved = False
            return "room"
        if not self.probing and self._crowded_unmeasured >= FIRST_PROBE_CALLS:
            return "start"  # the quiet calls counted so far still count
        return "hold"

    def _steady(self) -> bool:
        """Whether the warm-up's quiet calls so far, FIRST_PROBE_SAMPLES at least, lie within
        LEVEL_SPREAD of one another: a steady tool's median is told by them within a few per
        cent, as well as by FIRST_SAMPLES (see the module)."""
        first = self._first
        if len(first) < FIRST_PROBE_SAMPLES:
            return False
        durations = [duration for _, duration in first]
        shortest = min(durations)  # (calls of no measurable time tell no spread)
        return shortest > 0.0 and max(durations) <= LEVEL_SPREAD * shortest

    def _settled(self, now: float, service: float) -> bool:
        """Whether a slow tool's warm-up has quiet calls enough for a first baseline (``service``
        seconds of it, at their median), counting only those started before ``now`` less the
        longest one seen: the calls that finish first are the short ones, and a baseline read
        low scales every window and estimate of parallelism by as much."""
        first = self._first
        horizon = now - max(duration for _, duration in first)
        settled = sorted(duration for start, duration in first if start <= horizon)
        return (
            len(settled) >= SLOW_WINDOW_SAMPLES
            and len(settled) * median_of_sorted(settled) >= service
        )
