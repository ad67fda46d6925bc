"""What a finished call tells an adaptive limit: the one place where a call's outcome becomes the
signal the limit learns from (a latency sample, a drop, or nothing).

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
- **Any other call** is a latency sample.

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

__all__ = ["NEAR_DEADLINE", "SERVED_BY_OTHERS", "TROUBLE_WEIGHT", "CapacityFeedback", "Seat"]

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


class _Client:
    """One client's calls holding a slot, and the sum (as in the module) of its finished ones."""

    __slots__ = ("holding", "key", "score")

    def __init__(self, key: str | None) -> None:
        self.key = key
        self.holding = 0
        self.score = 0


Seat = tuple[_Client, int]
"""A call's place in the feedback from admission to its end: its client's record, and the sum of
the other clients' finished calls when it took its slot."""


class CapacityFeedback:
    """Turns each finished call of one guard into what its adaptive limit learns (see the
    module): ``seat(client)`` as a call takes its slot, ``ended(seat, ...)`` as it gives it back.
    ``queued_by_others(client)``: how many calls of other clients wait for a slot now (asked
    only of a timeout).
    """

    __slots__ = ("_clients", "_idle", "_last_drop", "_queued_by_others", "_score")

    def __init__(self, queued_by_others: Callable[[str | None], int]) -> None:
        self._queued_by_others = queued_by_others
        self._clients: dict[str | None, _Client] = {}
        self._score = 0  # every client's finished calls summed as in the module
        self._last_drop = -math.inf  # when the last drop was signalled
        # The record of the last client whose calls all ended, kept (as new) for its next
        # call: a client without a call in flight is forgotten, and on a tool serving one
        # call at a time that is every call, so each would otherwise make a record anew.
        self._idle: _Client | None = None

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
        return record, self._score - record.score

    def ended(
        self,
        seat: Seat,
        start: float,
        held: float,
        inflight: int,
        timeout: float | None,
        timed_out: bool,
        reached_tool: bool = True,
    ) -> bool | None:
        """The call seated at ``seat`` gave its slot back: it took it at ``start`` with
        ``inflight`` calls holding one, itself included, and held it ``held`` seconds;
        ``timeout``: its deadline, if any; ``timed_out``: the deadline ended it;
        ``reached_tool``: False when its arguments failed validation. Returns what the limit
        learns: ``True`` a drop, ``False`` a latency sample, ``None`` nothing."""
        record, others_then = seat
        record.holding -= 1
        if not record.holding:  # kept idle, in place of the one before (forgotten)
            idle = self._idle
            if idle is not None:
                del self._clients[idle.key]
            self._idle = record
        if not reached_tool:
            return None
        if not timed_out and (timeout is None or held < NEAR_DEADLINE * timeout):
            record.score += 1
            self._score += 1
            return False
        served_meanwhile = self._score - record.score - others_then
        record.score -= TROUBLE_WEIGHT
        self._score -= TROUBLE_WEIGHT
        if not timed_out:
            return False  # near its deadline: a slow sample, and a sign for others' timeouts
        if served_meanwhile >= max(SERVED_BY_OTHERS, inflight):
            return None  # the tool served the others meanwhile: the caller's own (rule 1)
        if start < self._last_drop and self._queued_by_others(record.key):
            return None  # cut once already for the calls stuck with it (rule 2)
        self._last_drop = start + held
        return True
