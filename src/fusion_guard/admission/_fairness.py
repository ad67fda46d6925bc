"""Fair shares across client keys: who of the waiting clients is served next, who is displaced.

Part of the queue discipline (see ``_discipline.py``): the :class:`~fusion_guard.ConcurrencyGuard`
owns one :class:`FairQueue` once calls carry client keys, and asks it who gets a released slot
and whose queued call gives way when the queue is full. The guard still enforces (slots,
waiters, timers); this module only keeps the per-client picture and decides.

The rules, max-min fairness on slots:

- **Served in turn.** Clients with calls waiting form a ring; each hand-off serves the client at
  the head (its oldest call, or its newest under adaptive LIFO) and moves it to the back. A
  client that starts waiting goes to the back too, unless it is a newcomer (no slot held, none
  served lately) lighter than the client at the head: then it goes to the front, so a polite
  client's first call takes the next opening however many calls a greedy one has queued. Once
  served, a client waits its turn like the others: no client is served twice while another
  waits (within the memory of service, below). Work-conserving: a client alone is served by
  every release, and a free slot is taken by whoever arrives.
- **The heaviest gives way.** A client's *weight* is its calls waiting plus the calls it was
  served from the queue lately (each counted whole when served, then halved every
  ``DECAY_EVERY`` seconds). When the queue is full, a newcomer whose client weighs more than one
  call less than the heaviest waiting client takes the place of that client's newest call,
  which is refused (``fair_share``); a client never displaces its own calls, and the call of
  slack keeps two clients from displacing each other back and forth (the place moves one call
  of weight from one to the other). The memory of service matters when clients outnumber the
  queue's places: a queue of 8 shared by 100 clients holds one call of 8 of them, and without
  it the places, and so the service, would go to whoever asks most often.
- Calls without a client key form one client together (``anonymous``). Its running calls are not
  counted one by one (an unkeyed call pays nothing for fairness while a slot is free): they are
  the guard's running calls less the keyed ones.

Every step is O(1): the ring is an ``OrderedDict``, and the heaviest client is found through
buckets of clients by queued count (a count moves by one at a time, so the top bucket does too).
A client is known by a record of its running calls (``Client``) and, while it has calls waiting,
a record of them. The waiting record goes the moment its last call leaves. The running record
outlives its last call, so that a client calling one call at a time (the uncontended case)
neither makes nor drops one per call: its end is a decrement. The idle ones are dropped when
the records reach ``PRUNE_FROM`` more than twice the clients with calls running, so memory stays
bounded by the calls in the guard however many distinct keys arrive. The count of
calls served from the queue lately is kept a little longer (until halving brings it to zero),
and at most ``MAX_REMEMBERED`` of them (past that they halve at once): it grows with the calls
the tool serves, never with the calls it refuses. Keys are kept only as dictionary keys: they never
reach an envelope, a metric or a log line.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

from .._priority import DEFAULT_RANK

__all__ = ["DECAY_EVERY", "MAX_REMEMBERED", "PRUNE_FROM", "Client", "FairQueue", "Tenant"]

#: A call's weight in the integer units weights are kept in (a served call's, halved, keeps
#: fractions of a call this way: fine enough to tell apart clients served 1.5 and 2 calls).
CALL = 16
#: Seconds between two halvings of the clients' counts of calls served from the queue.
DECAY_EVERY = 1.0
#: Clients whose recent service is remembered at most; past it the counts halve early.
MAX_REMEMBERED = 10_000
#: Clients' records of running calls kept, beyond twice those with calls running, before the
#: idle ones are dropped.
PRUNE_FROM = 1024

WaiterT = TypeVar("WaiterT")


class Client:
    """One client's calls running now (``FairQueue.client``)."""

    __slots__ = ("running",)

    def __init__(self) -> None:
        self.running = 0


class Tenant(Generic[WaiterT]):
    """One client's waiting calls of one priority (``rank``, see ``_levels.py``), oldest first
    (``key`` None: the calls without a key)."""

    __slots__ = ("key", "rank", "waiters")

    def __init__(self, key: str | None, rank: int = DEFAULT_RANK) -> None:
        self.key = key
        self.rank = rank
        self.waiters: OrderedDict[WaiterT, None] = OrderedDict()

    def __repr__(self) -> str:  # never the key: it is the caller's identity
        return f"Tenant(queued={len(self.waiters)})"


class FairQueue(Generic[WaiterT]):
    """The per-client picture of one guard's calls (see the module). ``serves_in_turn``: the
    hand-off order and the displacement are fair; without it the guard keeps its global order
    and only counts calls per client (for ``max_active_per_client``).

    Under priorities (``_levels.py``) each priority has a queue of its own, ``rank``, whose
    waiting clients take turns among themselves; the clients' running calls are counted once,
    by the guard's first queue (``counts``: the queue that counts them, None for itself)."""

    __slots__ = ("_buckets", "_counts", "_decay_due", "_heaviest", "_prune_at", "_ring",
                 "_served", "_waiting", "anonymous", "keyed_active", "rank", "records",
                 "serves_in_turn")  # fmt: skip

    def __init__(
        self,
        *,
        serves_in_turn: bool,
        now: float,
        rank: int = DEFAULT_RANK,
        counts: FairQueue[WaiterT] | None = None,
    ) -> None:
        self.serves_in_turn = serves_in_turn
        self.rank = rank
        self._counts = self if counts is None else counts
        self.anonymous: Tenant[WaiterT] = Tenant(None, rank)
        #: Clients' records of their running calls, by key (``client``), and the calls' sum.
        self.records: dict[str, Client] = {}
        self._prune_at = PRUNE_FROM
        self.keyed_active = 0
        # Clients with calls waiting, by key.
        self._waiting: dict[str, Tenant[WaiterT]] = {}
        # Clients with calls waiting, in the order they are served.
        self._ring: OrderedDict[Tenant[WaiterT], None] = OrderedDict()
        # Calls served from the queue lately, by client (halved every DECAY_EVERY seconds).
        self._served: dict[str | None, int] = {}
        self._decay_due = now + DECAY_EVERY
        # Waiting clients by weight (waiting + served lately, >= 1), and the largest weight.
        self._buckets: dict[int, dict[Tenant[WaiterT], None]] = {}
        self._heaviest = 0

    # -- clients ----------------------------------------------------------------------------------

    def client(self, key: str) -> Client:
        """The record of client ``key``'s running calls, made if it has none. Made records are
        kept past their last call (a client calling one call at a time would otherwise make
        and drop one per call), until they pile up: see ``_prune``."""
        record = self.records.get(key)
        if record is None:
            if len(self.records) >= self._prune_at:
                self._prune()
            record = self.records[key] = Client()
        return record

    def _prune(self) -> None:
        """Drop the records of clients with no call running, and prune next once ``PRUNE_FROM``
        more records than twice those left: a pass over at most 2 records per record made since
        the last (amortized O(1), even with many clients running), and at most ``PRUNE_FROM``
        records more than twice the clients with calls running, however many keys arrive."""
        self.records = {key: record for key, record in self.records.items() if record.running}
        self._prune_at = PRUNE_FROM + 2 * len(self.records)

    def started(self, key: str | None) -> None:
        """A call of client ``key`` got a slot (the keyless client's are not counted one by
        one: see ``active``)."""
        if key is not None:
            self.client(key).running += 1
            self.keyed_active += 1

    def ended(self, key: str | None) -> None:
        """A call of client ``key`` gave its slot back (``Slot._end`` and ``Slot.__aexit__``
        inline it: the keyed hot path, where the call cost 5 %)."""
        if key is not None:
            self.records[key].running -= 1
            self.keyed_active -= 1

    def active(self, key: str | None, running: int) -> int:
        """Calls of client ``key`` running now, the guard running ``running`` in all."""
        if key is None:
            return running - self.keyed_active
        record = self.records.get(key)
        return 0 if record is None else record.running

    def queued(self, key: str | None) -> int:
        """Calls of client ``key`` waiting now."""
        tenant = self.anonymous if key is None else self._waiting.get(key)
        return 0 if tenant is None else len(tenant.waiters)

    def tenant(self, key: str | None) -> Tenant[WaiterT]:
        """The record of client ``key``'s waiting calls, made for a call about to wait; drop it
        with ``forget_if_idle`` should that call be refused instead."""
        if key is None:
            return self.anonymous
        tenant = self._waiting.get(key)
        if tenant is None:
            tenant = self._waiting[key] = Tenant(key, self.rank)
        return tenant

    def forget_if_idle(self, tenant: Tenant[WaiterT]) -> None:
        """Drop ``tenant``'s record if none of its calls waits (and it is still the key's
        record: a refused caller's may have been replaced by a newer call's meanwhile)."""
        key = tenant.key
        if key is not None and not tenant.waiters and self._waiting.get(key) is tenant:
            del self._waiting[key]

    @property
    def clients(self) -> int:
        """Client keys with calls running or waiting (O(records): for statistics)."""
        running = {key for key, record in self.records.items() if record.running}
        return len(running | self._waiting.keys())

    # -- the queue ---------------------------------------------------------------------------------

    def weight(self, tenant: Tenant[WaiterT]) -> int:
        """``tenant``'s calls waiting plus its calls served from the queue lately (in units of
        ``CALL``)."""
        return CALL * len(tenant.waiters) + self._served.get(tenant.key, 0)

    def push(self, tenant: Tenant[WaiterT], waiter: WaiterT, running: int, now: float) -> None:
        """``waiter`` of ``tenant`` starts waiting (the guard running ``running`` calls, at
        ``now`` on its clock)."""
        if now >= self._decay_due:
            self._decay(now)
        waiters = tenant.waiters
        before = self.weight(tenant) if waiters else 0
        waiters[waiter] = None
        self._moved(tenant, before, self.weight(tenant))
        if len(waiters) == 1:
            if tenant.key is not None:
                # The caller took its record before its arrival re-judged the queue, which may
                # have shed that record's last waiter and forgotten it: one record per key.
                self._waiting[tenant.key] = tenant
            ring = self._ring
            ring[tenant] = None
            if (
                not self._counts.active(tenant.key, running)
                and tenant.key not in self._served
                and self.weight(next(iter(ring))) > CALL
            ):
                ring.move_to_end(tenant, last=False)  # a newcomer lighter than the head

    def remove(self, tenant: Tenant[WaiterT], waiter: WaiterT, *, served: bool = False) -> None:
        """``waiter`` leaves ``tenant``'s queue: unserved (cancelled, expired, refused), or
        ``served`` (handed a slot in the guard's own order: counted as started)."""
        before = self.weight(tenant)
        del tenant.waiters[waiter]
        if served:
            self._count_served(tenant.key)
        self._left(tenant, before)
        if len(self._served) > MAX_REMEMBERED:
            self._forget_service()

    def serve(self, newest: bool) -> WaiterT:
        """The call a released slot goes to: the oldest (``newest``: the newest) waiting call of
        the client next in turn, taken out of the queue and counted as started."""
        tenant = next(iter(self._ring))
        before = self.weight(tenant)
        waiter, _ = tenant.waiters.popitem(last=newest)
        self._count_served(tenant.key)
        if tenant.waiters:
            self._ring.move_to_end(tenant)
        self._left(tenant, before)
        if len(self._served) > MAX_REMEMBERED:
            self._forget_service()
        return waiter

    def next_in_turn(self) -> Tenant[WaiterT]:
        """The waiting client ``serve`` would serve now (some wait)."""
        return next(iter(self._ring))

    def took_free_slot(self, key: str | None, now: float) -> None:
        """A call of client ``key`` took a free slot at arrival, counted as served lately (it
        is counted as started by the guard's first queue). Under priorities only, for the calls
        below ``interactive`` (``Levels.started``): the slots their share lets them take free up
        between the hand-offs to the calls above, and whoever arrives next takes each, most
        often the heaviest client; uncounted, that client looked light, displaced the lighter
        one's waiting calls, and a background client of a tenth of the demand got 0.67-0.77 of
        its fair share at 3x capacity."""
        if now >= self._decay_due:
            self._decay(now)
        tenant = self.anonymous if key is None else self._waiting.get(key)
        waiting = tenant is not None and bool(tenant.waiters)
        before = self.weight(tenant) if waiting else 0  # type: ignore[arg-type]  # waiting
        served = self._served
        served[key] = served.get(key, 0) + CALL
        if waiting:
            self._moved(tenant, before, self.weight(tenant))  # type: ignore[arg-type]  # waiting
        if len(served) > MAX_REMEMBERED:
            self._forget_service()

    def _count_served(self, key: str | None) -> None:
        self._counts.started(key)
        served = self._served
        served[key] = served.get(key, 0) + CALL

    def _left(self, tenant: Tenant[WaiterT], before: int) -> None:
        """One of ``tenant``'s calls left the queue (its weight was ``before``)."""
        if tenant.waiters:
            self._moved(tenant, before, self.weight(tenant))
        else:
            self._moved(tenant, before, 0)
            del self._ring[tenant]
            self.forget_if_idle(tenant)

    def displaced_by(
        self, tenant: Tenant[WaiterT], now: float
    ) -> tuple[Tenant[WaiterT], WaiterT] | None:
        """At a full queue (at ``now``, on the guard's clock): the heaviest waiting client's
        newest call, which gives its place to a call of ``tenant`` (then taken out of the
        queue), or None when ``tenant`` does not weigh more than a call less."""
        if not self.serves_in_turn:
            return None
        if now >= self._decay_due:
            self._decay(now)
        if self.weight(tenant) + CALL >= self._heaviest:
            return None
        heaviest = next(iter(self._buckets[self._heaviest]))
        waiter = next(reversed(heaviest.waiters))
        self.remove(heaviest, waiter)
        return heaviest, waiter

    def owed(self, tenant: Tenant[WaiterT], now: float) -> bool:
        """Whether ``tenant`` weighs less than some client of this queue served lately, waiting
        or not (O(clients remembered): asked on a refusal's path only). No call of slack, unlike
        ``displaced_by``: nobody loses a place, so two clients cannot take it back and forth."""
        if not self.serves_in_turn:
            return False
        if now >= self._decay_due:
            self._decay(now)
        heaviest = max(self._heaviest, max(self._served.values(), default=0))
        return self.weight(tenant) < heaviest

    def last_served(self) -> WaiterT | None:
        """The waiting call to go last: the heaviest waiting client's newest (served last in
        turn when that client also has the most calls waiting, as a greedy one does), or None
        when nothing waits."""
        if not self._heaviest:
            return None
        return next(reversed(next(iter(self._buckets[self._heaviest])).waiters))

    @property
    def remembered(self) -> int:
        """Clients whose calls served lately are remembered (at most ``MAX_REMEMBERED``)."""
        return len(self._served)

    def _decay(self, now: float) -> None:
        """Halve the counts of calls served lately once per ``DECAY_EVERY`` passed."""
        self._halve(max(1, int((now - self._decay_due) // DECAY_EVERY) + 1))
        self._decay_due = now + DECAY_EVERY

    def _forget_service(self) -> None:
        """Too many clients remembered: halve until at most half of ``MAX_REMEMBERED`` are (a
        few O(clients) passes every few thousand clients served, amortized O(1))."""
        while len(self._served) > MAX_REMEMBERED // 2:
            self._halve(1)

    def _halve(self, times: int) -> None:
        """Halve the counts of calls served lately ``times`` times (dropping those at zero) and
        re-file the waiting clients by their new weights: O(clients remembered)."""
        served = ((key, count >> times) for key, count in self._served.items())
        self._served = {key: count for key, count in served if count}
        self._buckets.clear()
        self._heaviest = 0
        for tenant in self._ring:
            self._moved(tenant, 0, self.weight(tenant))

    def position(self, tenant: Tenant[WaiterT], queued: int, running: int) -> int:
        """Where a newcomer of ``tenant`` would stand among ``queued`` + 1 waiting calls, served
        in turn: first when its client holds nothing, otherwise after one call of each waiting
        client per call of its own ahead of it."""
        if not tenant.waiters and not self._counts.active(tenant.key, running):
            return 1
        ring = len(self._ring) + (not tenant.waiters)
        return min(queued + 1, (len(tenant.waiters) + 1) * ring)

    def _moved(self, tenant: Tenant[WaiterT], before: int, after: int) -> None:
        """``tenant``'s weight went from ``before`` to ``after`` (0: not waiting)."""
        if before == after:
            return
        buckets = self._buckets
        if before:
            bucket = buckets[before]
            del bucket[tenant]
            if not bucket:
                del buckets[before]
        if after:
            buckets.setdefault(after, {})[tenant] = None
            if after > self._heaviest:
                self._heaviest = after
        if self._heaviest not in buckets:  # the top emptied: O(weights of waiting clients)
            self._heaviest = max(buckets, default=0)
