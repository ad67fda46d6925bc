"""Pacing: the instrument for a tool whose limit is a rate, not a count of calls in flight.

An upstream API with a rate limit (a token bucket, a fixed or sliding window) answers the calls
past its rate with an error (a 429), and fast. Its overload errors look like a pool's that fails
fast when full, and a concurrency ceiling is the wrong answer to them: the 429s free their slots
in milliseconds, so the count of slots at which every excess call is admitted (to fail) lies
barely one slot above the count the rate needs (50 calls/s of 80 ms, 429s in 5 ms: 4 slots
serve 50 calls/s, 5 admit 250 calls/s). A ceiling set at the calls in flight of each 429 (the
pool's rule) sits at or below what the rate needs, and the guard refused what the upstream
would have served (goodput 0.88-0.94x a fixed 10 on the zoo's upstream at 4x).

Which instrument an overload error calls for is told by the error itself (``_feedback.py``):

- **Concurrency-shaped**: a pool that fails when full fails a call only when its connections
  are all taken, so never at a count of calls in flight it was just seen serving. Its error
  sets the ceiling (``GradientLimit.on_overload``), as before.
- **Rate-shaped**: the tool refused the ``n``-th call in flight although, within the last
  ``AT_ONCE_MEMORY`` seconds, it was seen serving ``n`` at once, or served a call that started
  with ``n`` in flight after its last ceiling: what it lacked was not a slot but a token. Such an
  error does not touch the limit; it starts (or keeps) the pacer.

``RatePacer`` admits calls at the rate the tool serves while it refuses some, with ``HEADROOM``
more: the served calls' rate over ``SERVED_WINDOW`` seconds and ``SERVED_CALLS`` calls at least,
measured from the first rate-shaped error (so that it is the upstream's rate, not one held down
by the ceilings before), and not lowered by a stretch in which the tool refused nothing (the
calls served then were all there were to serve). A pace a little above the measured rate keeps
a few refusals coming, which tell the rate, and follows an upstream that grants more. A
measurement is refused when an error was told rate-shaped or more than ``REFUSED_SHARE`` of the
calls that ended were not served (unnamed, most 429s of a paced tool are not told: its error
share does not rise with the calls in flight the pace holds). A pace that held calls back while
the upstream refused none rises a step (a probe), and goes back to where it rose from if the
upstream refuses next, the next probe then waiting 1, 2, 4 ... measurements: a bucket of one
token serves half of a pace a little above its rate, so the pace must settle just under it.

It paces through the slots in force, and spaces them with a timer. Its tokens (earned at the
pace, spent by every call admitted, hand-offs included) are kept up to one: a slot opens for a
token, never two at once, so calls are admitted ``1 / pace`` apart at the closest (a token is
spent when its slot opens or is taken, whichever is later: the admission counter counts a call
handed a slot only once its task runs). At each call's
end the slots are the calls still in flight, and one more when a token is there (never fewer
than one); between ends, ``PaceTimer`` opens a slot for the next waiter as each token is earned.
Released only at other calls' ends, up to two at once (before the timer), the calls came in
clumps, and an upstream bucket of 2 refused that stream from about 0.85-0.9 of its rate on
(the zoo's ``upstream_fast`` read 0.75-0.78 of a fixed 10 at 4x). The calls beyond the slots are
refused as any excess is, SERVER_BUSY with a ``retry_after``: the slots open at the paced rate,
and the advice follows them. The pacer lets go ``RATE_HOLD`` seconds (or ``HOLD_MEASUREMENTS``
measurements, if longer) after the last rate-shaped error, unless it held calls back meanwhile
(letting go then sent the excess load at once into 429s): a load back under the rate is then
run without it, and the first 429 brings it back. Its default queue holds ``QUEUE_SECONDS`` of
the pace, ``LIGHT_QUEUE_SECONDS`` while the calls come slower than the pace.

The timer runs only while the tool is paced, its rate known and calls wait (or until the token
that gives the next arrival a free slot): a tool not paced pays nothing for it, a queue drained
(as a closed guard's drains) stops it. On asyncio it is a loop timer (a callback, no task); on
trio a system task that ends when the timer stops, and is cancelled with the run.

Its tokens are not the rate limiter's GCRA (``_rate.py``, ``backends/_base.py``), though both
are a token bucket. GCRA decides each call as it comes, against a rate configured once, with a
time of arrival per key kept in a backend (Redis, for a fleet) and updated atomically; the pacer
decides nothing per call, it counts after the fact the calls the slots admitted (hand-offs
included) and turns the tokens earned since into slots at the next end, at a rate that moves
with every measurement, so it keeps a count of tokens, which a new rate leaves valid, where
GCRA keeps a time, which a new rate would have to rescale.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

from ._pacing_probe import PROBE_BACKOFF, PaceProbe
from ._pacing_timer import PaceTimer

__all__ = [
    "AT_ONCE_MEMORY",
    "CLUMP",
    "HEADROOM",
    "HOLD_MEASUREMENTS",
    "PaceTimer",
    "PROBE_BACKOFF",
    "LIGHT_LOAD",
    "LIGHT_QUEUE_SECONDS",
    "QUEUE_SECONDS",
    "RATE_HOLD",
    "REFUSED_SHARE",
    "SERVED_CALLS",
    "SERVED_WINDOW",
    "STEP_DOWN",
    "RatePacer",
    "Served",
]

#: How long (seconds) a sighting of calls served at a count in flight stands as proof that the
#: tool serves that many: an error at that count or fewer, within it, is rate-shaped. Kept in
#: two periods of half this (a sighting lives 1-2 s). So does the limit's figure of calls served
#: at once (over its last samples) as read at each overload error.
AT_ONCE_MEMORY = 2.0
#: The served calls' rate is measured over at least this long (seconds) ...
SERVED_WINDOW = 0.5
#: ... and over this many served calls at least (an upstream of a few calls a second is measured
#: over seconds, not over the odd call of half a second).
SERVED_CALLS = 20
#: The pace is the measured rate and this share more: the upstream's own rate is found (and
#: followed when it grows) by a few of its refusals, about HEADROOM / (1 + HEADROOM) of the
#: calls admitted. At 0.1 an upstream with a burst of 2 refused a tenth of a pace below its rate
#: (jitter, not rate) and the pace settled there (docs/zoo.md, the upstream variants).
HEADROOM = 0.2
#: A measurement in which the tool refused calls and served fewer than the pace's rate brings
#: the pace down by this factor at most.
STEP_DOWN = 0.9
#: A measurement in which more than this share of the calls that ended were not served counts
#: as refused by the upstream, whether a rate-shaped error was told or not.
REFUSED_SHARE = 0.05
#: The most slots opened at one call's end beyond the calls still in flight (the tokens are
#: kept up to one, the timer spacing the rest): an upstream with a small burst of its own
#: refuses a clump its rate would serve spread out.
CLUMP = 1
#: A default queue holds the calls the pace admits in this long (seconds), or in one served
#: call's mean hold if longer: a call that would wait longer for its turn is refused at once ...
QUEUE_SECONDS = 0.1
#: ... or in this long while the calls come slower than the pace (a light load's Poisson
#: bunches wait their tokens out; an upstream of a bucket of one token, spaced one token
#: apart, shed 4-13 % at 0.5x-0.8x its rate with a queue of 0.1 s).
LIGHT_QUEUE_SECONDS = 0.3
#: The calls come "slower than the pace" below this multiple of it, over a measurement (a
#: Poisson count over half a second is uncertain by a fifth; an overload of 1.5x the upstream's
#: rate comes at 1.25x its pace).
LIGHT_LOAD = 1.1
#: The pacer lets go this long (seconds) after the last rate-shaped error ...
RATE_HOLD = 3.0
#: ... or after this many measurements of its rate, if longer (a slow upstream's).
HOLD_MEASUREMENTS = 3


class RatePacer:
    """Admissions paced at a rate learnt from a tool that refuses by rate (see the module), from
    the served calls ``feedback`` counts (``served``, ``served_time``: counters that only grow).

    ``rate_shaped(end)`` is told each rate-shaped overload error (ended at ``end``);
    ``slots(end, active, admitted)``, asked at each call's end while ``pacing``, answers the
    slots the pace allows now (``active`` calls in flight, the ending one included;
    ``admitted``: the calls admitted so far, a counter that only grows), or None (not pacing
    now); ``needed()``: the slots the pace needs, for a ceiling not to be set below them.
    """

    __slots__ = (
        "_admitted",
        "_at",
        "_ended",
        "_feedback",
        "_granted",
        "_held_back",
        "_hold",
        "_latest_admission",
        "_mark",
        "_mark_ended",
        "_mark_held_back",
        "_mark_served",
        "_mark_time",
        "_offered",
        "_probe",
        "_rate",
        "_refused",
        "_seen_at",
        "_seen_served",
        "_tokens",
        "_until",
        "_until_held_back",
        "_until_served",
        "pacing",
    )

    def __init__(
        self,
        feedback: Served,
        held_back: Callable[[], int] = lambda: 0,
        latest_admission: Callable[[], float] | None = None,
        ended: Callable[[], int] | None = None,
    ) -> None:
        self._feedback = feedback
        self._held_back = held_back
        self._ended = ended
        self._latest_admission = latest_admission
        self.pacing = False  # True from the first rate-shaped error until the pacer lets go
        self._until = -math.inf  # when it lets go, unless another rate-shaped error comes
        self._until_held_back = 0  # the calls held back for the pace when _until was set
        self._until_served = 0  # ... and the calls served then
        self._rate = math.nan  # the pace (calls/s); NaN: still measuring
        self._hold = math.nan  # the served calls' mean hold (seconds), as last measured
        # When the served calls were last counted, their count and their holds then.
        self._mark = math.nan
        self._mark_served = 0
        self._mark_time = 0.0
        self._mark_held_back = 0
        self._refused = False  # a rate-shaped error came since the served calls were counted
        self._mark_ended = 0  # the calls ended (served or not) when last counted
        self._offered = math.inf  # the calls/s that came (ended or held back), last measured
        self._seen_served, self._seen_at = 0, -math.inf  # the served count, when it last moved
        self._probe = PaceProbe(1.0 + HEADROOM)  # a raise while the upstream refuses nothing
        self._tokens = 0.0
        self._at = math.nan  # when the tokens were last counted, and the admissions then
        self._admitted = 0
        self._granted = -math.inf  # when a slot was last opened for a token

    @property
    def rate(self) -> float:
        """The pace in force (calls/s), NaN while measuring or let go."""
        return self._rate if self.pacing else math.nan

    @property
    def rate_learnt(self) -> float:
        """The last pace learnt (calls/s), kept after the pacer lets go; NaN before any."""
        return self._rate

    def rate_shaped(self, end: float) -> None:
        """A rate-shaped overload error ended at ``end``: pace (or keep pacing) for RATE_HOLD
        more seconds (HOLD_MEASUREMENTS of the rate in force, if longer)."""
        self._hold_until(end)
        if not self.pacing:
            # The error that starts the pacer fell on calls it did not pace: it tells nothing
            # of a pace learnt before, which it takes up again.
            self.pacing = True
            self._refused = False
            self._mark_now(end)
            return
        self._refused = True
        self._measure(end)

    def _hold_until(self, now: float) -> None:
        """Pace for RATE_HOLD more seconds from ``now`` (HOLD_MEASUREMENTS of the rate in
        force, if longer)."""
        rate = self._rate
        hold = (
            RATE_HOLD if rate != rate else max(RATE_HOLD, HOLD_MEASUREMENTS * SERVED_CALLS / rate)
        )
        self._until = now + hold
        self._until_held_back = self._held_back()
        self._until_served = self._feedback.served

    def _lets_go(self, now: float) -> bool:
        """Whether the pacer lets go at ``now``: its hold ran out, and the guard did not hold
        calls back for the pace meanwhile while the tool served some. A pace that held calls
        back is in force, whether the upstream refused any or not (unnamed, most of its 429s
        are not told rate-shaped: a paced tool's error share does not rise with the calls in
        flight), and letting it go admitted the excess load at once, to a burst of 429s (the
        zoo's ``upstream_sliding`` at 4x let go every 4 s). A tool that served nothing (a
        backend down) is let go, and so is a pacer still measuring: what held calls back was
        not the pace (a measurement over an outage read a few calls a second)."""
        if now < self._until:
            return False
        rate = self._rate
        if (
            rate == rate
            and self._held_back() > self._until_held_back
            and self._feedback.served > self._until_served
        ):
            self._hold_until(now)
            return False
        return True

    def let_go(self) -> None:
        """Stop pacing now (its guard closed): the next rate-shaped error starts it again."""
        self.pacing = False
        self._until = -math.inf

    def needed(self) -> int:
        """The slots the pace needs: its calls in flight at the served calls' mean hold
        (Little's law), and one more; 0 when not pacing or still measuring."""
        return self._needs() if self.pacing else 0

    def explains(self, inflight: int) -> bool:
        """Whether an overload error at ``inflight`` calls in flight is the rate's, though not
        told rate-shaped: a pace was learnt (paced now or before) and its calls in flight need
        as many (``needed``, of the last pace)."""
        return self._rate == self._rate and inflight <= self._needs()

    def _needs(self) -> int:
        """``needed`` of the last pace learnt, paced now or not (0 before any)."""
        rate = self._rate
        return 0 if rate != rate else math.ceil(rate * self._hold) + 1

    def queue(self) -> int:
        """The calls a default queue holds while paced: those the pace admits within one
        served call's mean hold or QUEUE_SECONDS, the longer (at least one)."""
        rate = self._rate
        if rate != rate:
            return 1
        seconds = LIGHT_QUEUE_SECONDS if self._offered < LIGHT_LOAD * rate else QUEUE_SECONDS
        return max(1, math.ceil(rate * max(self._hold, seconds)))

    def _mark_now(self, end: float) -> None:
        feedback = self._feedback
        self._mark, self._mark_served, self._mark_time = end, feedback.served, feedback.served_time
        self._mark_held_back = self._held_back()
        if self._ended is not None:
            self._mark_ended = self._ended()

    def _was_refused(self, served: int) -> bool:
        """Whether the upstream refused calls since the last reading: a rate-shaped error was
        told, or more than REFUSED_SHARE of the calls that ended were not served (unnamed, most
        of a paced tool's 429s are not told rate-shaped: its error share does not rise with
        the calls in flight the pace holds)."""
        if self._refused:
            return True
        if self._ended is None:
            return False
        ended = self._ended() - self._mark_ended
        return ended - served > REFUSED_SHARE * ended

    def _came(self, elapsed: float) -> float:
        """The calls/s that came since the last reading: those that ended and those held back
        (inf when the ends are not counted)."""
        if self._ended is None:
            return math.inf
        came = self._ended() - self._mark_ended + self._held_back() - self._mark_held_back
        return came / elapsed

    def _measure(self, end: float) -> None:
        """Measure the served calls' rate since the last reading, once SERVED_WINDOW passed and
        SERVED_CALLS were served."""
        elapsed = end - self._mark
        if elapsed < SERVED_WINDOW:
            return
        feedback = self._feedback
        served = feedback.served - self._mark_served
        if feedback.served != self._seen_served:
            self._seen_served, self._seen_at = feedback.served, end
        elif self._refused and end - self._seen_at >= SERVED_WINDOW:
            # Refused, and nothing served for a whole window (a backend down): no stretch for
            # a measurement to average over (one over a 4 s outage read 7 calls a second of a
            # tool that serves 100), which starts again.
            self._seen_at = end
            self._mark_now(end)
            return
        if served < SERVED_CALLS:
            return
        rate = (1.0 + HEADROOM) * served / elapsed
        previous = self._rate
        self._offered = self._came(elapsed)
        if previous != previous:  # NaN: the first measurement
            # A count of calls served is uncertain by its square root (a Poisson count): the
            # first pace gives the tool that much more, not a chance dip's pace to shed at.
            rate *= 1.0 + 1.0 / math.sqrt(served)
            self._tokens = 0.0
            self._at = math.nan
        elif not self._was_refused(served):
            # The tool refused nothing meanwhile: the calls served were all there were to
            # serve, not its rate, and the pace stays (it grows, if they outran it), and is
            # raised a step when the guard refused calls for it (``_pacing_probe.py``).
            rate = self._probe.clean(previous, rate, self._held_back() > self._mark_held_back)
        elif (start := self._probe.refused()) is not None:
            # The last raise was a probe, and the upstream refused: back to the pace it was
            # raised from, which it served without refusing.
            rate = start
        else:
            # Refused, and fewer served than the pace's rate: a window or a burst of the
            # upstream's own refuses a clump at a rate it serves spread out, so the pace comes
            # down by a step a measurement, not at once to what one stretch served.
            rate = max(rate, STEP_DOWN * previous)
        self._rate = rate
        self._hold = (feedback.served_time - self._mark_time) / served
        self._refused = False
        self._mark_now(end)

    def slots(self, end: float, active: int, admitted: int) -> int | None:
        """The slots in force the pace allows at ``end`` (see the class), or None: not pacing
        (it let go, or is still measuring the rate)."""
        if self._lets_go(end):
            self.pacing = False
            return None
        self._measure(end)
        rate = self._rate
        if rate != rate:  # NaN: measuring
            return None
        at = self._at
        if at != at:  # the first reading of the tokens: none spent yet
            self._at, self._admitted = end, admitted
            return max(1, active - 1)
        tokens = self._count(end, admitted)
        # The calls still in flight once this one ends, and one more for a token: the timer
        # opens the slots of the tokens earned later, each at its time.
        if tokens < 1.0:
            return max(1, active - 1)
        self._granted = end
        return active

    def granted(self, now: float) -> None:
        """The pace timer opened a slot for a token at ``now`` (the call it is handed to is
        counted as admitted only once its task runs)."""
        self._granted = now

    def _count(self, now: float, admitted: int) -> float:
        """The tokens at ``now``, ``admitted`` calls admitted so far: earned at the pace since
        the last count, less the calls admitted since, kept up to CLUMP (a token spent ahead
        leaves them below zero, to be earned back)."""
        rate = self._rate
        tokens = self._tokens + (now - self._at) * rate - (admitted - self._admitted)
        # The tokens earned while there were CLUMP already were not kept: since the latest
        # admission or slot opened for a token, each of which spent one, at most CLUMP - 1 and
        # those earned since. (Counted from the last count alone, a slot opened at a token and
        # taken later let the next token come as much sooner; and a call handed a slot counts
        # as admitted only once its task runs, so an end at the instant of the timer's slot
        # opened another: two calls went in closer than 1 / pace, into a bucket of one's 429.)
        latest = self._granted
        if self._latest_admission is not None:
            latest = max(latest, self._latest_admission())
        tokens = min(tokens, CLUMP - 1 + (now - latest) * rate)
        if tokens > CLUMP:
            tokens = float(CLUMP)
        self._tokens = tokens
        self._at, self._admitted = now, admitted
        return tokens

    def until_token(self, now: float, admitted: int) -> float | None:
        """Seconds from ``now`` until a token is there (0.0: one is), ``admitted`` calls
        admitted so far; None when not pacing at ``now`` (let go, or still measuring)."""
        rate = self._rate
        if not self.pacing or self._lets_go(now) or rate != rate or self._at != self._at:
            return None
        tokens = self._count(now, admitted)
        # A token short by a rounding error is one: a clock read as a float may never move by
        # so little, and the timer would wait for it at the same instant for ever.
        return 0.0 if tokens >= 1.0 - 1e-6 else (1.0 - tokens) / rate


class Served(Protocol):
    """What the pacer reads of the served calls (``CapacityFeedback``)."""

    served: int
    served_time: float
