"""The state of one tool's admission: the only mutable state the admission parts share.

The parts (the slot, the waiting, the feedback, the refusals, and the limiter composing them:
``docs/admission-core.md`` draws them) each keep their own private state, and every figure two
of them need lives here, as plain attributes: the calls holding a slot, the limit in force, the
waiters, the counters, the clock, the observer. This module imports no part, so a part may use
it without making a circle; the parts reach each other only through the entry points the
limiter wires in here once (``wait``, ``arrive``, ``learn``, ``timed_out``), never by holding one
another.

Two moves are the core's own, because every part that frees a slot makes them the same way:
``release`` (hand the slot to the next waiter, or free it) and ``hand_off``.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Literal, Protocol

import anyio

from .._exceptions import HandlerTimeout
from .._observer import ToolObserver, bind_priorities
from ._discipline import QueueDiscipline
from ._fairness import FairQueue, Tenant
from ._feedback import CapacityFeedback, Seat
from ._levels import Levels
from ._service_time import ServiceTimeEstimator

__all__ = ["Core", "Learn", "Waiter"]

Learn = Callable[[Seat, float, float, int, float | None, str, bool, int, bool], None]
"""What a finished call teaches an adaptive limit: ``learn(seat, start, held, inflight, timeout,
outcome, overload, overtook, reached_tool)`` (``_learning.LimitLearning.learn``)."""


class Arrive(Protocol):
    """``arrive(client, rank)``: a keyed call of priority ``rank`` (default: the default one)
    arrives; True when it took a free slot."""

    def __call__(self, client: str | None, rank: int = ..., /) -> bool: ...


class WaitAsClient(Protocol):
    """``await wait_as_client(client, rank)``: queue a keyed call; the seconds waited."""

    def __call__(self, client: str | None, rank: int = ..., /) -> Coroutine[None, None, float]: ...


class Waiter:
    """One queued caller. ``granted`` is set when a release hands it the slot; ``left`` when the
    queue let it go unserved, ``"predicted"`` (a re-judgement), ``"expired"`` (its
    ``queue_timeout`` passed), ``"displaced"`` (a lighter client took its place) or
    ``"outranked"`` (a call of a higher priority took it): its own task then raises the
    refusal. On asyncio it waits on a bare future (``due``: its deadline in
    loop time, watched by one timer for the whole queue), elsewhere on an anyio ``Event`` under
    a cancel scope."""

    __slots__ = ("due", "event", "future", "granted", "left", "since", "tenant")

    def __init__(
        self,
        since: float,
        future: asyncio.Future[None] | None,
        due: float,
        tenant: Tenant[Waiter] | None,
    ) -> None:
        self.future = future
        self.event = None if future is not None else anyio.Event()
        self.granted = False
        self.left: Literal["predicted", "expired", "displaced", "outranked"] | None = None
        self.since = since
        self.due = due
        self.tenant = tenant  # its client's record, once clients' records are kept

    def wake(self) -> None:
        future = self.future
        if future is None:
            self.event.set()  # type: ignore[union-attr]  # one of the two is set
        elif not future.done():
            future.set_result(None)


class Core:
    """One tool's admission state (see the module). Attributes, not properties: the free path
    reads and writes them directly, at the cost of an attribute, never of a call."""

    # The parts' entry points, wired once by the limiter (see the module).
    wait: Callable[[Tenant[Waiter] | None], Coroutine[None, None, float]]
    """Queue for a slot (``_waiting.Waiting.wait``): the seconds waited, or ServerBusy."""
    arrive: Arrive
    """A keyed call's arrival (``_waiting.Waiting.arrive``): True when it took a free slot."""
    wait_as_client: WaitAsClient
    """Queue a keyed call (``_waiting.Waiting.wait_as_client``)."""
    timed_out: Callable[[float], HandlerTimeout]
    """The refusal of a body its deadline ended (``_refusal.Refusals.handler_timeout``)."""

    __slots__ = (
        "active",
        "admitted",
        "arrive",
        "cancelled_queued",
        "capacity",
        "clock",
        "discipline",
        "ended",
        "ends",
        "fair",
        "handler_timeouts",
        "latest_start",
        "learn",
        "levels",
        "max_active",
        "max_queue",
        "name",
        "observer",
        "openings",
        "overload_errors",
        "predicted",
        "queue_timeout",
        "ranked",
        "service",
        "shed_client",
        "shed_fair",
        "shed_full",
        "shed_standing",
        "shed_timeout",
        "timed_out",
        "wait",
        "wait_as_client",
        "waiters",
    )

    def __init__(
        self,
        *,
        name: str,
        max_active: int,
        max_queue: int,
        queue_timeout: float,
        discipline: QueueDiscipline,
        service: ServiceTimeEstimator,
        observer: ToolObserver | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.clock = clock
        self.max_active = max_active  # the limit in force (an adaptive limit moves it)
        self.max_queue = max_queue  # the queue in force (a default one follows the limit)
        self.queue_timeout = queue_timeout
        self.discipline = discipline
        self.service = service  # slot hold times
        self.observer = observer
        # The observers of each priority's calls, by rank, bound once (the default's is
        # ``observer``): what a call of a priority reports its admission and refusal to.
        self.ranked = bind_priorities(observer)
        # Who hears how each call ended: the observer, unless a caller reports the ends itself.
        self.ends = observer
        self.active = 0
        self.waiters: OrderedDict[Waiter, None] = OrderedDict()
        self.fair: FairQueue[Waiter] | None = None  # clients' records, from the first key
        # The priorities of the waiting calls, from the first call not of the default one.
        self.levels: Levels[Waiter] | None = None
        # The latest start of a slot hold: the youngest call's age bounds every hold in flight
        # from below (what a cold guard knows before any call finishes).
        self.latest_start = clock()
        # Under an adaptive limit, each call's seat in the capacity feedback and the limit's
        # lesson at its end; None under a fixed one.
        self.capacity: CapacityFeedback | None = None
        self.learn: Learn | None = None
        # ... and the time between slot openings at saturation that the limit's lessons teach
        # (``_learning.py``), which the overload detector reads (``_waiting.py``).
        self.openings: ServiceTimeEstimator | None = None
        # The exceptions that say the tool is overloaded (``ConcurrencyGuard(overload_errors=)``).
        self.overload_errors: tuple[type[BaseException], ...] = ()
        self.admitted = self.ended = 0  # calls that took a slot / gave it back (adaptive only)
        self.shed_full = self.shed_standing = self.shed_timeout = self.predicted = 0
        self.shed_fair = self.shed_client = self.cancelled_queued = self.handler_timeouts = 0

    def release(self) -> None:
        """A slot is given back: handed to the next waiter, or freed. Above a lowered limit it
        is not handed on: the calls in flight drain first."""
        if self.waiters and self.active <= self.max_active:
            self.hand_off()
        else:
            self.active -= 1

    def hand_off(self) -> bool:
        """Give a released slot to the next waiter; ``active`` is unchanged (no barging). Under
        priorities the slot may be kept for the calls above those waiting (``Levels.serve``):
        then it is freed, and False returned."""
        waiters = self.waiters
        discipline = self.discipline
        newest = discipline.lifo and discipline.standing(self.clock(), len(waiters))
        fair = self.fair
        levels = self.levels
        if levels is not None:
            served = levels.serve(newest, self.max_active, self.clock(), self.service.mean)
            if served is None:
                self.active -= 1
                return False
            waiter = served
            del waiters[waiter]
        elif fair is None:
            waiter, _ = waiters.popitem(last=newest)
        elif fair.serves_in_turn:
            waiter = fair.serve(newest)
            del waiters[waiter]
        else:  # the queue's own order; the client's records follow
            waiter, _ = waiters.popitem(last=newest)
            fair.remove(waiter.tenant, waiter, served=True)  # type: ignore[arg-type]  # kept
        discipline.handoffs += 1
        waiter.granted = True
        waiter.wake()
        return True

    def queued_by_others(self, client: str | None) -> int:
        """Calls waiting for a slot that are not ``client``'s (None: the keyless client's)."""
        fair = self.fair
        if fair is None:  # no client records: every waiter is keyless
            return 0 if client is None else len(self.waiters)
        levels = self.levels
        own = fair.queued(client) if levels is None else levels.queued(client)
        return len(self.waiters) - own
