"""Is a tool in sustained overload, or only absorbing a burst?

A burst at moderate load and the onset of real overload look alike for a while: both build a
queue that does not empty. What tells them apart is the arrival rate against the rate the slots
serve: under overload calls keep coming faster than they can be served. Two time-weighted
averages of the arrival rate watch it:

- a slow one (``SLOW_HORIZON``): steady overload, with a margin (``SLOW_FACTOR``) so that a
  streak of slow calls at 0.8x capacity does not read as overload;
- a fast one (``FAST_HORIZON``): the onset of heavy overload within a few hundred milliseconds,
  with a higher bar (``FAST_FACTOR``) since a short average is noisy.

For a slow tool both horizons are a number of *openings* instead (``SLOW_OPENINGS``,
``FAST_OPENINGS``), once an opening is longer than ``SCALED_FROM``: a tool of 8 workers and
1-5 s calls opens a slot every 0.375 s, so averages of 1 s and 0.25 s saw one to four of its
arrivals, read overload now and then at any load, and the slots in force flickered from the
parallelism and one to the whole limit. At ``SCALED_FROM`` the two rules agree, so a tool whose
openings are shorter (the demo's, 10 ms) reads as before, to the bit.

Either one above its bar means overload, the slow one only while the fast one still sees calls
coming at least as fast as slots open (it remembers an overload for seconds after it ended).
Each is taken over the time it has seen: started at zero, an average would read a new guard's
arrivals low for a whole horizon (a guard created as a 1.5x overload began saw none for 1.5 s).
Capacity is one call per *opening*: the time between two slots freeing up when every slot is
taken (the mean hold over the slots, for a fixed limit; for an adaptive limit, whose slot count
moves faster than a mean hold follows, the mean of every call's hold over the calls it shared
the tool with: those in flight while it ran, or the calls the tool serves in parallel when
more). The guard's figure (about 20 calls deep) is smoothed once more here over
``SLOW_HORIZON``, at the same looks, so that a streak of slow calls at moderate load does not
read as overload and the guard's release path pays nothing for it; but only once it rests on
``SETTLING_CALLS`` finished calls. Before that, smoothing would keep the figure of the first few
calls for a second or more (a new guard's first calls were short: the demo's tool then read as
serving 280 calls a second instead of 100, and a 1.5x overload as no overload for two seconds).
A figure taken as it is rests on few calls, though: the bars then rise by its standard error,
about ``1 / sqrt(n)`` of itself for a mean of ``n`` holds (a streak of slow calls in a new
guard's first second read the demo's tool as serving 68-88 calls a second instead of 100, and a
burst at 0.8x as overload). The figures come from a measured trade-off on the scenario of the
README's overload demo (``fusion-guard demo``: 2 slots, log-normal service): at 0.8x capacity
the guard must shed almost nothing, at 1.5x and above admitted calls must stay within a few
service times.
"""

from __future__ import annotations

import math

__all__ = ["LOOK_EVERY", "OverloadDetector"]

SLOW_HORIZON = 1.0
SLOW_FACTOR = 1.15
FAST_HORIZON = 0.25
FAST_FACTOR = 1.3
#: A slow tool's averages span at least this many openings (slow, fast): horizons of seconds
#: see one to four arrivals of a tool that serves a few calls a second.
SLOW_OPENINGS = 10.0
FAST_OPENINGS = 2.5
#: Openings longer than this (seconds) stretch both horizons; shorter ones leave them as set
#: above (``SLOW_OPENINGS x SCALED_FROM == SLOW_HORIZON``, and likewise the fast one).
SCALED_FROM = SLOW_HORIZON / SLOW_OPENINGS
#: The guard's figure for an opening rests on this many finished calls before it is smoothed
#: here: until then it is taken as it is (about a second of calls at the demo's capacity).
SETTLING_CALLS = 100
#: A new guard's averages are taken as if they had seen this long (seconds) of no arrivals
#: before its first: one call a few milliseconds after the start is not a rate of hundreds.
FIRST_AGE = 0.05
#: Standard errors of the figure for openings, from the spread of the holds, given as margin.
SPREAD_MARGIN = 0.5
#: The guard looks at the rates at most this often (seconds): looks closer together change
#: nothing measurable, and a queued arrival then costs less.
LOOK_EVERY = 0.001


class OverloadDetector:
    """Time-weighted arrival rates, fed with the running count of arrivals.

    ``observe`` may be called at any spacing (the guard calls it only for calls that find every
    slot taken): arrivals since the last call are spread over the time since, so the averages are
    right whatever the spacing, and the fast path of the guard pays nothing.
    """

    __slots__ = (
        "_count",
        "_fast",
        "_fast_weight",
        "_margin",
        "_opening",
        "_slow",
        "_slow_weight",
        "_time",
        "offered_load",
    )

    def __init__(self, now: float) -> None:
        self._time = now
        self._count = 0
        self._slow = 0.0
        self._fast = 0.0
        # The weight each average has gathered, 1 - exp(-age / horizon): an average started at
        # 0 reads a new guard's arrivals low for a horizon (at 1.5x capacity, as no overload for
        # 1.5 s), so the bars are compared with the average over the time it has seen, as
        # if it had seen FIRST_AGE more of no arrivals (its first call is not a rate).
        self._slow_weight = -math.expm1(-FIRST_AGE / SLOW_HORIZON)
        self._fast_weight = -math.expm1(-FIRST_AGE / FAST_HORIZON)
        self._opening = math.nan
        self._margin = 2.0  # capacity over the figure's: see ``observe``
        #: How many times as fast as slots open calls arrive (the slow average); NaN before the
        #: guard has a figure for openings. Worked out as ``observe`` takes arrivals in, not
        #: when read: every finished call under an adaptive limit reads it.
        self.offered_load = math.nan

    def observe(
        self, now: float, arrivals: int, opening: float, evidence: int, spread: float = 0.0
    ) -> None:
        """``arrivals`` so far (a running count) and the guard's current seconds per opening,
        measured from ``evidence`` finished calls whose holds have the squared coefficient of
        variation ``spread`` (``ServiceTimeEstimator.spread``)."""
        # A figure smoothed over SLOW_HORIZON rests on about SLOW_HORIZON / opening holds, and
        # is uncertain by sqrt(spread / holds) of itself: the tool is given that much more
        # capacity than the figure says. A heavy tail's mean swings: a tool of sigma 1.2 read
        # as serving 66-83 calls a second instead of 100 for a second after a long call, and a
        # 0.8x load as overload (the queue held to its standing limit: 0.3-0.6 % shed).
        if opening > SCALED_FROM:  # a slow tool: horizons of so many openings, not seconds
            slow_horizon = SLOW_OPENINGS * opening
            fast_horizon = FAST_OPENINGS * opening
        else:
            slow_horizon = SLOW_HORIZON
            fast_horizon = FAST_HORIZON
        margin = 1.0
        if spread > 0.0 and opening > 0.0:
            margin += SPREAD_MARGIN * math.sqrt(spread * opening / slow_horizon)
        if self._opening != self._opening or evidence < SETTLING_CALLS:
            self._opening = opening  # the first look, or a figure still settling: taken as is
            # A mean of n holds is uncertain by about 1/sqrt(n) of itself (holds vary about
            # as much as their mean), so until it settles the tool is given that much more
            # capacity than the figure says: a streak of slow calls in a new guard's first
            # second then no longer reads as overload at 0.8x.
            self._margin = max(margin, 1.0 + 1.0 / math.sqrt(max(evidence, 1)))
        else:
            self._margin = margin
        elapsed = now - self._time
        if elapsed <= 0.0:
            self._offer()  # the figure for openings may have moved
            return
        rate = (arrivals - self._count) / elapsed
        slow = math.exp(-elapsed / slow_horizon)
        fast = math.exp(-elapsed / fast_horizon)
        self._slow = self._slow * slow + rate * (1.0 - slow)
        self._fast = self._fast * fast + rate * (1.0 - fast)
        self._slow_weight = self._slow_weight * slow + (1.0 - slow)
        self._fast_weight = self._fast_weight * fast + (1.0 - fast)
        self._opening = self._opening * slow + opening * (1.0 - slow)
        self._time = now
        self._count = arrivals
        self._offer()

    def _offer(self) -> None:
        """Work out ``offered_load`` anew."""
        opening = self._opening
        self.offered_load = self.arrival_rate * opening if opening > 0.0 else math.nan

    def overloaded(self) -> bool:
        """Calls have been arriving faster than the slots open (with margins), and still are:
        the slow average alone remembers a 10x overload for two seconds after it ended, and
        held the queue short through the calm that followed. Calls that hold a slot for no
        measurable time never overload it."""
        if not self._opening > 0.0:
            return False
        capacity = self._margin / self._opening
        fast = self._fast_rate
        return fast > capacity * FAST_FACTOR or (
            fast > capacity and self.arrival_rate > capacity * SLOW_FACTOR
        )

    def outrunning(self) -> bool:
        """Calls are arriving faster than the slots open, on the fast average and without a
        margin: a queue that empties for an instant now has not stopped standing."""
        return self._opening > 0.0 and self._fast_rate * self._opening > 1.0

    @property
    def _fast_rate(self) -> float:
        """The fast average, calls per second."""
        return self._fast / self._fast_weight

    @property
    def last_look(self) -> float:
        """When ``observe`` last took the arrivals in (the guard's clock)."""
        return self._time

    @property
    def arrival_rate(self) -> float:
        """The slow average, calls per second."""
        return self._slow / self._slow_weight
