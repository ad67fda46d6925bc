"""What a finished call tells an adaptive limit: the one place where a call's outcome becomes the
signal the limit learns from (a latency sample, a drop, or nothing).

A limit shrinks on what it is fed, so a signal must be about the tool's capacity, not about
one caller's arguments:

- **A call whose arguments failed validation** never reached the tool: nothing (its hold of a
  few microseconds would read as a tool that answers at once).
- **A call ended by its deadline** is a drop (GradientLimit halves the limit) unless the tool
  kept serving the other clients while it was stuck: then the timeout is its caller's own (a
  fetch tool handed a tarpit URL) and the limit learns nothing from it. "Kept serving" is
  counted over the calls of *other* clients that finished while the timed-out call held its
  slot: each ended well within its deadline counts 1, each that timed out or came near it
  (``NEAR_DEADLINE``) counts ``-TROUBLE_WEIGHT``, and the timeout is discounted when the sum
  reaches ``SERVED_BY_OTHERS``. So a tool that stalls for everyone, or whose other clients'
  calls time out too, still halves the limit at the first timeout; three clients whose calls
  stall among hundreds of fast ones do not (they are each other's "other clients", outweighed).
- **Any other call** is a latency sample.

Clients are told apart by the client key the guard already has for fair shares (calls without
one are one anonymous client), so on a tool with one client every timeout is a drop, as it was
before the rule. A client's record lives while it has a call holding a slot, so the records
kept are at most the calls in flight, however many keys come and go; a record holds two numbers,
never the key's text beyond the dictionary's reference to the caller's own string.
"""

from __future__ import annotations

__all__ = ["NEAR_DEADLINE", "SERVED_BY_OTHERS", "TROUBLE_WEIGHT", "CapacityFeedback", "Seat"]

#: A call that held its slot for this share of its deadline or more came near it: as much a
#: sign of trouble, for the judging of another client's timeout, as a timeout itself.
NEAR_DEADLINE = 0.5
#: A timeout is discounted once the other clients' calls that finished meanwhile sum to this
#: much (each served well within its deadline +1, each in trouble -TROUBLE_WEIGHT).
SERVED_BY_OTHERS = 4
#: What one of the other clients' calls in trouble takes away: the tool serves "the bulk" of
#: them only if four are served well for each timing out.
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
    """

    __slots__ = ("_clients", "_score")

    def __init__(self) -> None:
        self._clients: dict[str | None, _Client] = {}
        self._score = 0  # every client's finished calls summed as in the module

    @property
    def clients(self) -> int:
        """Clients with a call holding a slot now (the records kept)."""
        return len(self._clients)

    def seat(self, client: str | None) -> Seat:
        """A call of ``client`` (None: without a key) took its slot."""
        record = self._clients.get(client)
        if record is None:
            record = self._clients[client] = _Client(client)
        record.holding += 1
        return record, self._score - record.score

    def ended(
        self,
        seat: Seat,
        held: float,
        timeout: float | None,
        timed_out: bool,
        reached_tool: bool = True,
    ) -> bool | None:
        """The call seated at ``seat`` gave its slot back after ``held`` seconds (``timeout``:
        its deadline, if any; ``timed_out``: the deadline ended it; ``reached_tool``: False
        when its arguments failed validation). Returns what the limit learns: ``True`` a drop,
        ``False`` a latency sample, ``None`` nothing."""
        record, others_then = seat
        record.holding -= 1
        if not record.holding:
            del self._clients[record.key]
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
        return served_meanwhile < SERVED_BY_OTHERS  # else the caller's own: nothing learnt
