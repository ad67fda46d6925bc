"""What a finished call tells an adaptive limit: the one place where a call's outcome becomes the
signal the limit learns from (a latency sample, a drop, an overload error, or nothing).

A limit shrinks on what it is fed, so a signal must be about the tool's capacity, not about
one caller's arguments:

- **A call whose arguments failed validation** never reached the tool: nothing (its hold of a
  few microseconds would read as a tool that answers at once).
- **A call ended by its deadline** is a drop (GradientLimit halves the limit), except:

  1. *the tool kept serving the other clients while it was stuck*: the timeout is its caller's
     own (a fetch tool handed a tarpit URL). Counted over the calls of *other* clients that
     finished while it held its slot: each ended well within its deadline counts 1, each that
     timed out or came near it (``NEAR_DEADLINE``) counts ``-TROUBLE_WEIGHT``; the timeout is
     the caller's own when the sum reaches the calls in flight when it took its slot (at least
     ``SERVED_BY_OTHERS``): the tool turned its whole crowd over, for others, meanwhile.
  2. *other clients are waiting for a slot and the limit was cut since it started*: calls
     stuck together are answered by one cut, and the waiting clients' calls, which the slots
     go to next, will tell whether the tool serves anyone (without this, a few clients whose
     calls fill every slot and stall would halve the limit once per call, down to one slot
     that they keep taking in turn, and no other call could ever show the tool is fine).

  So a tool that stalls for everyone still halves the limit at the first timeout, and again at
  each round of calls admitted since (the calls in flight when it stalled finished less than a
  crowd's worth since they started; the others' timeouts count against); three clients whose
  calls stall among hundreds of fast ones never do (they are each other's "other clients", and
  outweighed).
- **A call that said the tool is overloaded** is an overload signal (``OVERLOAD``): it raised
  one of the guard's ``overload_errors``, or answered (returned or raised) a SERVER_BUSY,
  RATE_LIMITED or TIMEOUT envelope. It says the tool could not serve the calls in flight when
  it started: ``GradientLimit.on_overload`` holds the limit below them; a limit without that
  method takes it as a drop.
- **Another error** (``error``, ``internal_error``) is an overload signal only when errors are
  more frequent among calls that started with more calls in flight: ``ErrorShare`` compares the
  error share of the calls that started with at least as many in flight as the failed one with
  the share of those that started with fewer (a two-proportion z-test over the last
  ``ERROR_HISTORY`` calls). A pool that fails fast once its connections are taken fails only the
  calls above them; bad arguments and validation errors fail as often at any load. A call is
  counted when it ends, and an error ends long before a call served: when the limit has just
  risen, the first calls at the new count to end are its errors, and the share there read 100 %
  of a few calls (a 16-connection pool with 20 % of bad input, traced: 2-4 errors and no call
  served at the new top count, read as overload each time the limit climbed). So the calls in
  flight when an error is judged that started with as many in flight or more count as not
  failed among those from its count up: the served calls still to come, while the calls
  holding a full pool's connections started below the count that fails
  (``benchmarks/error_sim.py --queuing-pool 16``). An error of a call that ran alone
  (``ALONE``) tells no capacity at all: the tool failed for a call that shared it with nobody (a
  backend that is down); the limit is told, so it can go back to where it was once calls
  succeed again. Otherwise an error teaches nothing: its hold times the error's
  own path (a validation error answers in microseconds), not the tool's service, and fed as a
  latency sample it would read as an uncrowded tool and grow the limit.
- **An overload signal of a tool limited by a rate** (``RATE``) is one at a count of calls in
  flight the tool was lately seen serving: the limit saw it serve that many at once (a served
  call ended while as many less one, admitted before it, still ran: ``served_at_once``, over
  the limit's last ``OVERTAKING_MEMORY`` samples, as read at each overload error of the last
  ``AT_ONCE_MEMORY`` seconds in which a call was served), or it served a call that started with
  as many in flight since its last ceiling, within the last ``AT_ONCE_MEMORY`` seconds. A pool
  refuses only above what it serves; an upstream refusing by rate, at any count. Such a signal
  is paced (``_pacing.py``), not taken as a ceiling. The record of the calls served for it is
  kept from the tool's first overload error on (``CapacityFeedback``).
- **A cancelled call** teaches nothing: its caller left, and its hold ends when the caller left,
  not when the tool would have answered.
- **Any other call** (answered ``ok``) is a latency sample.

Clients are told apart by the client key the guard already has for fair shares (calls without
one are one anonymous client), so on a tool with one client every timeout is a drop, as it was
before these rules. A client's record lives while it has a call holding a slot, so the records
kept are at most the calls in flight and one more (the last client's whose calls all ended, for
its next call), however many keys come and go; a record holds three numbers and a reference to
the caller's own key string, never a copy.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ._pacing import AT_ONCE_MEMORY

__all__ = [
    "ALONE",
    "ERROR_HISTORY",
    "ERROR_Z",
    "NEAR_DEADLINE",
    "OVERLOAD",
    "RATE",
    "SERVED_BY_OTHERS",
    "TROUBLE_WEIGHT",
    "CapacityFeedback",
    "ErrorShare",
    "Seat",
    "Signal",
]

#: A call that held its slot for this share of its deadline or more came near it: as much a
#: sign of trouble, for the judging of another client's timeout, as a timeout itself.
NEAR_DEADLINE = 0.5
#: A timeout is its caller's own once the other clients' calls that finished meanwhile sum to
#: the calls in flight at its start, and at least this much (each served well within its
#: deadline +1, each in trouble -TROUBLE_WEIGHT).
SERVED_BY_OTHERS = 4
#: What one of the other clients' calls in trouble takes away: the tool serves "the bulk" of
#: them only if four are served well for each in trouble.
TROUBLE_WEIGHT = 4
#: The signals besides a latency sample (False), a drop (True) and nothing (None): the call said
#: the tool is overloaded at the calls in flight at its start; an error of a call that ran alone.
OVERLOAD = "overload"
ALONE = "alone"
#: An overload error at a count of calls in flight the tool was lately seen serving: its limit
#: is a rate, not a count of calls (``_pacing.py``).
RATE = "rate"
Signal = bool | str | None
"""What ``CapacityFeedback.ended`` returns: False, True, ``OVERLOAD``, ``RATE``, ``ALONE`` or
None."""
#: The calls (by the calls in flight at their start) the error share is judged over: older ones
#: are scaled down once the count passes it, so a tool that changed is judged by what it does
#: now within a few hundred calls.
ERROR_HISTORY = 400
#: How sure the error share must be to rise with the calls in flight: a z-score of the
#: difference between the share at or above the failed call's count and below it. At 3.5, 0-3
#: of 400-980 errors that did not depend on the load read as overload per 20 s run (each costs
#: the top slots for a second: ``GradientLimit.on_overload``; ``benchmarks/error_sim.py``).
ERROR_Z = 3.5
#: Calls below the failed call's count the comparison needs, and at or above it.
ERROR_LOW_CALLS = 10


class ErrorShare:
    """The share of calls that failed, by the calls in flight at their start (see the module).
    ``ok(level)`` costs a list index; ``rising(level)`` (a failure) sums the levels. ``served``,
    the calls served by level, only ever grows in place: a caller may keep it and count into it
    (``CapacityFeedback`` does, for every call served), calling ``ok`` past its end."""

    __slots__ = ("_down_at", "_errors", "served")

    def __init__(self) -> None:
        self.served: list[float] = [0.0] * 16  # indexed by the calls in flight at the start
        self._errors: list[float] = [0.0] * 16
        self._down_at = -1.0  # the calls served when one failed alone (-1: none since)

    def failed_alone(self) -> None:
        """A call failed with nothing else in flight: until a call is served again, the tool is
        taken as down, and its failures are not counted (``down``)."""
        self._down_at = sum(self.served)

    def down(self) -> bool:
        """Whether no call was served since one failed alone. A backend that is down fails
        every call; counted, its failures would weigh for hundreds of calls after it is back,
        and hide a pool's failures above its size behind a share as high at every count."""
        return self._down_at >= 0.0 and self._down_at == sum(self.served)

    def ok(self, level: int) -> None:
        try:
            self.served[level] += 1.0
        except IndexError:
            self._grow(level)
            self.served[level] += 1.0

    def top_served(self) -> int:
        """The most calls in flight at the start of a call served (of those still counted)."""
        served = self.served
        return next((level for level in range(len(served) - 1, 0, -1) if served[level]), 0)

    def _grow(self, level: int) -> None:
        more = [0.0] * (level + 1 - len(self.served))
        self.served.extend(more)
        self._errors.extend(more)

    def rising(self, level: int, unfinished: int = 0) -> bool:
        """Count a failure of a call that started with ``level`` calls in flight; True when the
        error share is clearly higher from that count up than below it. ``unfinished``: the
        calls in flight now, counted as not failed from that count up (see the module)."""
        if level >= len(self.served):
            self._grow(level)
        ok, errors = self.served, self._errors
        errors[level] += 1.0
        low_ok, low_errors = sum(ok[:level]), sum(errors[:level])
        high_ok, high_errors = sum(ok[level:]), sum(errors[level:])
        total = low_ok + low_errors + high_ok + high_errors
        if total > ERROR_HISTORY:  # the older calls count less (all alike: no timestamps kept)
            scale = ERROR_HISTORY / total
            for counts in (ok, errors):
                for i, count in enumerate(counts):
                    counts[i] = count * scale
        low = low_ok + low_errors
        high = high_ok + high_errors + unfinished
        if low < ERROR_LOW_CALLS:
            return False  # nothing to compare with: no calls seen with fewer in flight
        share = (low_errors + high_errors) / (low + high)
        if share >= 1.0:
            return False  # every call fails, whatever the load
        spread = math.sqrt(share * (1.0 - share) * (1.0 / low + 1.0 / high))
        return high_errors / high - low_errors / low >= ERROR_Z * spread


class _Client:
    """One client's calls holding a slot, and the sum (as in the module) of its finished ones."""

    __slots__ = ("holding", "key", "score")

    def __init__(self, key: str | None) -> None:
        self.key = key
        self.holding = 0
        self.score = 0


Seat = tuple[_Client, int, int]
"""A call's place in the feedback from admission to its end: its client's record, the sum of
the other clients' finished calls when it took its slot, and the calls then holding a slot,
itself included, as counted from the tool's first error on (0: not counted)."""


class CapacityFeedback:
    """Turns each finished call of one guard into what its adaptive limit learns (see the
    module): ``seat(client)`` as a call takes its slot, ``ended(seat, ...)`` as it gives it back.
    ``queued_by_others(client)``: how many calls of other clients wait for a slot now (asked
    only of a timeout); ``served_at_once()``: the most calls the limit lately saw served at once
    (``GradientLimit.served_at_once``, the one record of it; without one, 1: only the count in
    flight of the calls served tells a rate-shaped error), asked only of an overload error.

    What only an overload error reads (the calls served for a pacer, the sightings of the shape
    test) is kept from a tool's first overload error on: a tool that never raises one pays
    nothing for it on the calls it serves. The first error's shape is told by what is kept for
    every call anyway: the limit's sightings, and the calls served by their count in flight
    (``ErrorShare``; ever, not lately: lower fidelity, for one error).
    """

    __slots__ = (
        "_at_once",
        "_at_once_before",
        "_ceiling_end",
        "_clients",
        "_counting",
        "_errors",
        "_holding",
        "_idle",
        "_last_drop",
        "_period_end",
        "_queued_by_others",
        "_score",
        "_served",
        "_served_at_once",
        "_served_before",
        "_served_now",
        "_served_top",
        "_served_top_before",
        "_started",
        "_watching",
        "served",
        "served_time",
    )

    def __init__(
        self,
        queued_by_others: Callable[[str | None], int],
        served_at_once: Callable[[], int] | None = None,
    ) -> None:
        self._queued_by_others = queued_by_others
        self._served_at_once = served_at_once
        self._clients: dict[str | None, _Client] = {}
        self._holding = 0  # calls holding a slot now, as counted (``_counting``)
        self._score = 0  # every client's finished calls summed as in the module
        self._last_drop = -math.inf  # when the last drop was signalled
        # The record of the last client whose calls all ended, kept (as new) for its next
        # call: a client without a call in flight is forgotten, and on a tool serving one
        # call at a time that is every call, so each would otherwise make a record anew.
        self._idle: _Client | None = None
        self._errors = ErrorShare()
        self._served = self._errors.served  # counted into for every call served (``ended``)
        # The calls holding a slot now, by the calls holding one when each took it (itself
        # included): those an error's judgement counts as not failed (``ErrorShare.rising``).
        # Counted from the first error on only: a tool that never fails pays nothing for it.
        self._counting = False
        self._started: list[int] = [0] * 17
        # From the first overload error on (``_watching``), and only then: the calls served and
        # their holds summed (a pacer reads the rate they are served at and the slots that rate
        # needs: ``_pacing.py``), counters that only grow; and, in the current period of
        # AT_ONCE_MEMORY / 2 seconds (until ``_period_end``) and in the one before, whether a
        # call was served, and the most calls in flight at the start of a call served since the
        # last overload error that set a ceiling (one that started after that error ended): a
        # tool that serves calls at a count it refused at is not full at that count.
        self._watching = False
        self.served = 0
        self.served_time = 0.0
        self._period_end = -math.inf
        self._served_now = self._served_before = False
        self._served_top = self._served_top_before = 0
        self._ceiling_end = -math.inf
        # The limit's figure of calls served at once as read at each overload error, the most
        # in the current period and in the one before: its record spans its last samples (a
        # few tenths of a second of a busy tool), a sighting stands as evidence for 1-2 s.
        self._at_once = self._at_once_before = 0

    @property
    def clients(self) -> int:
        """Clients with a call holding a slot now (the records kept, less the idle one)."""
        return len(self._clients) - (self._idle is not None)

    def seat(self, client: str | None) -> Seat:
        """A call of ``client`` (None: without a key) took its slot."""
        record = self._clients.get(client)
        if record is None:
            record = self._clients[client] = _Client(client)
        elif not record.holding:  # the idle record: as new (its score went with its calls)
            record.score = 0
            self._idle = None
        record.holding += 1
        if not self._counting:  # (no error yet: nothing reads the calls in flight by count)
            return record, self._score - record.score, 0
        started = self._started
        self._holding = level = self._holding + 1
        try:
            started[level] += 1
        except IndexError:
            started.extend([0] * (level + 1 - len(started)))
            started[level] += 1
        return record, self._score - record.score, level

    def ended(
        self,
        seat: Seat,
        start: float,
        held: float,
        inflight: int,
        timeout: float | None,
        outcome: str,
        overload: bool = False,
        reached_tool: bool = True,
    ) -> Signal:
        """The call seated at ``seat`` gave its slot back: it took it at ``start`` with
        ``inflight`` calls holding one, itself included, and held it ``held`` seconds;
        ``timeout``: its deadline, if any; ``outcome``: how it ended (``ok``, ``timeout``: the
        deadline ended it, ``error``, ``internal_error``, ``cancelled``); ``overload``: it
        said the tool is overloaded (a named error, an envelope); ``reached_tool``: False when
        its arguments failed validation. Returns what the limit learns: ``False`` a latency
        sample, ``True`` a drop, ``OVERLOAD``, ``RATE`` or ``ALONE`` (see the module), ``None``
        nothing."""
        record, others_then, level = seat
        record.holding -= 1
        if level:  # counted by the calls in flight at its start (``_counting``)
            self._holding -= 1
            self._started[level] -= 1
        if not record.holding:  # kept idle, in place of the one before (forgotten)
            idle = self._idle
            if idle is not None:
                del self._clients[idle.key]
            self._idle = record
        if not reached_tool:
            return None
        if outcome == "ok" and (timeout is None or held < NEAR_DEADLINE * timeout):
            record.score += 1
            self._score += 1
            if self._watching:  # (only once the tool raised an overload error)
                self._watched(start, held, inflight)
            try:  # ErrorShare.ok, inlined: every call
                self._served[inflight] += 1.0
            except IndexError:
                self._errors.ok(inflight)
            return False
        return self._judged(record, others_then, start, held, inflight, timeout, outcome, overload)

    def _watched(self, start: float, held: float, inflight: int) -> None:
        """A call served well, counted for what only overload errors read (see the class)."""
        self.served += 1
        self.served_time += held
        end = start + held
        if end >= self._period_end:
            self._next_period(end)
        self._served_now = True
        if inflight > self._served_top and start >= self._ceiling_end:
            self._served_top = inflight

    def _judged(
        self,
        record: _Client,
        others_then: int,
        start: float,
        held: float,
        inflight: int,
        timeout: float | None,
        outcome: str,
        overload: bool,
    ) -> Signal:
        """``ended`` for a call that did not answer ``ok`` well within its deadline."""
        timed_out = outcome == "timeout"
        if not timed_out and (timeout is None or held < NEAR_DEADLINE * timeout):
            record.score += 1  # answered in time, if not well: the tool served it
            self._score += 1
        else:
            served_meanwhile = self._score - record.score - others_then
            record.score -= TROUBLE_WEIGHT
            self._score -= TROUBLE_WEIGHT
            if timed_out:
                if served_meanwhile >= max(SERVED_BY_OTHERS, inflight):
                    return None  # the tool served the others meanwhile: the caller's own (rule 1)
                if start < self._last_drop and self._queued_by_others(record.key):
                    return None  # cut once already for the calls stuck with it (rule 2)
                self._last_drop = start + held
                return True
        if outcome == "ok":
            if self._watching:
                self.served += 1
                self.served_time += held
            self._errors.ok(inflight)
            return False  # near its deadline: a slow sample, and a sign for others' timeouts
        if outcome == "cancelled":
            return None
        errors = self._errors
        # Counted, named or not, unless nothing was served since a call failed alone.
        # The calls in flight now that started with as many or more have not failed (yet):
        # counted from a tool's first error on (its calls in flight before it, not at all).
        self._counting = True
        unfinished = sum(self._started[inflight:])
        rising = False if errors.down() else errors.rising(inflight, unfinished)
        if inflight <= 1:
            errors.failed_alone()
            return ALONE
        if not (overload or rising):
            return None
        # Rate-shaped (``_pacing.py``): the tool was seen serving this many calls at once
        # lately, or served a call that started with as many in flight since its last ceiling.
        at_once, top = self._seen(start + held)
        if top >= inflight or at_once >= inflight:
            return RATE
        self._served_top = self._served_top_before = 0  # its ceiling is tested from its end
        self._ceiling_end = start + held
        return OVERLOAD

    def _next_period(self, now: float) -> None:
        """The sightings of calls served start a new period at ``now``; the last one's are kept
        as the one before (none, if it ended a period ago or more)."""
        recent = now < self._period_end + AT_ONCE_MEMORY / 2
        self._served_before = self._served_now and recent
        self._served_top_before = self._served_top if recent else 0
        self._at_once_before = self._at_once if recent else 0
        self._served_now = False
        self._served_top = self._at_once = 0
        self._period_end = now + AT_ONCE_MEMORY / 2

    def _seen(self, now: float) -> tuple[int, int]:
        """For an overload error ending at ``now``: the most calls the tool was lately seen
        serving at once (the limit's record, as read at the overload errors of the last
        ``AT_ONCE_MEMORY`` seconds; not read when it served no call within them, however recent
        its last sightings by their count), and the most calls in flight at the start of a call
        served since the last ceiling, within the last ``AT_ONCE_MEMORY`` seconds. Older
        sightings are forgotten, so that a tool that lost capacity is judged by what it serves
        now. The first error's: every call served so far (see the class); from it on, the
        served calls are watched."""
        if not self._watching:
            self._watching = True
            self._period_end = now + AT_ONCE_MEMORY / 2
            # The calls served before it stand for the first period's.
            self._served_now = True
            self._served_top = top = self._errors.top_served()
            self._at_once = at_once = self._limit_at_once()
            return at_once, top
        if now >= self._period_end:
            self._next_period(now)
        if self._served_now or self._served_before:  # (else its sightings are old: not read)
            reading = self._limit_at_once()
            if reading > self._at_once:
                self._at_once = reading
        return (
            max(self._at_once, self._at_once_before, 1),
            max(self._served_top, self._served_top_before),
        )

    def _limit_at_once(self) -> int:
        source = self._served_at_once
        if source is None:
            return 1
        try:
            at_once = source()
        except Exception:  # a limit's bug never changes a call's answer (it is told elsewhere)
            return 1
        return at_once if isinstance(at_once, int) and at_once >= 1 else 1
