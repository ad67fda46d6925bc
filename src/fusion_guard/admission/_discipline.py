"""The queue discipline: who is refused at arrival, who is judged late, who is served next.

A :class:`QueueDiscipline` *decides*; the :class:`~fusion_guard.ConcurrencyGuard` that owns it
*enforces* (slots, waiters, hand-off). It holds the queue's shape over time (when it last was
empty, how many hand-offs since, the arrival rates) and its settings, and is given the live
figures it judges by: the calls queued, the slots in force, the hold-time estimate and the start
of the youngest call in flight. What it decides (see the guard's module for the why):

- **FIFO, or adaptive LIFO**: with ``lifo``, the newest waiter is served first while the queue
  is standing (``serves_newest``).
- **Standing-queue limit**: under sustained overload (standing *and* arrivals outrunning the
  slots) a queue is held to ``standing_limit`` waiters (``holds_standing``): 4 per slot, or,
  under a limit that runs above what the tool serves in parallel, as many as keep the calls
  in the guard *and* the tool to 5 per call served in parallel, and no more than keep the
  slots busy when calls arrive far faster than they open (``on_limit``, ``keeping_busy``).
- **Slots under sustained overload**: an adaptive limit runs above the calls the tool serves in
  parallel, to find more; while overload lasts, the slots in force are held to that parallelism
  and ``OVERLOAD_HEADROOM`` more (``slots_in_force``).
- **Predictive shedding**: a newcomer whose expected start is past its ``queue_timeout`` is
  refused at arrival (``would_time_out``); waiters are re-judged from the tail as they wait
  (``is_late``, and ``judge_delay`` for when the tail would become late).
"""

from __future__ import annotations

import math
from statistics import NormalDist

from ._overload import LOOK_EVERY, OverloadDetector
from ._service_time import (
    EVIDENCE_SPREADS,
    SPREAD_SAMPLES,
    ServiceTimeEstimator,
    expected_wait,
)

__all__ = ["LOOK_EVERY", "QueueDiscipline", "whole_calls"]

#: A queue not empty for this long (seconds) is standing, unless queue_timeout / 4 is shorter.
STANDING_AFTER = 0.1
#: A standing queue is held to this many waiters per slot (unless standing_limit is given).
STANDING_SLOTS_FACTOR = 4
#: The soonest a queued waiter wakes to judge the queue again (seconds): a floor against rounding.
MIN_JUDGE_DELAY = 0.001
#: A start expected within this many drain steps (mean hold / slots) of a waiter's deadline
#: counts as a miss.
LATE_MARGIN_STEPS = 0.5
#: A call is shed early only when it would miss its ``queue_timeout`` with at least this
#: probability, on the spread of the holds measured (``typical_share``). Judged again and again
#: as it waits, a call shed at the first look past the bar would have been served in time with
#: the probability left, ``1 - MISS_PROBABILITY``: at 0.5, twice as many calls were shed as the
#: queue would have timed out.
MISS_PROBABILITY = 0.9
#: ... and under sustained overload (``OverloadDetector.overloaded``), when more calls wait
#: than the slots serve: a call shed there that would have been served leaves its place to
#: another, while one kept that misses waits its whole timeout for a refusal.
OVERLOAD_MISS_PROBABILITY = 0.5
#: ... and for a call already waiting, judged again at every look: each look is one more
#: chance to cross the bar on an estimate that swings.
REJUDGED_MISS_PROBABILITY = 0.95
#: The queue is not empty for this many mean holds before predictive shedding reads overload
#: (``sustained``).
SUSTAINED_HOLDS = 2.0
_Z_SERVED = NormalDist().inv_cdf(1.0 - MISS_PROBABILITY)
_Z_REJUDGED = NormalDist().inv_cdf(1.0 - REJUDGED_MISS_PROBABILITY)
_Z_SERVED_IN_OVERLOAD = NormalDist().inv_cdf(1.0 - OVERLOAD_MISS_PROBABILITY)
#: Under an adaptive limit, a standing queue need keep the slots idle no more than this share of
#: the time (``keeping_busy``).
IDLE_SHARE = 0.01
#: Under sustained overload, an adaptive limit keeps this many slots beyond the calls the tool
#: serves in parallel (``slots_in_force``). None beyond: a tool that gained workers in an
#: overload never showed it (its calls in flight stayed at the parallelism it was read at), and
#: 15 of 30 seeds of the shifting demo met every target, not 30 (``python
#: benchmarks/virtual_demo.py --scenario shifting --seeds 1-30``).
OVERLOAD_HEADROOM = 1


def whole_calls(parallelism: float) -> int:
    """An estimate of the calls a tool serves in parallel as a whole number of calls: to the
    nearest call (halves up), at least one. The default queue and the slots under overload both
    count in it."""
    return max(1, math.floor(parallelism + 0.5))


def typical_share(position: int, spread: float, z: float = _Z_SERVED) -> float:
    """The wait a call at ``position`` is served within with probability
    ``1 - MISS_PROBABILITY`` (the standard normal's quantile ``z`` of it), over its expected
    wait, for holds of squared coefficient of variation ``spread``
    (``ServiceTimeEstimator.spread``; 1.0 when it is 0).

    The wait is about the sum of ``position`` holds over the slots: its squared coefficient
    of variation is ``spread / position``, and a sum of heavy-tailed holds is near a
    log-normal of that mean and spread (Fenton and Wilkinson). So a call near the head of a
    queue of a heavy-tailed tool is often served far sooner than the mean says (a third of the
    mean for sigma 1), and a call deep in a long queue about when the mean says."""
    if spread <= 0.0:
        return 1.0
    log_var = math.log1p(spread / position)
    return math.exp(z * math.sqrt(log_var) - 0.5 * log_var)


def miss_bar(waiting: bool, overloaded: bool) -> float:
    """The standard normal quantile ``typical_share`` judges by: ``MISS_PROBABILITY``'s
    (``REJUDGED_MISS_PROBABILITY``'s for a call ``waiting`` already), or under sustained
    overload ``OVERLOAD_MISS_PROBABILITY``'s."""
    if overloaded:
        return _Z_SERVED_IN_OVERLOAD
    return _Z_REJUDGED if waiting else _Z_SERVED


def keeping_busy(load: float, idle: float = IDLE_SHARE) -> int:
    """The calls beyond the first that keep a server idle at most ``idle`` of the time when
    calls come ``load`` (> 1) times as fast as it serves them: the least K with an idle share
    ``(load - 1) / (load ** (K + 1) - 1)`` <= ``idle`` (the M/M/1 queue of K + 1 places).
    9 at 1.5x, 4 at 4x, 2 at 10x: the further arrivals outrun the server, the sooner a call
    comes to take a freed place."""
    return max(0, math.ceil(math.log1p((load - 1.0) / idle) / math.log(load)) - 1)


class QueueDiscipline:
    """The queue's rules for one guard (see the module). ``standing_limit`` None follows the
    limit in force (``STANDING_SLOTS_FACTOR`` per slot, at most ``max_queue``); ``handoffs`` is
    counted by the guard at each hand-off."""

    __slots__ = (
        "_standing_derived",
        "handoffs",
        "last_empty",
        "lifo",
        "max_queue",
        "overload",
        "parallelism",
        "predictive",
        "queue_timeout",
        "rejudging",
        "standing_after",
        "standing_limit",
    )

    def __init__(
        self,
        *,
        queue_timeout: float,
        max_queue: int,
        slots: int,
        lifo: bool,
        standing_after: float | None,
        standing_limit: int | None,
        predictive: bool,
        now: float,
    ) -> None:
        self.queue_timeout = queue_timeout
        self.max_queue = max_queue
        self.lifo = lifo
        self.predictive = predictive
        self.standing_after = (
            min(STANDING_AFTER, queue_timeout / 4) if standing_after is None else standing_after
        )
        self._standing_derived = standing_limit is None  # follows the limit in force
        self.standing_limit = min(
            max_queue, STANDING_SLOTS_FACTOR * slots if standing_limit is None else standing_limit
        )
        self.last_empty = -math.inf
        self.handoffs = 0  # since the queue last formed (at last_empty)
        # Waiters are re-judged while they wait (tail first, FIFO order only: under LIFO a
        # position says nothing about a wait) when there is a finite timeout to miss.
        self.rejudging = predictive and not lifo and queue_timeout < math.inf
        self.overload = OverloadDetector(now)
        #: The adaptive limit's estimate of the calls the tool serves in parallel, as last put
        #: (``on_limit``); None under a fixed limit, or before any.
        self.parallelism: float | None = None

    def on_limit(self, slots: int, parallelism: float | None = None) -> None:
        """The limit in force moved, or the estimate of the calls the tool serves in parallel
        (``parallelism``, from an adaptive limit): a derived standing limit follows them.

        A limit above the tool's parallelism keeps its excess calls waiting inside the tool, so
        those count against the standing queue: with ``STANDING_SLOTS_FACTOR`` waiters per call
        served in parallel, a queued call waits as long as under a limit equal to the
        parallelism. Counted per slot instead, the wait would grow with the headroom the limit
        keeps to find more capacity. Nor is it held longer than keeps the tool busy, counting
        the calls in the tool: its parallel calls all busy take ``parallelism - 1`` more than
        one server (``keeping_busy``). At 10x capacity 5 per call only made every call wait."""
        self.parallelism = parallelism
        if not self._standing_derived:
            return
        if parallelism is None:
            standing = STANDING_SLOTS_FACTOR * slots
        else:
            parallel = min(float(slots), parallelism)
            standing = round((STANDING_SLOTS_FACTOR + 1) * parallel - slots)
            load = self.overload.offered_load
            if 1.0 < load < math.inf:
                standing = min(standing, round(parallel - 1.0 + keeping_busy(load) - slots))
            standing = max(1, standing)
        self.standing_limit = min(self.max_queue, standing)

    def slots_in_force(self, limit: int, parallelism: float | None, now: float, queued: int) -> int:
        """The slots to put in force for an adaptive ``limit`` whose estimate of the calls the
        tool serves in parallel is ``parallelism``: the limit, but under sustained overload (a
        standing queue, calls arriving faster than the slots open) no more than the parallelism
        and ``OVERLOAD_HEADROOM``, in whole calls (``whole_calls``).

        The limit runs above the parallelism to find more capacity when there is room. Under
        overload there is none: the slots beyond it only move queued calls into the tool, where
        they wait as long as in the queue, and a tool that slows down when crowded (as the
        demo's tool does, 1 % for each call beyond its workers) serves every call slower for
        them. Calls in flight above the figure drain; none is cancelled."""
        if parallelism is None or not (self.standing(now, queued) and self.overload.overloaded()):
            return limit
        return min(limit, whole_calls(parallelism) + OVERLOAD_HEADROOM)

    def arrival(self, now: float, queued: int) -> None:
        """A caller is about to queue behind ``queued`` others: an empty queue forms anew,
        unless calls are still coming faster than slots open (then the queue emptied for an
        instant, and has not stopped standing)."""
        if not queued and not self.overload.outrunning():
            self.last_empty = now
            self.handoffs = 0

    def standing(self, now: float, queued: int) -> bool:
        """CoDel's test: the queue is standing when it has not been empty for
        ``standing_after`` seconds (``last_empty`` is stamped by arrivals that find it empty)."""
        return bool(queued) and now - self.last_empty > self.standing_after

    def sustained(self, now: float, queued: int, hold: float) -> bool:
        """Sustained overload, as predictive shedding reads it: calls arriving faster than the
        slots open, and a queue not empty for ``SUSTAINED_HOLDS`` holds of ``hold`` seconds (or
        ``standing_after``, if longer). The queue's test is what keeps a burst from reading
        as overload: a tool of 1-5 s calls at half its capacity read two calls a second apart
        as overload when the arrival averages alone (then a quarter and a whole second, now
        2.5 and 10 of a slow tool's openings: ``_overload.py``) decided."""
        return (
            bool(queued)
            and now - self.last_empty > max(self.standing_after, SUSTAINED_HOLDS * hold)
            and self.overload.overloaded()
        )

    def serves_newest(self, now: float, queued: int) -> bool:
        """Adaptive LIFO: the newest waiter is served first while the queue stands."""
        return self.lifo and self.standing(now, queued)

    def holds_standing(self, now: float, queued: int, hold: float = 0.0) -> bool:
        """Sustained overload with a queue at the standing limit: refuse the newcomer. The
        queue stands in the tool's own time too: not empty for ``SUSTAINED_HOLDS`` holds of
        ``hold`` seconds (``sustained``), which only a slow tool's calls make longer than
        ``standing_after``."""
        return queued >= self.standing_limit and self.sustained(now, queued, hold)

    def would_time_out(
        self,
        position: int,
        now: float,
        slots: int,
        service: ServiceTimeEstimator,
        latest_start: float,
    ) -> bool:
        """Predictive early shedding: would a newcomer at ``position`` miss ``queue_timeout``?
        Not while LIFO serves newcomers first (a newcomer's position then says nothing about
        its wait). Asked only when ``predictive``."""
        if self.serves_newest(now, position - 1):
            return False
        share = 1.0
        overloaded = False
        if service.samples >= SPREAD_SAMPLES:  # (a spread is known: not for a new guard)
            overloaded = self.sustained(now, position - 1, service.mean)
            share = typical_share(position, service.spread(), miss_bar(False, overloaded))
        outrun = overloaded or self.overload.overloaded()  # (read only when it can matter)
        hold = service.evidence(now - latest_start, overloaded, outrun)
        start = self.expected_start(position, now, slots, hold, latest_start, position - 1, share)
        return start > now + self.queue_timeout

    def is_late(
        self,
        since: float,
        position: int,
        now: float,
        slots: int,
        hold: float,
        latest_start: float,
        spread: float = 0.0,
        overloaded: bool = False,
    ) -> bool:
        """Whether the waiter at ``position`` (queued at ``since``) can no longer expect a slot
        before its own deadline: the arrival test, against its deadline (``overloaded``: under
        sustained overload, as ``hold`` was read)."""
        share = typical_share(position, spread, miss_bar(True, overloaded)) if spread else 1.0
        start = self.expected_start(position, now, slots, hold, latest_start, position, share)
        return start > since + self.queue_timeout

    def expected_start(
        self,
        position: int,
        now: float,
        slots: int,
        hold: float,
        latest_start: float,
        queued: int,
        share: float = 1.0,
    ) -> float:
        """When the caller at ``position`` can count on a slot: on the evidence ``hold``
        (``expected_wait``), plus half a drain step (waiting the whole timeout for a refusal is
        the worst outcome a caller can have, so a start expected that close to the deadline
        counts as a miss), times ``share``: the wait it is served within with probability
        ``1 - MISS_PROBABILITY`` over the expected one (``typical_share``)."""
        youngest = now - latest_start
        mean_age = self._mean_age(youngest, slots, latest_start, queued)
        wait = expected_wait(position, slots, hold, youngest, mean_age)
        if share < 1.0:  # the spread is known: no margin beyond it
            return now + wait * share
        return now + wait + LATE_MARGIN_STEPS * hold / slots

    def _mean_age(self, youngest: float, slots: int, latest_start: float, queued: int) -> float:
        """The mean age of the calls in flight, from the slow path alone (tracking every start
        would cost the uncontended path a sixth). While a queue stands every start is a
        hand-off, so the calls in flight started about one hand-off interval apart; before the
        queue's first hand-off, they are taken to have started together (a burst)."""
        handoffs = self.handoffs
        if not (handoffs and queued):
            return youngest
        interval = (latest_start - self.last_empty) / handoffs
        return youngest + 0.5 * (slots - 1) * max(interval, 0.0)

    def judge_delay(
        self,
        tail_since: float,
        queued: int,
        now: float,
        slots: int,
        service: ServiceTimeEstimator,
        latest_start: float,
    ) -> float:
        """Seconds until the tail (queued at ``tail_since``, ``queued`` waiting in all) would be
        judged late should no slot open meanwhile.

        No opening means the calls in flight age: the expected start stays put while they are
        younger than the mean hold, then moves with the clock; and once the youngest outlives
        the mean (or before any call has finished) the evidence of the hold grows with it.
        Openings only move the moment later, so a wake then misses nothing.
        """
        youngest = now - latest_start
        overloaded = self.sustained(now, queued, service.mean)
        outrun = overloaded or self.overload.overloaded()  # (read only when it can matter)
        hold = service.evidence(youngest, overloaded, outrun)
        share = typical_share(queued, service.spread(), miss_bar(True, overloaded))
        rounds = (queued - 1) // slots
        # What the tail's start is judged by, t seconds on: now + t + share * (rest + steps *
        # hold), the rest of the call in flight whose slot it waits for shrinking with t, the
        # hold growing with the youngest call in flight once that outlived what the holds'
        # spread explains (before any call has finished: at once).
        steps = rounds + (LATE_MARGIN_STEPS / slots if share >= 1.0 else 0.0)
        mean_age = self._mean_age(youngest, slots, latest_start, queued)
        rest = expected_wait(queued, slots, hold, youngest, mean_age) - rounds * hold
        grows_at, growth = 0.0, 1.0
        if service.samples:  # past the spread, in proportion (``evidence``)
            mean = service.typical(outrun)
            explained = mean + EVIDENCE_SPREADS * math.sqrt(service.variance)
            if overloaded:  # as soon as they outlive the mean, and as they age (``evidence``)
                explained = mean
            growth = mean / explained if mean > 0.0 else 1.0
            if hold <= mean:
                grows_at = explained - youngest
        slack = tail_since + self.queue_timeout - now
        return _first_late(slack, share, rest, share * steps, hold, grows_at, growth)


def _first_late(
    slack: float,
    share: float,
    rest: float,
    per_hold: float,
    hold: float,
    grows_at: float,
    growth: float,
) -> float:
    """The least t >= ``MIN_JUDGE_DELAY`` at which ``t + share * max(0, rest - t) + per_hold *
    max(hold, hold + growth * (t - grows_at))`` reaches ``slack``: a piecewise linear function,
    non decreasing (``share`` <= 1), solved segment by segment between its two bends."""
    t = 0.0
    for end in sorted((max(rest, 0.0), max(grows_at, 0.0), math.inf)):
        if end <= t:
            continue
        grown = hold + growth * (t - grows_at)
        value = t + share * max(0.0, rest - t) + per_hold * max(hold, grown)
        if value >= slack:
            break
        slope = 1.0 - (share if t < rest else 0.0) + (per_hold * growth if t >= grows_at else 0.0)
        if slope > 0.0 and t + (slack - value) / slope <= end:
            t += (slack - value) / slope
            break
        t = end
    return max(t, MIN_JUDGE_DELAY)
