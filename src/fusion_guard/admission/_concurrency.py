"""ConcurrencyGuard: ``max_active`` slots, a bounded queue, and early, well-advised shedding.

Three pieces, as in Netflix's concurrency-limits: a *limit* decides how many calls may run
(``_limit.py``: fixed, or adaptive in ``_adaptive.py``), the *queue discipline* decides who is
refused at arrival, judged late or served next (``_discipline.py``), and the guard here
*enforces* both: slots, waiters, hand-off, deadlines, the envelopes and their advice.

How a call is admitted (``async with guard.slot():``):

1. A free slot is taken at once, without yielding to the event loop (the uncontended path costs
   about as much as a bare ``asyncio.Semaphore``).
2. Otherwise the caller queues, unless the queue is full (shed ``queue_full``) or its expected
   wait, ``position * hold / max_active``, already exceeds ``queue_timeout`` (shed
   ``queue_timeout`` at once, detail ``predicted``: waiting would be for nothing). Prediction
   rests on what has been measured, never on the prior alone: the mean of finished holds, or the
   age of the youngest call in flight if longer (every call in flight has held its slot at least
   that long), so a cold guard predicts as soon as its first calls have run for a while.
   Waiters are *re-judged* as that knowledge grows and as they wait: once the time a waiter has
   waited plus its expected wait exceeds ``queue_timeout``, it is shed then (``queue_timeout``,
   ``predicted``), not at the end of its timeout. The judging starts from the tail of the (FIFO)
   queue, where the expected wait is longest, and stops at the first waiter still in time: each
   look costs O(1) plus O(1) per waiter shed. The tail's own wait wakes at the moment it would
   be predicted to miss (no slot having opened meanwhile, the calls in flight ageing), and every
   queued arrival looks too.
   Under *sustained overload* the queue is held to ``standing_limit`` waiters (shed
   ``queue_full``, detail ``standing``, ``max_queue`` the standing limit; judged only once a
   call has finished, the prior being a guess): a queue that absorbs a burst is useful, a queue
   that never drains only adds latency to every call, so admitted calls then wait a few service
   times, not ``max_queue`` of them. Sustained overload takes two signs at once: the queue is
   standing (it has not been empty for ``standing_after`` seconds, CoDel's test) *and* calls have
   been arriving faster than the slots serve them (``_overload.OverloadDetector``: arrival rates
   against ``max_active / mean hold``).
   Either sign alone also appears in a burst at moderate load, which max_queue is there to absorb.
3. A release *hands* its slot to the next waiter (the active count does not drop, so no newcomer
   can barge in); a waiter cancelled at the moment it is handed the slot passes it on.
4. A waiter not served within ``queue_timeout`` is shed with reason ``queue_timeout``.

Queue order: FIFO. With ``lifo=True`` the guard serves the *newest* waiter first while the queue
is standing (adaptive LIFO): under sustained overload the calls admitted are the fresh ones, whose
clients are still waiting, and the stale ones age out. Once the queue drains, FIFO resumes.

The queue is an ``OrderedDict`` of waiter tokens: arrival, hand-off (from either end) and
cancellation (delete by key) are all O(1), however many wait.

A permit composes (``permit=``, a :class:`Permit`): something a call holds besides its local
slot, such as a fleet-wide lease in Redis (``DistributedConcurrencyGuard``). It is taken after
the local slot and given back before it; the queue and hand-off never look at it, and it sees
only the guard's public surface (``active``, ``queued``, ``refusal()``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Literal, Protocol, Self, cast, runtime_checkable

import anyio
import anyio.lowlevel

from .._checks import check_bool, check_int, check_name, check_seconds
from .._exceptions import ConfigurationError, HandlerTimeout, ServerBusy
from .._keys import bounded_key
from .._log import log_event
from .._observer import Outcome, ShedReason, ToolObserver, observer_failed, outcome_of
from ..wire._response import ToolResponse
from ..wire._shedding import ServerBusyTemplate, TimeoutTemplate
from ._deadline import Deadline
from ._discipline import LOOK_EVERY, QueueDiscipline, whole_calls
from ._fairness import FairQueue, Tenant
from ._feedback import CapacityFeedback, Seat
from ._limit import FixedLimit, Limit, OvertakingLimit
from ._service_time import RetryPromises, ServiceTimeEstimator

__all__ = ["ConcurrencyGuard", "ConcurrencyStatistics", "Permit", "Slot"]

#: TIMEOUT envelopes kept rendered, one per distinct deadline: a guard sees one or a few (the
#: Guard passes its tool's), but per-call timeouts may vary without bound.
TIMEOUT_TEMPLATES = 8
#: SERVER_BUSY envelopes kept rendered per limit an adaptive limit has been at.
MAX_LIMIT_TEMPLATES = 64
#: The default queue: this many waiters per slot.
QUEUE_PER_SLOT = 10
#: ... and per call the tool serves in parallel under an adaptive limit that estimates it: such
#: a limit runs above the parallelism on purpose, to find more (``GradientLimit`` settles at
#: about twice it), so about one call per parallel call already waits inside the tool. Counted
#: in, a full queue waits as long as under a fixed limit equal to the parallelism; left out, the
#: first second of a 4x overload waited two calls longer, and 34 of seeds 1-60 of the one-minute
#: demo met every target, not 39 (``python benchmarks/virtual_demo.py --seeds 1-60
#: --max-active auto``, with the slots under overload of ``QueueDiscipline.slots_in_force``).
QUEUE_PER_PARALLEL_CALL = QUEUE_PER_SLOT - 1
#: An adaptive limit's moves by half or more are logged at most this often per tool (seconds).
LIMIT_LOG_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class ConcurrencyStatistics:
    """A snapshot of a :class:`ConcurrencyGuard`'s figures (counters since construction)."""

    name: str
    max_active: int
    max_queue: int
    active: int
    queued: int
    admitted: int
    """Calls that got a slot (at once or after queueing)."""
    shed_queue_full: int
    shed_standing: int
    """Of ``shed_queue_full``, those refused by the standing-queue limit."""
    shed_queue_timeout: int
    """Calls shed for time, after waiting or predicted at arrival (``shed_predicted`` of them)."""
    shed_predicted: int
    shed_fair_share: int
    """Queued calls of the heaviest client refused to make room for a lighter client's."""
    shed_client_limit: int
    """Calls refused over their client's ``max_active_per_client``."""
    clients: int
    """Client keys with calls running or waiting now (the per-client records kept)."""
    cancelled_queued: int
    """Callers cancelled while waiting for a slot."""
    handler_timeouts: int
    mean_service_time: float
    """Moving average of slot hold times (the prior until ``service_samples`` > 0)."""
    service_samples: int


class _Waiter:
    """One queued caller. ``granted`` is set when a release hands it the slot; ``left`` when the
    guard took it out of the queue unserved, ``"predicted"`` (a re-judgement), ``"expired"``
    (its ``queue_timeout`` passed) or ``"displaced"`` (a lighter client took its place): its own
    task then raises the refusal. On asyncio it waits on
    a bare future (``due``: its deadline in loop time, watched by the guard's one timer), elsewhere
    on an anyio ``Event`` under a cancel scope."""

    __slots__ = ("due", "event", "future", "granted", "left", "since", "tenant")

    def __init__(
        self,
        since: float,
        future: asyncio.Future[None] | None,
        due: float,
        tenant: Tenant[_Waiter] | None,
    ) -> None:
        self.future = future
        self.event = None if future is not None else anyio.Event()
        self.granted = False
        self.left: Literal["predicted", "expired", "displaced"] | None = None
        self.since = since
        self.due = due
        self.tenant = tenant  # its client's record, once the guard keeps them (fair shares)

    def wake(self) -> None:
        future = self.future
        if future is None:
            self.event.set()  # type: ignore[union-attr]  # one of the two is set
        elif not future.done():
            future.set_result(None)


class _FlaggedBusyTemplate(ServerBusyTemplate):
    """SERVER_BUSY with one more detail, ``FLAG`` = ``true``, after the standard ones (rendered
    once): ``predicted`` for a call shed at arrival on its predicted wait, ``standing`` for one
    refused by the standing-queue limit (whose ``max_queue`` is that limit: the queue in force)."""

    __slots__ = ()

    def __init__(self, tool: str, max_active: int, max_queue: int, flag: str) -> None:
        super().__init__(tool, max_active, max_queue, flag=flag)


class Slot:
    """One call's hold on a guard slot: an async context manager, used once.

    ``queue_wait`` is the time spent queued (0.0 when a slot was free). With a ``timeout`` the
    body runs under a deadline; past it the body is cancelled, the slot freed, and
    :class:`~fusion_guard.HandlerTimeout` raised. ``release()`` is idempotent.
    """

    __slots__ = (
        "_deadline",
        "_guard",
        "_held",
        "_inflight",
        "_rank",
        "_reached_tool",
        "_seat",
        "_start",
        "_timeout",
        "queue_wait",
    )

    #: The caller's client key (``_ClientSlot`` keeps it); a plain slot's call is keyless.
    _client: str | None = None
    _seat: Seat  # its place in the guard's CapacityFeedback (under an adaptive limit)

    def __init__(self, guard: ConcurrencyGuard, timeout: float | None) -> None:
        self._guard = guard
        self._timeout = timeout
        self._deadline: Deadline | None = None
        self._held = False
        self.queue_wait = 0.0

    #: Whether ``leave`` ends the hold (a fleet slot must also give its lease back, awaited).
    leaves_at_once: ClassVar[bool] = True

    async def __aenter__(self) -> Slot:
        guard = self._guard
        if guard._active < guard._max_active:  # free slot: take it without yielding
            guard._active += 1
            return self._hold(0.0)
        return self._hold(await guard._wait())

    def take_free(self) -> bool:
        """Take a free slot without a coroutine: True when taken (held as after ``async with``),
        False when the caller must enter with ``await slot.__aenter__()`` (it would queue).
        The Guard's tickets use it so an uncontended call costs one coroutine less. A call over
        its client's ``max_active_per_client`` raises ``ServerBusy`` (``client_limit``)."""
        guard = self._guard
        if guard._active < guard._max_active:
            guard._active += 1
            self._hold(0.0)
            return True
        return False

    def _hold(self, queue_wait: float) -> Self:
        """The slot is ours after ``queue_wait`` seconds: count it, report it, start the clock
        (and the deadline). Subclasses that take more than a local slot end their entry here."""
        guard = self._guard
        self.queue_wait = queue_wait
        guard._admitted += 1
        observer = guard._observer
        if observer is not None:
            try:
                observer.admitted(queue_wait)
            except Exception as failure:  # observers never change an outcome
                observer_failed(observer, "admitted", failure)
        self._held = True
        self._reached_tool = True
        feedback = guard._feedback
        if feedback is not None:
            self._seat = feedback.seat(self._client)
        self._inflight = guard._active  # itself included: what an adaptive limit learns from
        self._rank = guard._admitted  # calls that took a slot before it: _rank - 1
        # The guard keeps the latest start: the youngest call's age bounds every hold in flight
        # from below (what a cold guard knows before any call finishes).
        self._start = guard._latest_start = guard._clock()
        if self._timeout is not None:
            self._deadline = Deadline(self._timeout)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._deadline is None:  # no deadline to tell apart: the hold simply ends
            self._end("ok" if exc is None else outcome_of(exc))
            return False
        return self.leave(exc_type, exc, tb)

    def leave(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        """``__aexit__`` without a coroutine, for slots that ``leaves_at_once``: end the hold
        and the deadline; raises ``HandlerTimeout`` when the deadline cancelled the body."""
        deadline = self._deadline
        if deadline is not None:
            self._deadline = None
            try:
                expired = deadline.expired(exc_type, exc, tb)
            except BaseException as raised:
                self._end(outcome_of(raised))
                raise
            if expired:  # our deadline cancelled the body
                self._end("timeout")  # freed before the envelope is even built
                raise self._guard._handler_timeout(self._timeout or 0.0) from None
        self._end("ok" if exc is None else outcome_of(exc))
        return False

    def release(self) -> None:
        """Give the slot back (to the next waiter, if any), the call reported ``ok``. Safe to
        call twice."""
        self._end("ok")

    def invalid_arguments(self) -> None:
        """Say that the call's arguments failed validation before the tool ran: its hold
        then tells nothing of the tool, and neither the adaptive limit nor the service time
        learns from it. The SDK adapters call it (through ``Ticket.invalid_arguments``)."""
        self._reached_tool = False

    def _end(self, outcome: Outcome) -> None:
        """Give the slot back and report how the call ended, once."""
        if self._held:
            self._held = False
            guard = self._guard
            held = guard._clock() - self._start
            reached_tool = self._reached_tool
            if reached_tool:
                guard._service.observe(held)
            feedback = guard._feedback
            if feedback is not None:
                # Of the calls that took a slot before this one, at least this many still hold
                # one (even if every call ended so far was among them): it overtook them.
                overtook = max(0, self._rank - 1 - guard._ended)
                guard._ended += 1
                guard._learn(self, held, outcome == "timeout", overtook, reached_tool)
            # Above a lowered limit the slot is not handed on: the calls in flight drain first.
            if guard._waiters and guard._active <= guard._max_active:
                guard._hand_off()
            else:
                guard._active -= 1
            ends = guard._ends
            if ends is not None:
                try:
                    ends.finished(outcome, held)
                except Exception as failure:  # observers never change an outcome
                    observer_failed(ends, "finished", failure)


class _ClientSlot(Slot):
    """A slot of a call in a guard that keeps clients' records (fair shares, the per-client
    cap): the call belongs to its client (``client`` None: the keyless client) from arrival to
    release. Its own type, so that a guard without client keys pays nothing for them."""

    __slots__ = ("_client",)

    def __init__(self, guard: ConcurrencyGuard, timeout: float | None, client: str | None) -> None:
        # Slot.__init__ spelled out: a call up to it would cost a tenth of the keyed path.
        self._guard = guard
        self._timeout = timeout
        self._deadline: Deadline | None = None
        self._held = False
        self.queue_wait = 0.0
        self._client = client

    async def __aenter__(self) -> Slot:
        if self._guard._arrive(self._client):
            return self._hold(0.0)
        return self._hold(await self._queue_as_client())

    def take_free(self) -> bool:
        guard = self._guard
        if guard._active < guard._max_active:
            guard._arrive(self._client)  # takes the free slot, or refuses over the cap
            self._hold(0.0)
            return True
        return False

    async def _queue_as_client(self) -> float:
        guard = self._guard
        fair = guard._fair
        assert fair is not None  # kept from the first arrival with a key
        tenant = fair.tenant(self._client)
        try:
            return await guard._wait(tenant)
        except BaseException:
            fair.forget_if_idle(tenant)  # a refused newcomer leaves no record behind
            raise

    def _end(self, outcome: Outcome) -> None:
        client = self._client
        if self._held and client is not None:  # FairQueue.ended, inlined: the keyed hot path
            fair = self._guard._fair
            assert fair is not None  # kept from the first arrival with a key
            running = fair.running
            left = running[client] - 1
            if left:
                running[client] = left
            else:
                del running[client]
            fair.keyed_active -= 1
        Slot._end(self, outcome)


@runtime_checkable
class Permit(Protocol):
    """Something a call must hold besides its local slot, composed into a guard with
    ``ConcurrencyGuard(permit=...)``: a fleet-wide lease in Redis, say. ``take`` is awaited once
    the local slot is held, ``deadline`` being the call's arrival plus ``queue_timeout`` (the
    guard's clock); it returns a token for ``give_back`` (None: nothing to give back, e.g.
    admitted by a failure policy) or raises :class:`~fusion_guard.ServerBusy` (build it with
    ``guard.refusal(...)`` so it is counted and reported like the guard's own). ``give_back`` is
    awaited, shielded, before the local slot is released."""

    async def take(self, guard: ConcurrencyGuard, deadline: float) -> object | None: ...

    async def give_back(self, token: object) -> None: ...


class _PermitSlot(_ClientSlot):
    """A slot of a guard with a permit: the local slot, then the permit (awaited), given back in
    the opposite order. The guard's own variant of ``Slot``: the permit itself only sees the
    guard's public surface."""

    __slots__ = ("_permit", "_token")
    leaves_at_once: ClassVar[bool] = False  # the permit is given back (awaited) first

    def __init__(
        self, guard: ConcurrencyGuard, timeout: float | None, client: str | None = None
    ) -> None:
        super().__init__(guard, timeout, client)
        permit = guard.permit
        assert permit is not None  # made only for a guard with a permit
        self._permit = permit
        self._token: object | None = None

    async def __aenter__(self) -> _PermitSlot:
        # Slot.__aenter__ with one step more, the permit, between taking the local slot and
        # counting the call admitted (a call refused its permit was never admitted).
        guard = self._guard
        arrival = guard._clock()
        if self._client is not None or guard._fair is not None:
            if not guard._arrive(self._client):
                await self._queue_as_client()
        elif guard._active < guard._max_active:  # a free local slot, taken without yielding
            guard._active += 1
        else:
            await guard._wait()  # sheds (and reports) queue_full or queue_timeout
        try:
            self._token = await self._permit.take(guard, arrival + guard._queue_timeout)
        except BaseException:
            if self._client is not None:
                guard._fair.ended(self._client)  # type: ignore[union-attr]  # kept
            guard._release()
            raise
        return self._hold(guard._clock() - arrival)

    def take_free(self) -> bool:
        return False  # a local slot is not enough: the permit is awaited (``__aenter__``)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        token, self._token = self._token, None
        if token is not None:
            giving = self._guard._clock()
            # Shielded: a body cancelled by its deadline must still give its permit back.
            with anyio.CancelScope(shield=True):
                await self._permit.give_back(token)
            # The hold an adaptive limit learns from is the call's, not the permit's round trip
            # (a Redis that stalls is not a tool that slowed down).
            self._start += self._guard._clock() - giving
        return self.leave(exc_type, exc, tb)

    async def arelease(self) -> None:
        """Give the permit and the local slot back (for slots taken with ``acquire()``)."""
        await self.__aexit__(None, None, None)


class ConcurrencyGuard:
    """At most ``max_active`` calls at once, up to ``max_queue`` more waiting at most
    ``queue_timeout`` seconds; the rest are shed with :class:`~fusion_guard.ServerBusy`.

    ``name`` is the tool name shown in envelopes. ``max_queue`` defaults to ``10 * max_active``
    (under an adaptive ``limit`` with a ``parallelism`` estimate, 9 per call of it, to the
    nearest call, following it up from its first value and never below: the limit runs above
    the parallelism, and about one call per parallel call waits inside the tool).
    The queue counts as standing once it has not been empty for ``standing_after`` seconds
    (default ``min(0.1, queue_timeout / 4)``); a standing queue is held to ``standing_limit``
    waiters (default ``min(max_queue, 4 * max_active)``) and, with ``lifo``, serves the newest
    first (see the module documentation). ``expected_service_time`` is the prior for the mean
    slot hold time until one is observed; ``max_retry_after`` caps the advice. ``predictive``
    enables early shedding. ``clock`` is a monotonic clock in seconds (injectable for tests).
    Calls given a ``client`` key (``slot(client=...)``) get fair shares across keys (``fair``,
    on by default: waiting calls served in turn, the heaviest client giving way at a full queue,
    ``_fairness.py``); ``max_active_per_client`` caps one key's calls running or waiting.

    ``observer`` (a ``ToolObserver``) hears of every call: ``shed``, or ``admitted`` then
    ``finished(outcome, duration)`` (``ok``; ``timeout``; ``cancelled``; ``error`` for a raised
    envelope or refusal, ``internal_error`` for another exception), a caller cancelled while
    queued ``finished("cancelled", None)``. What it raises is logged once and never changes an
    outcome.
    """

    __slots__ = (
        "__weakref__",
        "_active",
        "_adaptive",
        "_admitted",
        "_busy",
        "_cancel_pending",
        "_cancelled_queued",
        "_clock",
        "_discipline",
        "_ended",
        "_ends",
        "_expiry",
        "_fair",
        "_fair_order",
        "_feedback",
        "_handler_timeouts",
        "_judge",
        "_keyed",
        "_latest_start",
        "_learns_overtaking",
        "_limit_logged",
        "_log_due",
        "_max_active",
        "_max_queue",
        "_name",
        "_observer",
        "_openings",
        "_parallel_calls",
        "_per_client",
        "_permit",
        "_predicted",
        "_predicted_busy",
        "_promises",
        "_queue_floor",
        "_queue_follows",
        "_queue_timeout",
        "_reports_finished",
        "_service",
        "_shed_client",
        "_shed_fair",
        "_shed_full",
        "_shed_standing",
        "_shed_timeout",
        "_slot_type",
        "_standing_busy",
        "_templates_by_limit",
        "_timeout_templates",
        "_timer_loop",
        "_waiters",
    )

    def __init__(
        self,
        max_active: int | None = None,
        max_queue: int | None = None,
        queue_timeout: float = 2.0,
        *,
        name: str = "tool",
        lifo: bool = False,
        standing_after: float | None = None,
        standing_limit: int | None = None,
        observer: ToolObserver | None = None,
        expected_service_time: float = 0.1,
        max_retry_after: float = 60.0,
        predictive: bool = True,
        clock: Callable[[], float] = time.monotonic,
        limit: Limit | None = None,
        permit: Permit | None = None,
        fair: bool = True,
        max_active_per_client: int | None = None,
    ) -> None:
        self._adaptive, self._max_active = _limit_of(max_active, limit)
        self._learns_overtaking = getattr(self._adaptive, "learns_overtaking", False) is True
        # What each finished call tells the adaptive limit (``_feedback.py``); None: no limit
        # to tell.
        self._feedback = (
            None if self._adaptive is None else CapacityFeedback(self._queued_by_others)
        )
        self._fair_order = check_bool("fair", fair)
        self._per_client = _per_client_cap(max_active_per_client, self._adaptive, self._max_active)
        # Whether client keys matter here; their records (``_fair``) start with the first key.
        self._keyed = self._fair_order or self._per_client is not None
        self._fair: FairQueue[_Waiter] | None = None
        if permit is not None and not isinstance(permit, Permit):
            raise ConfigurationError(
                f"permit={permit!r} is invalid: expected a Permit (async take(guard, deadline)"
                " and async give_back(token))"
            )
        self._permit = permit
        self._slot_type: type[Slot] = Slot if permit is None else _PermitSlot
        self._limit_logged = self._max_active  # the limit last reported in the log
        self._log_due = -math.inf
        # Under an adaptive limit that estimates the tool's parallelism, a default queue follows
        # it; per slot in force, the wait of a full queue would grow with the limit's headroom.
        parallelism = _parallelism_of(self._adaptive)
        self._parallel_calls = parallelism  # the estimate as of the last finished call
        self._queue_follows = max_queue is None and hasattr(self._adaptive, "parallelism")
        if max_queue is not None:
            self._max_queue = check_int("max_queue", max_queue, 0)
        else:
            self._max_queue = (
                default_max_queue(self._max_active)
                if parallelism is None
                else default_max_queue(parallelism, adaptive=True)
            )
        self._queue_floor = self._max_queue
        self._queue_timeout = check_seconds("queue_timeout", queue_timeout, allow_inf=True)
        self._name = check_name(name)
        lifo = check_bool("lifo", lifo)
        if standing_after is not None:
            standing_after = check_seconds("standing_after", standing_after)
        if standing_limit is not None:
            standing_limit = check_int("standing_limit", standing_limit, 1)
        predictive = check_bool("predictive", predictive)
        prior = check_seconds("expected_service_time", expected_service_time)
        self._service = ServiceTimeEstimator(prior)
        # Under an adaptive limit, the time between slot openings at saturation, learnt from
        # each call's hold over the calls it shared the tool with (``_learn``). The mean hold
        # over the slots in force is wrong for as long as the mean lags a moved limit (a small
        # limit moves often).
        self._openings = None if self._adaptive is None else ServiceTimeEstimator(prior)
        self._promises = RetryPromises(check_seconds("max_retry_after", max_retry_after))
        if not callable(clock):
            raise ConfigurationError(f"clock must be a callable returning seconds, got {clock!r}")
        self._clock = clock
        self._latest_start = clock()
        # Who is refused at arrival, judged late, or served next: decided there, enforced here.
        self._discipline = QueueDiscipline(
            queue_timeout=self._queue_timeout,
            max_queue=self._max_queue,
            slots=self._max_active,
            lifo=lifo,
            standing_after=standing_after,
            standing_limit=standing_limit,
            predictive=predictive,
            now=clock(),
        )
        self._observer = observer
        # Where slots report how calls ended: the observer, unless a caller reports the ends
        # itself (``reports_finished``).
        self._ends = observer
        self._reports_finished = True
        self._active = 0
        self._waiters: OrderedDict[_Waiter, None] = OrderedDict()
        # On asyncio, one timer for the oldest waiter's queue_timeout and one for judging the
        # tail, instead of a cancel scope per waiter (see _queue_on_loop).
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._cancel_pending: Callable[[asyncio.AbstractEventLoop], bool] = _always
        self._expiry: asyncio.TimerHandle | None = None
        self._judge: asyncio.TimerHandle | None = None
        self._busy, self._predicted_busy = self._templates(self._max_active)
        self._standing_busy = _FlaggedBusyTemplate(
            self._name, self._max_active, self._discipline.standing_limit, "standing"
        )
        self._templates_by_limit: dict[int, tuple[ServerBusyTemplate, _FlaggedBusyTemplate]] = {}
        self._timeout_templates: dict[float, TimeoutTemplate] = {}
        self._admitted = self._shed_full = self._shed_timeout = self._predicted = 0
        self._ended = 0  # calls that held a slot and gave it back (counted for an adaptive limit)
        self._shed_standing = self._shed_fair = self._shed_client = 0
        self._cancelled_queued = self._handler_timeouts = 0

    # -- public surface -------------------------------------------------------------------------

    def free_at_once(self) -> bool:
        """Whether ``slot().take_free()`` would take a slot now (a free local slot, and no
        permit to await besides)."""
        return self._active < self._max_active and self._permit is None

    def slot(self, timeout: float | None = None, client: str | None = None) -> Slot:
        """``async with guard.slot():`` runs the body holding a slot.

        Raises :class:`~fusion_guard.ServerBusy` when shed; with ``timeout`` (seconds), the body
        is cancelled past that deadline and :class:`~fusion_guard.HandlerTimeout` raised.
        ``client``: the caller's key, for fair shares and ``max_active_per_client`` (never
        shown anywhere; a key over ``MAX_KEY_CHARS`` characters is kept as its digest).
        """
        if timeout is not None:
            timeout = check_seconds("timeout", timeout, allow_inf=True)
        if (client is not None and self._keyed) or self._fair is not None:
            if client is not None and client.__class__ is not str:
                raise TypeError(
                    f"client={type(client).__name__} is invalid: expected a str or None"
                )
            client = bounded_key(client)  # a client's records keep a bounded key
            if self._permit is None:
                return _ClientSlot(self, timeout, client)
            return _PermitSlot(self, timeout, client)
        if self._active >= self._max_active:
            queued = len(self._waiters)
            if queued >= self._max_queue:
                # A full guard refuses at the call, before a slot object or a coroutine exists:
                # under overload most calls take this path, so it costs little beyond the envelope.
                raise self._refuse("queue_full", queued, self._busy)
        return self._slot_type(self, timeout)

    async def acquire(self, client: str | None = None) -> Slot:
        """Wait for a slot like ``slot()`` does and return it held; call ``release()`` on it
        (``await arelease()`` with a permit, which is given back first)."""
        held = self.slot(None, client) if client is not None else self._slot_type(self, None)
        await held.__aenter__()
        return held

    def acquire_nowait(self) -> Slot:
        """Take a free slot or raise ``anyio.WouldBlock`` (never queues, never sheds)."""
        if self._permit is not None:
            raise ConfigurationError(
                f"{type(self).__name__}.acquire_nowait() is not available with a permit to"
                " await (a fleet lease): use `await guard.acquire()` or `async with guard.slot()`"
            )
        if self._active >= self._max_active:
            raise anyio.WouldBlock
        self._active += 1
        return Slot(self, None)._hold(0.0)

    @property
    def name(self) -> str:
        return self._name

    @property
    def active(self) -> int:
        """Calls holding a slot now."""
        return self._active

    @property
    def queued(self) -> int:
        """Callers waiting for a slot now."""
        return len(self._waiters)

    @property
    def max_active(self) -> int:
        """The limit in force (it moves with an adaptive ``limit``)."""
        return self._max_active

    @property
    def limit(self) -> int:
        """The number of calls that may run at once now: ``max_active``, or what the adaptive
        ``limit`` last decided."""
        return self._max_active

    @property
    def observer(self) -> ToolObserver | None:
        """The observer given at construction (what a permit reports its refusals to)."""
        return self._observer

    @property
    def permit(self) -> Permit | None:
        """What a call holds besides its local slot (a fleet lease), if anything."""
        return self._permit

    @property
    def adaptive_limit(self) -> Limit | None:
        """The adaptive limit deciding the slots, or None for a fixed ``max_active``."""
        return self._adaptive

    @property
    def max_queue(self) -> int:
        return self._max_queue

    @property
    def queue_timeout(self) -> float:
        return self._queue_timeout

    @property
    def lifo(self) -> bool:
        return self._discipline.lifo

    @property
    def standing_limit(self) -> int:
        return self._discipline.standing_limit

    @property
    def fair(self) -> bool:
        """Whether waiting calls are served in turn across client keys (see ``_fairness.py``)."""
        return self._fair_order

    @property
    def max_active_per_client(self) -> int | None:
        """The most calls one client key may have running or waiting at once (None: no cap)."""
        return self._per_client

    @property
    def reports_finished(self) -> bool:
        """Whether the observer hears how each call ended (``finished(outcome, duration)``) from
        the slots: true by default. A caller that reports the ends itself, knowing more of them
        (the Guard's tickets tell an error envelope from a success), turns it off so that no call
        is counted twice."""
        return self._reports_finished

    @reports_finished.setter
    def reports_finished(self, value: bool) -> None:
        self._reports_finished = check_bool("reports_finished", value)
        self._ends = self._observer if value else None

    def statistics(self) -> ConcurrencyStatistics:
        return ConcurrencyStatistics(
            name=self._name,
            max_active=self._max_active,
            max_queue=self._max_queue,
            active=self._active,
            queued=len(self._waiters),
            admitted=self._admitted,
            shed_queue_full=self._shed_full,
            shed_standing=self._shed_standing,
            shed_queue_timeout=self._shed_timeout,
            shed_predicted=self._predicted,
            shed_fair_share=self._shed_fair,
            shed_client_limit=self._shed_client,
            clients=0 if self._fair is None else self._fair.clients,
            cancelled_queued=self._cancelled_queued,
            handler_timeouts=self._handler_timeouts,
            mean_service_time=self._service.mean,
            service_samples=self._service.samples,
        )

    def __repr__(self) -> str:
        return (
            f"ConcurrencyGuard(name={self._name!r}, active={self._active}/{self._max_active},"
            f" queued={len(self._waiters)}/{self._max_queue}, queue_timeout={self._queue_timeout},"
            f" lifo={self._discipline.lifo})"
        )

    # -- queue and hand-off ---------------------------------------------------------------------

    def _wait(self, tenant: Tenant[_Waiter] | None = None) -> Coroutine[None, None, float]:
        """``await guard._wait()``: queue for a slot and return the time waited; ``tenant``:
        the caller's client, once the guard keeps clients' records.

        Raises ServerBusy before any coroutine exists when the caller is shed at arrival (queue
        full, or predicted to time out): the shed path stays short. At a full queue a lighter
        client's call takes the place of the heaviest client's newest instead (fair shares).
        """
        queued = len(self._waiters)
        displaced = False
        if queued >= self._max_queue:
            if not self._displace_for(tenant):
                raise self._refuse("queue_full", queued, self._busy, caller=_key_of(tenant))
            queued -= 1
            displaced = True
        now = self._clock()
        discipline = self._discipline
        if now - discipline.overload.last_look >= LOOK_EVERY:
            self._look_at_rates(now)
        if queued and discipline.rejudging:  # an arrival is a moment to look (after the rates)
            queued = self._rejudge(now)
        discipline.arrival(now, queued)
        # No standing-queue judgement before a call has finished: the rate the slots serve is
        # then the prior, a guess (a fresh 2-slot tool of 1 s calls, on its 0.1 s prior, read a
        # burst of 20 calls 5 ms apart as overload, held its queue of 20 to 8 and refused each
        # extra caller 2-3 times). Predictive shedding, on the calls in flight, still applies.
        if (
            queued
            and not displaced
            and self._service.samples
            and discipline.holds_standing(now, queued)
        ):
            if not self._displace_for(tenant):
                raise self._refuse(
                    "queue_full", queued, self._standing_template(), caller=_key_of(tenant)
                )
            queued -= 1
        if discipline.predictive:
            fair = self._fair
            position = (
                queued + 1
                if tenant is None or fair is None or not fair.serves_in_turn
                else fair.position(tenant, queued, self._active)
            )
            if discipline.would_time_out(
                position, now, self._max_active, self._service, self._latest_start
            ):
                raise self._refuse(
                    "queue_timeout", queued, self._predicted_busy, caller=_key_of(tenant)
                )
        return self._queue(now, tenant)

    def _displace_for(self, tenant: Tenant[_Waiter] | None) -> bool:
        """Make room for a call of ``tenant`` at a full queue by refusing the heaviest client's
        newest queued call, when ``tenant`` is lighter enough (``FairQueue.displaced_by``)."""
        fair = self._fair
        if tenant is None or fair is None:
            return False
        displaced = fair.displaced_by(tenant, self._clock())
        if displaced is None:
            return False
        waiter = displaced[1]
        del self._waiters[waiter]
        waiter.left = "displaced"
        waiter.wake()  # its own task raises the refusal (fair_share)
        return True

    def _queue(self, now: float, tenant: Tenant[_Waiter] | None) -> Coroutine[None, None, float]:
        loop = asyncio._get_running_loop()
        if loop is None:
            return self._queue_anyio(now, tenant)  # trio: an anyio Event under a cancel scope
        return self._queue_on_loop(now, loop, tenant)

    def _drop(self, waiter: _Waiter) -> None:
        """Take ``waiter`` out of the queue unserved."""
        del self._waiters[waiter]
        tenant = waiter.tenant
        if tenant is not None:
            self._fair.remove(tenant, waiter)  # type: ignore[union-attr]  # kept with tenants

    def _last_served(self) -> _Waiter:
        """The waiter to be served last (the queue is not empty): the tail, or with fair
        shares the heaviest client's newest call."""
        fair = self._fair
        if fair is not None and fair.serves_in_turn:
            last = fair.last_served()
            assert last is not None  # every waiter belongs to a client once records are kept
            return last
        return next(reversed(self._waiters))

    async def _queue_on_loop(
        self, now: float, loop: asyncio.AbstractEventLoop, tenant: Tenant[_Waiter] | None
    ) -> float:
        """Queue on asyncio: a bare future per waiter, woken by a hand-off or by one of the
        guard's two timers (the oldest waiter's ``queue_timeout``, the tail's judgement). A
        cancel scope per waiter would cost more than the hand-off itself (about 5 us)."""
        waiters = self._waiters
        if self._timer_loop is not loop:  # the first queue on this event loop
            self._timer_loop, self._expiry, self._judge = loop, None, None
            self._cancel_pending = _asyncio_cancel_pending(loop)
        waiter = _Waiter(now, loop.create_future(), loop.time() + self._queue_timeout, tenant)
        waiters[waiter] = None
        if tenant is not None:
            self._fair.push(tenant, waiter, self._active, now)  # type: ignore[union-attr]
        if self._expiry is None and waiter.due < math.inf:
            self._expiry = loop.call_at(waiter.due, self._expire)
        if self._discipline.rejudging:
            self._judge_tail(loop)
        try:
            await waiter.future  # type: ignore[misc]  # set above
            if waiter.granted and self._cancel_pending(loop):
                # Cancelled by an anyio scope at the very moment the slot was handed over
                # (anyio does not cancel a task whose future is done): give the slot on rather
                # than run the body.
                await anyio.lowlevel.checkpoint_if_cancelled()
        except BaseException as exc:
            self._abandon(waiter)
            self._left_queue(outcome_of(exc))
            raise
        if waiter.granted:
            return self._clock() - now
        raise self._unserved(waiter)

    def _unserved(self, waiter: _Waiter) -> ServerBusy:
        """The refusal of a waiter that left the queue without a slot."""
        queued = len(self._waiters)
        caller = _key_of(waiter.tenant)
        if waiter.left == "predicted":  # re-judged: it would not be served in time
            return self._refuse("queue_timeout", queued, self._predicted_busy, caller=caller)
        if waiter.left == "displaced":  # a lighter client's call took its place
            tenant = waiter.tenant
            assert tenant is not None  # displaced: a client's call
            assert self._fair is not None
            own = (self._fair.active(tenant.key, self._active), len(tenant.waiters))
            return self._refuse("fair_share", queued, self._busy, own, caller)
        return self._refuse("queue_timeout", queued, self._busy, caller=caller)

    def _expire(self) -> None:
        """The oldest waiter's queue_timeout is due (asyncio timer): refuse every waiter past
        its own, oldest first (they arrived, so they expire, in queue order), then wait for the
        next. Waiters are queued in arrival order whatever order serves them (LIFO pops the
        newest), so the head is always the oldest."""
        self._expiry = None
        loop = self._timer_loop
        assert loop is not None  # armed on it
        now = loop.time()
        waiters = self._waiters
        while waiters:
            head = next(iter(waiters))
            if head.due > now:
                self._expiry = loop.call_at(head.due, self._expire)
                return
            self._drop(head)
            head.left = "expired"
            head.wake()

    def _judge_tail(self, loop: asyncio.AbstractEventLoop) -> None:
        """Arm the judgement of the tail (the waiter expected to wait longest) for when it would
        be predicted late, unless one is armed sooner (an early look only re-arms)."""
        waiters = self._waiters
        if not waiters:
            return
        at = loop.time() + self._judge_delay(self._last_served().since)
        judge = self._judge
        if judge is not None:
            if judge.when() <= at:
                return
            judge.cancel()
        self._judge = loop.call_at(at, self._judge_fired)

    def _judge_fired(self) -> None:
        self._judge = None
        loop = self._timer_loop
        assert loop is not None  # armed on it
        self._rejudge(self._clock())
        self._judge_tail(loop)

    async def _queue_anyio(self, now: float, tenant: Tenant[_Waiter] | None) -> float:
        waiter = _Waiter(now, None, math.inf, tenant)
        self._waiters[waiter] = None
        if tenant is not None:
            self._fair.push(tenant, waiter, self._active, now)  # type: ignore[union-attr]
        try:
            if self._discipline.rejudging:
                await self._wait_judged(waiter)
            else:
                with anyio.move_on_after(self._queue_timeout):
                    await waiter.event.wait()  # type: ignore[union-attr]  # anyio's
            # Cancelled at the very moment the slot was handed over (trio resumes a woken task
            # without delivering the cancellation): give the slot on rather than run the body.
            await anyio.lowlevel.checkpoint_if_cancelled()
        except BaseException as exc:
            self._abandon(waiter)
            self._left_queue(outcome_of(exc))
            raise
        if waiter.granted:
            return self._clock() - now
        if not waiter.left:
            self._drop(waiter)  # the deadline passed first
            waiter.left = "expired"
        raise self._unserved(waiter)

    async def _wait_judged(self, waiter: _Waiter) -> None:
        """Wait for the slot until ``queue_timeout``; meanwhile wake whenever this waiter, as
        the tail of the queue, would be predicted to miss it, and judge the queue then."""
        event = waiter.event
        assert event is not None  # the anyio path's waiter
        deadline = anyio.current_time() + self._queue_timeout
        while not event.is_set():  # set by a hand-off, or by a re-judgement shedding it
            # Only the tail wakes to judge (the tail is judged first, and every arrival behind
            # it looks).
            tail = self._last_served() is waiter
            wake = anyio.current_time() + (self._judge_delay(waiter.since) if tail else math.inf)
            with anyio.CancelScope(deadline=min(wake, deadline)):
                await event.wait()
            if event.is_set() or anyio.current_time() >= deadline:
                return
            self._rejudge(self._clock())

    def _rejudge(self, now: float) -> int:
        """Shed the waiters that can no longer expect a slot in time, from the tail, and return
        how many remain queued.

        The test (``QueueDiscipline.is_late``) is the arrival test, against each waiter's own
        deadline. The tail is the last to be served, so the look stops at the first waiter in
        time: O(1), plus O(1) per waiter shed (each is shed once). The shed waiter's own task
        raises the refusal, so that a caller cancelled meanwhile counts as cancelled, once.
        """
        waiters = self._waiters
        queued = len(waiters)
        hold = self._service.evidence(now - self._latest_start)
        is_late, slots, latest = self._discipline.is_late, self._max_active, self._latest_start
        while queued:
            tail = self._last_served()
            if not is_late(tail.since, queued, now, slots, hold, latest):
                break
            self._drop(tail)
            tail.left = "predicted"
            tail.wake()
            queued -= 1
        return queued

    def _judge_delay(self, tail_since: float) -> float:
        """Seconds until the tail (queued at ``tail_since``) would be judged late."""
        return self._discipline.judge_delay(
            tail_since,
            len(self._waiters),
            self._clock(),
            self._max_active,
            self._service,
            self._latest_start,
        )

    def _abandon(self, waiter: _Waiter) -> None:
        """The waiter was cancelled: leave the queue, or pass on a slot handed to it meanwhile."""
        self._cancelled_queued += 1
        if waiter.granted:
            if waiter.tenant is not None:
                self._fair.ended(waiter.tenant.key)  # type: ignore[union-attr]  # kept
            self._release()
        elif not waiter.left:  # a re-judged or expired waiter has left the queue already
            self._drop(waiter)

    def _left_queue(self, outcome: Outcome) -> None:
        """Report the end of a call that left the queue unadmitted (no duration): ``Slot._end``
        reports the others, inlined there for the hot path."""
        ends = self._ends
        if ends is not None:
            try:
                ends.finished(outcome, None)
            except Exception as failure:  # observers never change an outcome
                observer_failed(ends, "finished", failure)

    # -- clients (fair shares, the per-client cap) ------------------------------------------------

    def _arrive(self, client: str | None) -> bool:
        """A call of ``client`` arrives (None: without a key): refuse it over its client's cap,
        else take a free slot for it if there is one (True), or leave it to queue (False)."""
        fair = self._fair
        if fair is None:
            fair = self._keep_clients()
        cap = self._per_client
        if cap is not None and client is not None:
            own = (fair.running.get(client, 0), fair.queued(client))
            if own[0] + own[1] >= cap:
                raise self._refuse("client_limit", len(self._waiters), self._busy, own)
        if self._active < self._max_active:
            self._active += 1
            if client is not None:  # FairQueue.started, inlined: the keyed hot path
                running = fair.running
                running[client] = running.get(client, 0) + 1
                fair.keyed_active += 1
            return True
        return False

    def _keep_clients(self) -> FairQueue[_Waiter]:
        """Start keeping clients' records (the first call with a key): calls already waiting
        form the keyless client."""
        fair = self._fair = FairQueue(serves_in_turn=self._fair_order, now=self._clock())
        for waiter in self._waiters:
            waiter.tenant = fair.anonymous
            fair.push(fair.anonymous, waiter, self._active, waiter.since)
        return fair

    def _queued_by_others(self, client: str | None) -> int:
        """Calls waiting for a slot that are not ``client``'s (None: the keyless client's)."""
        fair = self._fair
        if fair is None:  # no client records: every waiter is keyless
            return 0 if client is None else len(self._waiters)
        return len(self._waiters) - fair.queued(client)

    def _release(self) -> None:
        if self._waiters and self._active <= self._max_active:
            self._hand_off()
        else:
            self._active -= 1

    def _learn(
        self, slot: Slot, held: float, timed_out: bool, overtook: int, reached_tool: bool
    ) -> None:
        """Feed one finished call to the adaptive limit, as far as it tells of the tool's
        capacity (``CapacityFeedback``), and apply the limit it then gives."""
        adaptive, openings, feedback = self._adaptive, self._openings, self._feedback
        assert adaptive is not None
        assert openings is not None
        assert feedback is not None
        start, inflight = slot._start, slot._inflight
        dropped = feedback.ended(
            slot._seat, start, held, inflight, slot._timeout, timed_out, reached_tool
        )
        if not reached_tool:
            return  # it never ran: the slots did not open any slower or faster for it
        parallel = self._parallel_calls
        if parallel is None:
            # A limit with no estimate: only a call that found every slot taken tells how fast
            # they open.
            if inflight >= self._max_active:
                openings.observe(held / inflight)
        else:
            # Every call tells it, as under a fixed limit: its hold over the calls it shared the
            # tool with (in flight at its start and its end, averaged: a crowd thinned by a lull
            # let it through sooner), or over the parallelism when more (it did not wait
            # inside), rounded down: to the nearest, an estimate of 1.6 for one worker read the
            # tool as serving twice as fast as it does (docs/adaptive-tried.md).
            crowd = 0.5 * (inflight + self._active)
            in_parallel = math.floor(parallel)
            openings.observe(held / (crowd if crowd > in_parallel else in_parallel))
        if dropped is None:
            return  # a timeout of its caller's own (``_feedback.py``): the limit learns nothing
        try:
            if self._learns_overtaking:
                cast(OvertakingLimit, adaptive).on_sample(
                    start, held, inflight, dropped, overtook=overtook
                )
            else:
                adaptive.on_sample(start, held, inflight, dropped)
            limit = adaptive.limit
            parallelism = self._parallel_calls = _parallelism_of(adaptive)
        except Exception as failure:  # a limit's bug never changes a call's answer
            observer_failed(adaptive, "on_sample", failure)
            return
        if isinstance(limit, int) and limit >= 1:
            # Under sustained overload, not above what the tool serves in parallel (and one).
            limit = self._discipline.slots_in_force(
                limit, parallelism, start + held, len(self._waiters)
            )
            if limit != self._max_active:
                self._set_limit(limit)
        # Only when the estimate moved: GradientLimit moves it once a window, not every call.
        if parallelism is not None and parallelism != parallel and self._queue_follows:
            self._follow_parallelism(parallelism)
        # A standing queue is held to a few calls per call the tool serves in parallel: for a
        # limit that runs above the tool's parallelism (to find it), the limit would overstate
        # it, and the queue's wait, by as much. Without an estimate: held per slot.
        self._discipline.on_limit(self._max_active, parallelism)

    def _follow_parallelism(self, parallelism: float) -> None:
        """A default queue under an adaptive limit: ``QUEUE_PER_PARALLEL_CALL`` waiters per call
        the tool serves in parallel, to the nearest call, never below the first. A queue that
        shrinks refuses newcomers; it cancels no waiter."""
        queue = max(default_max_queue(parallelism, adaptive=True), self._queue_floor)
        if queue != self._max_queue:
            self._max_queue = self._discipline.max_queue = queue
            self._templates_by_limit.clear()  # the envelopes report the queue in force
            self._busy, self._predicted_busy = self._templates(self._max_active)

    def _set_limit(self, limit: int) -> None:
        """Put ``limit`` in force: a raise admits waiters at once; a decrease cancels nothing
        (the calls in flight drain, and no slot is handed on above the limit)."""
        logged = self._limit_logged
        if (limit >= 2 * logged or 2 * limit <= logged) and self._clock() >= self._log_due:
            # A move by half or more, at most once per LIMIT_LOG_SECONDS per tool.
            self._limit_logged = limit
            self._log_due = self._clock() + LIMIT_LOG_SECONDS
            log_event(logging.INFO, "concurrency_limit_moved", tool=self._name, limit=limit,
                      previous=logged)  # fmt: skip
        self._max_active = limit
        templates = self._templates_by_limit.get(limit)
        if templates is None:
            if len(self._templates_by_limit) >= MAX_LIMIT_TEMPLATES:
                self._templates_by_limit.clear()
            templates = self._templates_by_limit[limit] = self._templates(limit)
        self._busy, self._predicted_busy = templates
        waiters = self._waiters
        while waiters and self._active < limit:
            self._active += 1
            self._hand_off()

    def _templates(self, limit: int) -> tuple[ServerBusyTemplate, _FlaggedBusyTemplate]:
        """The SERVER_BUSY envelopes for ``limit`` slots (details report the limit in force)."""
        return (
            ServerBusyTemplate(self._name, limit, self._max_queue),
            _FlaggedBusyTemplate(self._name, limit, self._max_queue, "predicted"),
        )

    def _standing_template(self) -> _FlaggedBusyTemplate:
        """The SERVER_BUSY envelope of the standing-queue limit, remade when the slots or that
        limit moved: its ``max_queue`` is the standing limit, the queue in force, so that a
        ``queue_full`` refusal never reads as a full queue at 8 of 20."""
        template = self._standing_busy
        standing = self._discipline.standing_limit
        if template.max_queue != standing or template.max_active != self._max_active:
            template = self._standing_busy = _FlaggedBusyTemplate(
                self._name, self._max_active, standing, "standing"
            )
        return template

    def _hand_off(self) -> None:
        """Give the released slot to the next waiter; ``active`` is unchanged (no barging)."""
        waiters = self._waiters
        discipline = self._discipline
        newest = discipline.lifo and discipline.standing(self._clock(), len(waiters))
        fair = self._fair
        if fair is None:
            waiter, _ = waiters.popitem(last=newest)
        elif fair.serves_in_turn:
            waiter = fair.serve(newest)
            del waiters[waiter]
        else:  # the guard's own order; the client's records follow
            waiter, _ = waiters.popitem(last=newest)
            fair.remove(waiter.tenant, waiter, served=True)  # type: ignore[arg-type]  # kept
        discipline.handoffs += 1
        waiter.granted = True
        waiter.wake()

    def _look_at_rates(self, now: float) -> None:
        """Feed the overload detector (see ``_overload.py``) the counters kept anyway."""
        arrivals = (
            self._admitted
            + self._shed_full
            + self._shed_timeout
            + self._cancelled_queued
            + self._shed_fair
            + self._shed_client
            + len(self._waiters)
        )
        openings = self._openings
        if openings is not None and openings.samples:
            opening = openings.mean
        else:
            opening = self._service.mean / self._max_active
        self._discipline.overload.observe(now, arrivals, opening, self._service.samples)

    # -- shedding -------------------------------------------------------------------------------

    def refusal(self, reason: ShedReason, *, predicted: bool = False) -> ServerBusy:
        """The ServerBusy to raise for a refusal decided beside the guard (by its permit: no
        fleet lease in time), counted, reported to the observer and advised like the guard's
        own; ``predicted`` marks one decided ahead of its deadline."""
        template = self._predicted_busy if predicted else self._busy
        return self._refuse(reason, len(self._waiters), template)

    def _refuse(
        self,
        reason: ShedReason,
        queued: int,
        template: ServerBusyTemplate,
        own: tuple[int, int] | None = None,
        caller: str | None = None,
    ) -> ServerBusy:
        """Count, report and advise one refusal (one function: under overload most calls take
        it); ``own``: the refused call's client's calls running and waiting, which the envelope
        then reports (``fair_share``, ``client_limit``); ``caller``: its client key, when
        known (one promise per caller, see ``RetryPromises``)."""
        active = self._active
        now = self._clock()
        service = self._service
        in_flight = now - self._latest_start
        if reason == "client_limit":
            # About the client's own calls: when one of them is expected to end (one of its n
            # running calls every hold / n; with none running yet, a hold after its first
            # starts). No promise: the openings the crowd is told of are the guard's slots.
            assert own is not None  # refused over its own cap
            retry_after = service.hold(in_flight) / max(own[0], 1)
            self._shed_client += 1
        else:
            hold = service.hold(in_flight)
            # While the hold is the prior alone, the promise waits out only as much of the
            # queue ahead as the calls in flight vouch for: its drain at their age, which no
            # hold can undercut. Waited out at the prior, a prior too long sends callers back
            # to idle slots (a fresh 2-slot tool of 50 ms calls, its queue of 20 full, took
            # 1.94x the ideal drain time); not waited out at all, a prior too short sends them
            # back to the queue that refused them. Once measured, the whole queue ahead.
            ahead = int(queued * in_flight / hold) if service.guessing(in_flight) else queued
            # An anonymous promise runs at most a full guard's worth of openings (every slot
            # and every queue place) past the drain and the known callers' promises.
            crowd = self._max_active + self._max_queue
            retry_after = self._promises.promise(now, ahead, hold / self._max_active, crowd, caller)
            if reason == "queue_full":
                self._shed_full += 1
                self._shed_standing += template is self._standing_busy
            elif reason == "fair_share":
                self._shed_fair += 1
            else:
                self._shed_timeout += 1
                self._predicted += template is self._predicted_busy
        observer = self._observer
        if observer is not None:
            try:
                observer.shed(reason, active, queued, retry_after)
            except Exception as failure:  # observers never change an outcome
                observer_failed(observer, "shed", failure)
        if own is None:
            response = template.render(reason, active, queued, retry_after)
        else:
            cap = self._per_client if reason == "client_limit" else None
            response = template.render_for_client(reason, active, queued, retry_after, *own, cap)
        return _server_busy(response, retry_after, reason)

    def _handler_timeout(self, timeout: float) -> HandlerTimeout:
        self._handler_timeouts += 1
        templates = self._timeout_templates
        template = templates.get(timeout)
        if template is None:
            if len(templates) >= TIMEOUT_TEMPLATES:
                del templates[next(iter(templates))]  # the oldest deadline makes room
            template = templates[timeout] = TimeoutTemplate(self._name, timeout)
        return HandlerTimeout(template.render())


_new_exception = Exception.__new__


def _key_of(tenant: Tenant[_Waiter] | None) -> str | None:
    """The client key of a call's client record (None: no record, or the keyless client)."""
    return None if tenant is None else tenant.key


def _always(loop: asyncio.AbstractEventLoop) -> bool:
    return True


def _asyncio_cancel_pending(
    loop: asyncio.AbstractEventLoop,
) -> Callable[[asyncio.AbstractEventLoop], bool]:
    """Whether the current task has an anyio cancellation pending: what anyio's
    ``checkpoint_if_cancelled`` looks at on asyncio, read without awaiting, so that a queued
    call handed its slot pays for the checkpoint only when there is something to deliver (the
    awaited checkpoint cost an eighth of a hand-off). Found on first use: anyio loads its
    asyncio backend when a loop first runs, not at ``import fusion_guard``. Should anyio's
    internals move, every hand-off takes the public checkpoint again."""
    try:
        from anyio._backends._asyncio import _task_states
    except ImportError:  # pragma: no cover (anyio moved it: the public checkpoint still works)
        return _always
    state_of = _task_states.get
    # The task running on a loop: what asyncio.current_task(loop) reads, without the Python
    # call around it, where asyncio keeps that dict and it is the live one (checked from the
    # task that asks first): the Python call cost a fifteenth of a hand-off on 3.11.
    current_tasks = getattr(asyncio.tasks, "_current_tasks", None)
    task_on: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]
    task_on = asyncio.current_task
    if isinstance(current_tasks, dict) and current_tasks.get(loop) is asyncio.current_task(loop):
        task_on = current_tasks.get

    def cancel_pending(loop: asyncio.AbstractEventLoop) -> bool:
        state = state_of(task_on(loop))  # type: ignore[arg-type]  # inside a task
        scope = None if state is None else state.cancel_scope
        try:
            while scope is not None:
                if scope.cancel_called:
                    return True
                if scope.shield:
                    return False
                scope = scope._parent_scope
        except AttributeError:  # pragma: no cover (anyio's scopes changed shape)
            return True
        return False

    return cancel_pending


def _server_busy(response: ToolResponse, retry_after: float, reason: str) -> ServerBusy:
    """``ServerBusy(response, retry_after, reason)``, the same object (``args`` is the envelope
    text) built without the two-level ``__init__`` chain, which costs a sixth of the shed path.
    Under overload this runs for most calls."""
    busy: ServerBusy = _new_exception(ServerBusy, response.text)
    busy.response = response
    busy.retry_after = retry_after
    busy.reason = reason
    return busy


# -- configuration checks ---------------------------------------------------------------------


def _per_client_cap(cap: object, adaptive: Limit | None, max_active: int) -> int | None:
    if cap is None:
        return None
    value = check_int("max_active_per_client", cap, 1)
    if adaptive is None and value > max_active:
        raise ConfigurationError(
            f"max_active_per_client={value} is invalid: expected an integer from 1 to"
            f" max_active ({max_active})"
        )
    return value


def default_max_queue(parallel: float, *, adaptive: bool = False) -> int:
    """The queue a guard keeps when none is given: ``QUEUE_PER_SLOT`` waiters per slot, or,
    under an ``adaptive`` limit, ``QUEUE_PER_PARALLEL_CALL`` per call it estimates the tool
    serves in parallel, to the nearest call (halves up). Not rounded up: a window of lucky calls
    reads 2.2 for a tool of 2, and a queue of 30 made the first second of an overload wait
    behind 20-29 calls; a tool partly used, which reads below what it serves, is held up by the
    calls it is seen serving at once."""
    per_call = QUEUE_PER_PARALLEL_CALL if adaptive else QUEUE_PER_SLOT
    return per_call * whole_calls(parallel)


def _parallelism_of(adaptive: object) -> float | None:
    """An adaptive limit's estimate of the calls the tool serves in parallel (its optional
    ``parallelism``), or None: none, or a nonsense one (not a finite number >= 1)."""
    parallelism = getattr(adaptive, "parallelism", None)
    if isinstance(parallelism, int | float) and 1 <= parallelism < math.inf:
        return float(parallelism)
    return None


def _limit_of(max_active: object, limit: object) -> tuple[Limit | None, int]:
    """(the adaptive limit or None, the initial slot count) from ``max_active`` / ``limit``."""
    if limit is None:
        if max_active is None:
            raise ConfigurationError(
                "ConcurrencyGuard needs max_active=<whole number >= 1> or limit=<a Limit>"
            )
        return None, check_int("max_active", max_active, 1)
    if max_active is not None:
        raise ConfigurationError(
            f"ConcurrencyGuard(max_active={max_active!r}, limit={limit!r}): give one of the two"
        )
    if not isinstance(limit, Limit):
        raise ConfigurationError(
            f"limit must be a Limit (a .limit property and on_sample(start, duration, inflight,"
            f" dropped)), got {limit!r}"
        )
    initial = check_int("limit.limit", limit.limit, 1)
    return (None if isinstance(limit, FixedLimit) else limit), initial
