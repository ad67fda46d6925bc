"""ConcurrencyGuard: ``max_active`` slots, a bounded queue, and early, well-advised shedding.

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
   ``queue_full``, detail ``standing``): a queue that absorbs a burst is useful, a queue that
   never drains only adds latency to every call, so admitted calls then wait a few service times,
   not ``max_queue`` of them. Sustained overload takes two signs at once: the queue is standing
   (it has not been empty for ``standing_after`` seconds, CoDel's test) *and* calls have been
   arriving faster than the slots serve them (``_overload.OverloadDetector``: arrival rates
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

Seam for a distributed permit (``DistributedConcurrencyGuard`` holds Redis leases this way): the
queue and hand-off logic (``_wait``, ``_release``, ``_hand_off``) never looks at *how* a slot is
known to be free; that decision is the ``_active < _max_active`` test in ``Slot.__aenter__`` and
the decrement on release (inlined in ``Slot._end`` to keep the hot path short). A subclass
takes its permit after the local admission and gives it back before the local release (its own
``Slot`` subclass), leaving the queue untouched; ``_shed`` builds a ServerBusy for it.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import ClassVar, Self

import anyio
import anyio.lowlevel

from .._checks import check_bool, check_int, check_name, check_seconds
from .._exceptions import ConfigurationError, HandlerTimeout, ServerBusy
from .._log import log_event
from .._observer import Outcome, ShedReason, ToolObserver, observer_failed, outcome_of
from ..wire._response import ToolResponse
from ..wire._shedding import ServerBusyTemplate, TimeoutTemplate
from ._deadline import Deadline
from ._limit import FixedLimit, Limit
from ._overload import OverloadDetector
from ._service_time import RetryPromises, ServiceTimeEstimator, expected_wait

__all__ = ["ConcurrencyGuard", "ConcurrencyStatistics", "Slot"]

#: A queue not empty for this long (seconds) is standing, unless queue_timeout / 4 is shorter.
STANDING_AFTER = 0.1
#: A standing queue is held to this many waiters per slot (unless standing_limit is given).
STANDING_SLOTS_FACTOR = 4
#: The soonest a queued waiter wakes to judge the queue again (seconds): a floor against rounding.
MIN_JUDGE_DELAY = 0.001
#: A start expected within this many drain steps (mean hold / max_active) of a waiter's deadline
#: counts as a miss.
LATE_MARGIN_STEPS = 0.5
#: TIMEOUT envelopes kept rendered, one per distinct deadline: a guard sees one or a few (the
#: Guard passes its tool's), but per-call timeouts may vary without bound.
TIMEOUT_TEMPLATES = 8
#: SERVER_BUSY envelopes kept rendered per limit an adaptive limit has been at.
MAX_LIMIT_TEMPLATES = 64
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
    cancelled_queued: int
    """Callers cancelled while waiting for a slot."""
    handler_timeouts: int
    mean_service_time: float
    """Moving average of slot hold times (the prior until ``service_samples`` > 0)."""
    service_samples: int


class _Waiter:
    """One queued caller; ``granted`` is set when a release hands it the slot, ``shed`` when a
    re-judgement takes it out of the queue (its task then raises the refusal)."""

    __slots__ = ("event", "granted", "shed", "since")

    def __init__(self, since: float) -> None:
        self.event = anyio.Event()
        self.granted = False
        self.shed = False
        self.since = since


class _FlaggedBusyTemplate(ServerBusyTemplate):
    """SERVER_BUSY with one more detail, ``FLAG`` = ``true``, after the standard ones (rendered
    once): ``predicted`` for a call shed at arrival on its predicted wait, ``standing`` for one
    refused by the standing-queue limit."""

    __slots__ = ()

    def __init__(self, tool: str, max_active: int, max_queue: int, flag: str) -> None:
        super().__init__(tool, max_active, max_queue)
        extra = f'    <detail key="{flag}">true</detail>\n  </details>\n'
        self._tail = self._tail.replace("  </details>\n", extra, 1)


class Slot:
    """One call's hold on a guard slot: an async context manager, used once.

    ``queue_wait`` is the time spent queued (0.0 when a slot was free). With a ``timeout`` the
    body runs under a deadline; past it the body is cancelled, the slot freed, and
    :class:`~fusion_guard.HandlerTimeout` raised. ``release()`` is idempotent.
    """

    __slots__ = ("_deadline", "_guard", "_held", "_inflight", "_start", "_timeout", "queue_wait")

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
        The Guard's tickets use it so an uncontended call costs one coroutine less."""
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
        self._inflight = guard._active  # itself included: what an adaptive limit learns from
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

    def _end(self, outcome: Outcome) -> None:
        """Give the slot back and report how the call ended, once."""
        if self._held:
            self._held = False
            guard = self._guard
            held = guard._clock() - self._start
            guard._service.observe(held)
            if guard._adaptive is not None:
                guard._learn(self._start, held, self._inflight, outcome == "timeout")
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


class ConcurrencyGuard:
    """At most ``max_active`` calls at once, up to ``max_queue`` more waiting at most
    ``queue_timeout`` seconds; the rest are shed with :class:`~fusion_guard.ServerBusy`.

    ``name`` is the tool name shown in envelopes. ``max_queue`` defaults to ``10 * max_active``.
    The queue counts as standing once it has not been empty for ``standing_after`` seconds
    (default ``min(0.1, queue_timeout / 4)``); a standing queue is held to ``standing_limit``
    waiters (default ``min(max_queue, 4 * max_active)``) and, with ``lifo``, serves the newest
    first (see the module documentation). ``expected_service_time`` is the prior for the mean
    slot hold time until one is observed; ``max_retry_after`` caps the advice. ``predictive``
    enables early shedding. ``clock`` is a monotonic clock in seconds (injectable for tests).

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
        "_cancelled_queued",
        "_clock",
        "_ends",
        "_handler_timeouts",
        "_handoffs",
        "_last_empty",
        "_latest_start",
        "_lifo",
        "_limit_logged",
        "_log_due",
        "_max_active",
        "_max_queue",
        "_name",
        "_observer",
        "_overload",
        "_predicted",
        "_predicted_busy",
        "_predictive",
        "_promises",
        "_queue_timeout",
        "_rejudging",
        "_reports_finished",
        "_service",
        "_shed_full",
        "_shed_standing",
        "_shed_timeout",
        "_standing_after",
        "_standing_busy",
        "_standing_derived",
        "_standing_limit",
        "_templates_by_limit",
        "_timeout_templates",
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
    ) -> None:
        self._adaptive, self._max_active = _limit_of(max_active, limit)
        self._limit_logged = self._max_active  # the limit last reported in the log
        self._log_due = -math.inf
        self._max_queue = (
            10 * self._max_active if max_queue is None else check_int("max_queue", max_queue, 0)
        )
        self._queue_timeout = check_seconds("queue_timeout", queue_timeout, allow_inf=True)
        self._name = check_name(name)
        self._lifo = check_bool("lifo", lifo)
        default_after = min(STANDING_AFTER, self._queue_timeout / 4)
        self._standing_after = (
            default_after
            if standing_after is None
            else check_seconds("standing_after", standing_after)
        )
        self._standing_derived = standing_limit is None  # follows the limit in force
        self._standing_limit = min(
            self._max_queue,
            STANDING_SLOTS_FACTOR * self._max_active
            if standing_limit is None
            else check_int("standing_limit", standing_limit, 1),
        )
        self._last_empty = -math.inf
        self._predictive = check_bool("predictive", predictive)
        prior = check_seconds("expected_service_time", expected_service_time)
        self._service = ServiceTimeEstimator(prior)
        self._promises = RetryPromises(check_seconds("max_retry_after", max_retry_after))
        if not callable(clock):
            raise ConfigurationError(f"clock must be a callable returning seconds, got {clock!r}")
        self._clock = clock
        self._latest_start = clock()
        self._handoffs = 0  # since the queue last formed (at _last_empty)
        # Waiters are re-judged while they wait (tail first, FIFO order only: under LIFO a
        # position says nothing about a wait) when there is a finite timeout to miss.
        self._rejudging = self._predictive and not self._lifo and self._queue_timeout < math.inf
        self._overload = OverloadDetector(clock())
        self._observer = observer
        # Where slots report how calls ended: the observer, unless a caller reports the ends
        # itself (``reports_finished``).
        self._ends = observer
        self._reports_finished = True
        self._active = 0
        self._waiters: OrderedDict[_Waiter, None] = OrderedDict()
        self._busy, self._predicted_busy, self._standing_busy = self._templates(self._max_active)
        self._templates_by_limit: dict[
            int, tuple[ServerBusyTemplate, _FlaggedBusyTemplate, _FlaggedBusyTemplate]
        ] = {}
        self._timeout_templates: dict[float, TimeoutTemplate] = {}
        self._admitted = self._shed_full = self._shed_timeout = self._predicted = 0
        self._shed_standing = 0
        self._cancelled_queued = self._handler_timeouts = 0

    # -- public surface -------------------------------------------------------------------------

    def free_at_once(self) -> bool:
        """Whether ``slot().take_free()`` would take a slot now (a free local slot, and no
        permit to await besides)."""
        return self._active < self._max_active

    def slot(self, timeout: float | None = None) -> Slot:
        """``async with guard.slot():`` runs the body holding a slot.

        Raises :class:`~fusion_guard.ServerBusy` when shed; with ``timeout`` (seconds), the body
        is cancelled past that deadline and :class:`~fusion_guard.HandlerTimeout` raised.
        """
        if timeout is not None:
            timeout = check_seconds("timeout", timeout, allow_inf=True)
        if self._active >= self._max_active:
            queued = len(self._waiters)
            if queued >= self._max_queue:
                # A full guard refuses at the call, before a slot object or a coroutine exists:
                # under overload most calls take this path, so it costs little beyond the envelope.
                raise self._refuse("queue_full", queued, self._busy)
        return Slot(self, timeout)

    async def acquire(self) -> Slot:
        """Wait for a slot like ``slot()`` does and return it held; call ``release()`` on it."""
        held = Slot(self, None)
        await held.__aenter__()
        return held

    def acquire_nowait(self) -> Slot:
        """Take a free slot or raise ``anyio.WouldBlock`` (never queues, never sheds)."""
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
        return self._lifo

    @property
    def standing_limit(self) -> int:
        return self._standing_limit

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
            cancelled_queued=self._cancelled_queued,
            handler_timeouts=self._handler_timeouts,
            mean_service_time=self._service.mean,
            service_samples=self._service.samples,
        )

    def __repr__(self) -> str:
        return (
            f"ConcurrencyGuard(name={self._name!r}, active={self._active}/{self._max_active},"
            f" queued={len(self._waiters)}/{self._max_queue}, queue_timeout={self._queue_timeout},"
            f" lifo={self._lifo})"
        )

    # -- queue and hand-off ---------------------------------------------------------------------

    def _wait(self) -> Coroutine[None, None, float]:
        """``await guard._wait()``: queue for a slot and return the time waited.

        Raises ServerBusy before any coroutine exists when the caller is shed at arrival (queue
        full, or predicted to time out): the shed path stays short.
        """
        queued = len(self._waiters)
        if queued >= self._max_queue:
            raise self._refuse("queue_full", queued, self._busy)
        now = self._clock()
        overloaded = self._overloaded(now)
        if queued and self._rejudging:  # an arrival is a moment to look (after the rates)
            queued = self._rejudge(now)
        if not queued:
            self._last_empty = now
            self._handoffs = 0
        elif overloaded and queued >= self._standing_limit and self._standing(now):
            raise self._refuse("queue_full", queued, self._standing_busy)
        if self._would_time_out(queued + 1, now):
            raise self._refuse("queue_timeout", queued, self._predicted_busy)
        return self._queue(now)

    async def _queue(self, now: float) -> float:
        waiters = self._waiters
        waiter = _Waiter(now)
        waiters[waiter] = None
        try:
            if self._rejudging:
                await self._wait_judged(waiter)
            else:
                with anyio.move_on_after(self._queue_timeout):
                    await waiter.event.wait()
            # Cancelled at the very moment the slot was handed over (trio resumes a woken task
            # without delivering the cancellation): give the slot on rather than run the body.
            await anyio.lowlevel.checkpoint_if_cancelled()
        except BaseException as exc:
            self._abandon(waiter)
            self._left_queue(outcome_of(exc))
            raise
        if not waiter.granted:
            if waiter.shed:  # re-judged: it would not be served in time (already dequeued)
                raise self._refuse("queue_timeout", len(waiters), self._predicted_busy)
            del waiters[waiter]  # the deadline passed first
            raise self._refuse("queue_timeout", len(waiters), self._busy)
        return self._clock() - now

    async def _wait_judged(self, waiter: _Waiter) -> None:
        """Wait for the slot until ``queue_timeout``; meanwhile wake whenever this waiter, as
        the tail of the queue, would be predicted to miss it, and judge the queue then."""
        event = waiter.event
        deadline = anyio.current_time() + self._queue_timeout
        while not event.is_set():  # set by a hand-off, or by a re-judgement shedding it
            wake = anyio.current_time() + self._judge_delay(waiter)
            with anyio.CancelScope(deadline=min(wake, deadline)):
                await event.wait()
            if event.is_set() or anyio.current_time() >= deadline:
                return
            self._rejudge(self._clock())

    def _would_time_out(self, position: int, now: float) -> bool:
        """Predictive early shedding: would a newcomer at ``position`` miss ``queue_timeout``?

        Not while LIFO serves newcomers first (a newcomer's position then says nothing about
        its wait).
        """
        if not self._predictive:
            return False
        if self._lifo and self._standing(now):
            return False
        hold = self._service.evidence(now - self._latest_start)
        return self._expected_start(position, now, hold) > now + self._queue_timeout

    def _expected_start(self, position: int, now: float, hold: float) -> float:
        """When the caller at ``position`` is expected to get a slot, on the evidence ``hold``
        (``expected_wait``), plus half a drain step: waiting the whole timeout for a refusal is
        the worst outcome a caller can have, so a start expected that close to the deadline
        counts as a miss (the openings are not known more precisely than that)."""
        youngest = now - self._latest_start
        slots = self._max_active
        wait = expected_wait(position, slots, hold, youngest, self._mean_age(youngest))
        return now + wait + LATE_MARGIN_STEPS * hold / slots

    def _mean_age(self, youngest: float) -> float:
        """The mean age of the calls in flight, from the slow path alone (tracking every start
        would cost the uncontended path a sixth). While a queue stands every start is a
        hand-off, so the calls in flight started about one hand-off interval apart; before the
        queue's first hand-off, they are taken to have started together (a burst)."""
        handoffs = self._handoffs
        if not (handoffs and self._waiters):
            return youngest
        interval = (self._latest_start - self._last_empty) / handoffs
        return youngest + 0.5 * (self._max_active - 1) * max(interval, 0.0)

    def _rejudge(self, now: float) -> int:
        """Shed the waiters that can no longer expect a slot in time, from the tail, and return
        how many remain queued.

        The test is the arrival test, against each waiter's own deadline. The tail is the last
        to be served, so the look stops at the first waiter in time: O(1), plus O(1) per waiter
        shed (each is shed once). The shed waiter's own task raises the refusal, so that a
        caller cancelled meanwhile counts as cancelled, once.
        """
        waiters = self._waiters
        queued = len(waiters)
        hold = self._service.evidence(now - self._latest_start)
        timeout = self._queue_timeout
        while queued:
            tail = next(reversed(waiters))
            if self._expected_start(queued, now, hold) <= tail.since + timeout:
                break
            del waiters[tail]
            tail.shed = True
            tail.event.set()
            queued -= 1
        return queued

    def _judge_delay(self, waiter: _Waiter) -> float:
        """Seconds until ``waiter``, if it is the tail, would be judged late (``_rejudge``)
        should no slot open meanwhile; inf for a waiter with others behind it (the tail is
        judged first, and every arrival behind it looks).

        No opening means the calls in flight age: the expected start stays put while they are
        younger than the mean hold, then moves with the clock; and once the youngest outlives
        the mean (or before any call has finished) the evidence of the hold grows with it.
        Openings only move the moment later, so a wake then misses nothing.
        """
        waiters = self._waiters
        if next(reversed(waiters)) is not waiter:
            return math.inf
        now = self._clock()
        slots = self._max_active
        rounds = (len(waiters) - 1) // slots
        slack = waiter.since + self._queue_timeout - now
        margin = LATE_MARGIN_STEPS / slots
        youngest = now - self._latest_start
        # The hold grows with the youngest call in flight (the calls in flight are then all due).
        delay = (slack - (rounds + margin) * youngest) / (1.0 + rounds + margin)
        service = self._service
        if service.samples:  # the mean hold: late once the calls in flight are overdue
            delay = min(delay, slack - (rounds + margin) * service.mean)
        return max(delay, MIN_JUDGE_DELAY)

    def _abandon(self, waiter: _Waiter) -> None:
        """The waiter was cancelled: leave the queue, or pass on a slot handed to it meanwhile."""
        self._cancelled_queued += 1
        if waiter.granted:
            self._release()
        elif not waiter.shed:  # a re-judged waiter has left the queue already
            del self._waiters[waiter]

    def _left_queue(self, outcome: Outcome) -> None:
        """Report the end of a call that left the queue unadmitted (no duration): ``Slot._end``
        reports the others, inlined there for the hot path."""
        ends = self._ends
        if ends is not None:
            try:
                ends.finished(outcome, None)
            except Exception as failure:  # observers never change an outcome
                observer_failed(ends, "finished", failure)

    def _release(self) -> None:
        if self._waiters and self._active <= self._max_active:
            self._hand_off()
        else:
            self._active -= 1

    def _learn(self, start: float, held: float, inflight: int, dropped: bool) -> None:
        """Feed one finished call to the adaptive limit and apply the limit it then gives."""
        adaptive = self._adaptive
        assert adaptive is not None  # called only with one
        try:
            adaptive.on_sample(start, held, inflight, dropped)
            limit = adaptive.limit
        except Exception as failure:  # a limit's bug never changes a call's answer
            observer_failed(adaptive, "on_sample", failure)
            return
        if limit != self._max_active and isinstance(limit, int) and limit >= 1:
            self._set_limit(limit)

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
        self._busy, self._predicted_busy, self._standing_busy = templates
        if self._standing_derived:
            self._standing_limit = min(self._max_queue, STANDING_SLOTS_FACTOR * limit)
        waiters = self._waiters
        while waiters and self._active < limit:
            self._active += 1
            self._hand_off()

    def _templates(
        self, limit: int
    ) -> tuple[ServerBusyTemplate, _FlaggedBusyTemplate, _FlaggedBusyTemplate]:
        """The SERVER_BUSY envelopes for ``limit`` slots (details report the limit in force)."""
        return (
            ServerBusyTemplate(self._name, limit, self._max_queue),
            _FlaggedBusyTemplate(self._name, limit, self._max_queue, "predicted"),
            _FlaggedBusyTemplate(self._name, limit, self._max_queue, "standing"),
        )

    def _hand_off(self) -> None:
        """Give the released slot to the next waiter; ``active`` is unchanged (no barging)."""
        waiters = self._waiters
        newest = self._lifo and self._standing(self._clock())
        waiter, _ = waiters.popitem(last=newest)
        self._handoffs += 1
        waiter.granted = True
        waiter.event.set()

    def _overloaded(self, now: float) -> bool:
        """Sustained overload (see ``_overload.py``), from the counters kept anyway."""
        arrivals = (
            self._admitted
            + self._shed_full
            + self._shed_timeout
            + self._cancelled_queued
            + len(self._waiters)
        )
        self._overload.observe(now, arrivals, self._service.mean)
        return self._overload.overloaded(self._max_active)

    def _standing(self, now: float) -> bool:
        """CoDel's test: the queue is standing when it has not been empty for ``standing_after``
        seconds (``_last_empty`` is stamped by arrivals that find it empty)."""
        return bool(self._waiters) and now - self._last_empty > self._standing_after

    # -- shedding -------------------------------------------------------------------------------

    def _shed(self, reason: ShedReason, queued: int, predicted: bool = False) -> ServerBusy:
        """ServerBusy for ``reason`` (used by subclasses, e.g. the distributed guard)."""
        return self._refuse(reason, queued, self._predicted_busy if predicted else self._busy)

    def _refuse(self, reason: ShedReason, queued: int, template: ServerBusyTemplate) -> ServerBusy:
        active = self._active
        now = self._clock()
        service = self._service
        in_flight = now - self._latest_start
        step = service.hold(in_flight) / self._max_active
        # While the hold is the prior alone, the promise does not wait out the queue ahead: a
        # caller back too early waits in the queue, whose timeout absorbs a prior that was too
        # long, whereas one sent away for the whole queue's drain on such a prior comes back to
        # idle slots (a fresh 2-slot tool of 50 ms calls, its queue of 20 full, took 1.94x the
        # ideal drain time). Once measured, the k-th refusal waits for the queue ahead.
        ahead = 0 if service.guessing(in_flight) else queued
        retry_after = self._promises.promise(now, ahead, step)
        if reason == "queue_full":
            self._shed_full += 1
            self._shed_standing += template is self._standing_busy
        else:
            self._shed_timeout += 1
            self._predicted += template is self._predicted_busy
        observer = self._observer
        if observer is not None:
            try:
                observer.shed(reason, active, queued, retry_after)
            except Exception as failure:  # observers never change an outcome
                observer_failed(observer, "shed", failure)
        response = template.render(reason, active, queued, retry_after)
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
