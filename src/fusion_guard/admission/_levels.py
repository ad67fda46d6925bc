"""Priorities in the queue: who of the waiting calls is served first, who gives way.

Part of the queue discipline (see ``_discipline.py``), as fair shares are (``_fairness.py``).
A guard keeps no priorities until its first call whose priority is not the default
(``interactive``): until then its calls are all of one priority and it behaves, and costs, as
before. From then on the waiting calls of each priority (its *rank*: 0 for ``critical``, 3 for
``sheddable``) form a queue of their own, a ``FairQueue`` whose clients take turns among
themselves; the clients' running calls are still counted once, by the guard's first queue.

The rules:

- **Highest priority first.** A released slot goes to the highest priority with calls waiting
  (inside it: in turn between clients, or in arrival order with ``fair=False``; above
  ``background``, oldest first while clients are near even, below).
- **The lowest priority gives way.** At a full queue a newcomer of a higher priority than the
  lowest waiting takes the place of that priority's last call to be served (its heaviest
  client's newest); one of the same priority displaces as fair shares say; one of a lower
  priority is refused. ``critical`` calls are never displaced.
- **No waiting inside the tool below ``interactive``.** While a call above them waits or
  arrived within the last mean hold, a ``background`` or ``sheddable`` call takes a slot only
  while fewer calls hold one than the tool serves in parallel (the adaptive limit's
  ``parallelism``, whole; under a fixed limit, which estimates none, the limit): the slots an
  adaptive limit keeps above the parallelism, to find more, stay for the calls above, so a
  call a person is waiting for never queues *inside the tool* behind batch work, and every
  worker is still kept busy. Without it, at 3x capacity (80 % background) the slot above the
  tool's four workers was mostly a background call's, and an interactive call handed a slot
  then waited in the tool for the next worker too (``docs/priorities.md``).
- **Oldest first above ``background``, while clients are near even.** A slot handed to a
  ``critical`` or ``interactive`` call goes to the oldest call waiting at that priority, unless
  its client weighs more than ``TURNS_PAST`` times the client next in turn (and a call): then
  clients take turns, as fair shares say. Clients of like demand so are served in arrival
  order, a greedy one still waits its turn. Taking turns between three interactive clients of
  equal demand put a call behind others that arrived after it, whose own service could be long:
  at 3x capacity the interactive p99 was 1.30x on seeds 1-6 with turns, 1.26x oldest first (the
  miss on seed 2 with other service draws: 1.69x, 1.36x; ``docs/priorities-measured.md``).
- **A share for the lower priorities.** Likewise, a ``background`` or ``sheddable`` call may
  take a slot only while fewer than ``share`` of the slots (at least one) are held by such
  calls: the rest are kept for the calls above. A slot so kept is taken by the next
  higher-priority arrival; the lower calls waiting are handed one as calls end.
- **Fair below ``interactive`` too.** A call below ``interactive`` that takes a free slot counts
  as served lately in its priority's queue of clients (those slots free up between the hand-offs
  to the calls above, and the client that arrives most takes most of them), and a newcomer of a
  client lighter than another of its priority served lately is owed a place past the standing
  limit when that client has no call waiting to displace (``owed``).

Each step is O(1) in the calls waiting (O(priorities) at most: four).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Generic, Protocol, TypeVar

from .._priority import DEFAULT_RANK, PRIORITY_NAMES
from ._discipline import QueueDiscipline, whole_calls
from ._fairness import CALL, FairQueue, Tenant

__all__ = ["CAPPED_FROM", "TURNS_PAST", "Levels"]

#: The ranks from which calls hold at most a share of the slots (``background`` and below).
CAPPED_FROM = 2
#: Above ``background`` the oldest waiting call is served first unless its client weighs more
#: than this many times the client next in turn (and a call): then clients take turns. Not
#: tuned: 1.25 and 2 served seeds 1-6 at 3x identically (clients of equal demand never differ
#: so much; a client of ten times another's always does).
TURNS_PAST = 2.0


class _Queued(Protocol):
    """What the levels read of a waiter: its client's record (always kept under priorities)."""

    tenant: Any


WaiterT = TypeVar("WaiterT", bound=_Queued)


class _Slots(Protocol):
    """What the levels read of the guard they order: the calls holding a slot, and its
    discipline (the tool's parallelism, as the adaptive limit last estimated it)."""

    @property
    def active(self) -> int: ...

    @property
    def discipline(self) -> QueueDiscipline: ...


class Levels(Generic[WaiterT]):
    """The priorities of one guard's waiting calls (see the module). ``first``: the guard's
    queue of clients so far, which becomes the default priority's and keeps counting every
    client's running calls; ``share``: the share of the slots below-interactive calls may hold
    while calls above them wait or arrived lately; ``slots``: the guard's slots (its core)."""

    __slots__ = ("_first", "_order", "_queues", "_slots", "running", "seen", "share")

    def __init__(self, first: FairQueue[WaiterT], share: float, slots: _Slots) -> None:
        self._first = first
        self.share = share
        self._slots = slots
        ranks = len(PRIORITY_NAMES)
        # Each priority's queue of clients (made at its first waiting call), and its waiting
        # calls in arrival order (what ``fair=False`` serves by, and the count of each).
        self._queues: list[FairQueue[WaiterT] | None] = [None] * ranks
        self._queues[DEFAULT_RANK] = first
        self._order: list[OrderedDict[WaiterT, None]] = [OrderedDict() for _ in range(ranks)]
        #: Calls of each priority holding a slot (counted for the capped ranks only).
        self.running = [0] * ranks
        #: When a call of each priority last arrived (on the guard's clock).
        self.seen = [-float("inf")] * ranks

    # -- the queues --------------------------------------------------------------------------------

    def queue(self, rank: int, now: float) -> FairQueue[WaiterT]:
        """The queue of clients of priority ``rank``, made at its first waiting call."""
        queue = self._queues[rank]
        if queue is None:
            first = self._first
            queue = self._queues[rank] = FairQueue(
                serves_in_turn=first.serves_in_turn, now=now, rank=rank, counts=first
            )
        return queue

    def tenant(self, key: str | None, rank: int, now: float) -> Tenant[WaiterT]:
        """The record of client ``key``'s waiting calls of priority ``rank`` (see
        ``FairQueue.tenant``)."""
        return self.queue(rank, now).tenant(key)

    def forget_if_idle(self, tenant: Tenant[WaiterT]) -> None:
        queue = self._queues[tenant.rank]
        if queue is not None:
            queue.forget_if_idle(tenant)

    def adopt(self, waiter: WaiterT) -> None:
        """``waiter`` was queued (in its client's queue of the default priority) before the
        guard kept priorities: it keeps its place."""
        self._order[DEFAULT_RANK][waiter] = None

    def push(self, waiter: WaiterT, running: int, now: float) -> None:
        """``waiter`` starts waiting (its client's record says its priority)."""
        tenant: Tenant[WaiterT] = waiter.tenant  # kept
        self._order[tenant.rank][waiter] = None
        self.queue(tenant.rank, now).push(tenant, waiter, running, now)

    def remove(self, waiter: WaiterT) -> None:
        """``waiter`` leaves the queue unserved."""
        tenant: Tenant[WaiterT] = waiter.tenant  # kept
        del self._order[tenant.rank][waiter]
        self._queues[tenant.rank].remove(tenant, waiter)  # type: ignore[union-attr]  # made

    def waiting(self, rank: int) -> int:
        """Calls of priority ``rank`` waiting now."""
        return len(self._order[rank])

    def ahead(self, rank: int) -> int:
        """Calls waiting that are served before a newcomer of priority ``rank`` would be: those
        of its priority and above."""
        order = self._order
        return sum(len(order[above]) for above in range(rank + 1))

    def queued(self, key: str | None) -> int:
        """Calls of client ``key`` waiting now, at every priority."""
        return sum(queue.queued(key) for queue in self._queues if queue is not None)

    def _top(self) -> int:
        """The highest priority with calls waiting (some wait)."""
        order = self._order
        rank = 0
        while not order[rank]:
            rank += 1
        return rank

    def _bottom(self) -> int:
        """The lowest priority with calls waiting (some wait)."""
        order = self._order
        rank = len(order) - 1
        while not order[rank]:
            rank -= 1
        return rank

    # -- serving -----------------------------------------------------------------------------------

    def may_take(self, rank: int, slots: int, now: float, hold: float, others: int) -> bool:
        """Whether a call of priority ``rank`` may take a slot of ``slots`` while ``others``
        calls hold one: always from ``interactive`` up; below it while fewer calls hold a slot
        than the tool serves in parallel and the calls below ``interactive`` hold less than the
        share of the slots (together: a ``sheddable`` call never takes the place a waiting
        ``background`` one is kept from), or when no call above it waits or arrived within
        ``hold`` seconds."""
        if rank < CAPPED_FROM:
            return True
        running = self.running
        held = sum(running[CAPPED_FROM:])
        parallelism = self._slots.discipline.parallelism
        if held < max(1, int(self.share * slots)) and (
            parallelism is None or others < whole_calls(parallelism)
        ):
            return True
        order, seen = self._order, self.seen
        return not any(order[above] or now - seen[above] < hold for above in range(rank))

    def serve(self, newest: bool, slots: int, now: float, hold: float) -> WaiterT | None:
        """The waiting call a released slot goes to, taken out of the queue and counted as
        started; None when the only calls waiting must leave it to the calls above them
        (``may_take``)."""
        rank = self._top()
        # The slot to hand is still counted as held (``Core.hand_off``): the others hold one less.
        if not self.may_take(rank, slots, now, hold, self._slots.active - 1):
            return None
        queue: FairQueue[WaiterT] = self._queues[rank]  # type: ignore[assignment]  # made
        order = self._order[rank]
        if queue.serves_in_turn:
            oldest = next(iter(order))
            if rank < CAPPED_FROM and not newest and self._even(queue, oldest.tenant):
                # Served out of turn: the client next in turn keeps its place (served in turn,
                # it would be moved back, and so not serve a greedy one call after call).
                queue.remove(oldest.tenant, oldest, served=True)
                waiter = oldest
            else:
                waiter = queue.serve(newest)
            del order[waiter]
        else:  # the priority's own arrival order; the client's records follow
            waiter, _ = order.popitem(last=newest)
            queue.remove(waiter.tenant, waiter, served=True)  # kept
        if rank >= CAPPED_FROM:
            self.running[rank] += 1
        return waiter

    @staticmethod
    def _even(queue: FairQueue[WaiterT], tenant: Tenant[WaiterT]) -> bool:
        """Whether ``tenant``, whose call waited longest, is to be served out of turn: it is not
        the client next in turn (whose oldest call that is) and weighs no more than
        ``TURNS_PAST`` times it, and a call: near enough even to be served by arrival."""
        turn = queue.next_in_turn()
        return tenant is not turn and queue.weight(tenant) <= TURNS_PAST * queue.weight(turn) + CALL

    def yielded_to(self, rank: int) -> bool:
        """Whether calls below ``interactive`` that yield to a call of priority ``rank`` hold
        slots or wait (they give way to it: the overload is theirs)."""
        if rank >= CAPPED_FROM:
            return False
        order = self._order
        return any(self.running[CAPPED_FROM:]) or any(
            order[below] for below in range(CAPPED_FROM, len(order))
        )

    def started(self, rank: int, key: str | None, now: float) -> None:
        """A call of client ``key`` and priority ``rank`` took a free slot (at ``now``): below
        ``interactive``, counted as served lately in its priority's queue of clients
        (``FairQueue.took_free_slot``)."""
        if rank >= CAPPED_FROM:
            self.running[rank] += 1
            self.queue(rank, now).took_free_slot(key, now)

    def ended(self, rank: int) -> None:
        """A call of priority ``rank`` gave its slot back."""
        if rank >= CAPPED_FROM:
            self.running[rank] -= 1

    def last_served(self) -> WaiterT:
        """The waiting call to go last (some wait): of the lowest priority waiting, its last
        in turn (or its newest, with ``fair=False``)."""
        rank = self._bottom()
        queue: FairQueue[WaiterT] = self._queues[rank]  # type: ignore[assignment]  # made
        if queue.serves_in_turn:
            return queue.last_served()  # type: ignore[return-value]  # it has waiters
        return next(reversed(self._order[rank]))

    def position(self, tenant: Tenant[WaiterT], running: int) -> int:
        """Where a newcomer of ``tenant`` would stand in the queue: after every call of a higher
        priority, and among its own as fair shares place it."""
        rank = tenant.rank
        above = self.ahead(rank - 1) if rank else 0
        own = len(self._order[rank])
        queue = self._queues[rank]
        if queue is None or not queue.serves_in_turn:
            return above + own + 1
        return above + queue.position(tenant, own, running)

    def displaced_by(self, tenant: Tenant[WaiterT], now: float) -> tuple[WaiterT, bool] | None:
        """At a full queue: the waiting call that gives its place to a call of ``tenant``
        (taken out of the queue), and whether it gave way to a higher priority (else to a
        lighter client of its own); None when none does. ``critical`` calls never give way."""
        if not any(self._order):  # nothing waits: no place to give (a queue of none)
            return None
        bottom = self._bottom()
        rank = tenant.rank
        if bottom == 0 or bottom < rank:
            return None
        if bottom > rank:
            waiter = self.last_served()
            self.remove(waiter)
            return waiter, True
        displaced = self.queue(rank, now).displaced_by(tenant, now)
        if displaced is None:
            return None
        del self._order[rank][displaced[1]]
        return displaced[1], False

    def owed(self, tenant: Tenant[WaiterT], now: float) -> bool:
        """Whether a newcomer of ``tenant`` below ``interactive`` is owed a place beyond the
        standing limit: its client weighs less than another of its priority served lately
        (``FairQueue.owed``), which has no call waiting for it to displace."""
        return tenant.rank >= CAPPED_FROM and self.queue(tenant.rank, now).owed(tenant, now)

    def admitted_above(self, rank: int) -> str:
        """The admission level a refusal at priority ``rank`` reports: the priorities still let
        in, those above it (``"none"`` for a refused ``critical`` call)."""
        return ",".join(PRIORITY_NAMES[above].value for above in range(rank)) or "none"
