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
nothing of the guard but the call's deadline.

The guard is the *limiter*: it has its settings checked and the parts of the admission core
made (``_assembly.py``, ``docs/admission-core.md``), makes each call's slot and keeps the public
figures. The parts: the state they share (``_core.py``), the slot (``_slot.py``; with a permit,
``_permit.py``), the arrival at a taken guard and the queue (``_waiting.py``, ``_queue.py``),
what finished calls teach an adaptive limit (``_learning.py``), and the refusals
(``_refusal.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from .._checks import check_seconds
from .._exceptions import ConfigurationError
from .._keys import MAX_KEY_CHARS, bounded_key
from .._observer import ToolObserver
from .._priority import DEFAULT_PRIORITY_SHARE, DEFAULT_RANK, Priority, check_priority
from ._assembly import assemble
from ._core import Core
from ._learning import QUEUE_PER_PARALLEL_CALL, QUEUE_PER_SLOT, LimitLearning, default_max_queue
from ._limit import Limit
from ._permit import Permit, _PermitSlot
from ._slot import Slot, _ClientSlot, _LevelSlot

__all__ = [
    "QUEUE_PER_PARALLEL_CALL",
    "QUEUE_PER_SLOT",
    "ConcurrencyGuard",
    "ConcurrencyStatistics",
    "Permit",
    "Slot",
    "default_max_queue",
]


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
    paced_rate: float | None = None
    """Under an adaptive limit, the pace in force (calls/s) while the tool is paced for refusing
    by rate (``docs/overload-errors.md``); None when not paced."""
    pace_timer_running: bool = False
    """Whether the timer spacing the paced admissions runs now."""


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
    Calls given a ``priority`` (``slot(priority=...)``) are served highest priority first, and
    calls below ``interactive`` hold at most ``priority_share`` of the slots while calls above
    them wait or arrived lately (``_levels.py``).

    ``overload_errors``: exception classes the tool raises when it is overloaded (a pool with no
    free connection, an upstream's 429): under an adaptive limit a call that raised one is a
    drop, as a timeout is (``_feedback.py``; ``docs/overload-errors.md``).

    ``observer`` (a ``ToolObserver``) hears of every call: ``shed``, or ``admitted`` then
    ``finished(outcome, duration)`` (``ok``; ``timeout``; ``cancelled``; ``error`` for a raised
    envelope or refusal, ``internal_error`` for another exception), a caller cancelled while
    queued ``finished("cancelled", None)``. Each call's slot is the one reporter of its end
    (the Guard's tickets hand their slot how the call answered). What the observer raises is
    logged once and never changes an outcome. ``reports_finished=False`` (deprecated: a
    ``DeprecationWarning``) keeps the ``finished`` reports from the observer, for a caller that
    reports the ends itself.
    """

    __slots__ = (
        "__weakref__",
        "_adaptive",
        "_core",
        "_fair_order",
        "_keyed",
        "_learning",
        "_per_client",
        "_permit",
        "_refusals",
        "_reports_finished",
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
        reports_finished: bool | None = None,
        priority_share: float = DEFAULT_PRIORITY_SHARE,
        overload_errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        parts = assemble(
            max_active, max_queue, queue_timeout, name=name, lifo=lifo,
            standing_after=standing_after, standing_limit=standing_limit, observer=observer,
            expected_service_time=expected_service_time, max_retry_after=max_retry_after,
            predictive=predictive, clock=clock, limit=limit, permit=permit, fair=fair,
            max_active_per_client=max_active_per_client, reports_finished=reports_finished,
            priority_share=priority_share, overload_errors=overload_errors,
        )  # fmt: skip
        self._core = parts.core
        self._refusals = parts.refusals
        self._adaptive = parts.adaptive
        self._fair_order = parts.fair
        self._per_client = parts.per_client
        # Whether client keys matter here; their records start with the first key.
        self._keyed = parts.fair or parts.per_client is not None
        self._permit = parts.permit
        self._reports_finished = parts.reports_finished
        self._learning = parts.learning

    # -- admission ------------------------------------------------------------------------------

    def slot(
        self,
        timeout: float | None = None,
        client: str | None = None,
        priority: Priority | str | None = None,
    ) -> Slot:
        """``async with guard.slot():`` runs the body holding a slot.

        Raises :class:`~fusion_guard.ServerBusy` when shed; with ``timeout`` (seconds), the body
        is cancelled past that deadline and :class:`~fusion_guard.HandlerTimeout` raised.
        ``client``: the caller's key, for fair shares and ``max_active_per_client`` (never
        shown anywhere; a key over ``MAX_KEY_CHARS`` characters is kept as its digest).
        ``priority``: a :class:`~fusion_guard.Priority` or its name (None: ``interactive``);
        waiting calls are served highest priority first (``docs/priorities.md``).
        """
        if priority is not None:
            level = check_priority("priority", priority).rank
            if level != DEFAULT_RANK or self._core.levels is not None:
                return self._level_slot(timeout, client, level)
        # check_seconds, skipped for a positive float (every call of a Guard's tool passes its
        # checked timeout): NaN and anything else are checked, and refused there.
        if timeout is not None and not (timeout.__class__ is float and timeout > 0.0):
            timeout = check_seconds("timeout", timeout, allow_inf=True)
        core = self._core
        if (client is not None and self._keyed) or core.fair is not None:
            if client is not None and client.__class__ is not str:
                raise TypeError(
                    f"client={type(client).__name__} is invalid: expected a str or None"
                )
            if client is not None and len(client) > MAX_KEY_CHARS:
                client = bounded_key(client)  # a client's records keep a bounded key
            if self._permit is None:
                return _ClientSlot(core, timeout, client)
            return _PermitSlot(core, timeout, client, self._permit, self._refusals)
        if core.active >= core.max_active:
            queued = len(core.waiters)
            if queued >= core.max_queue:
                # A full guard refuses at the call, before a slot object or a coroutine exists:
                # under overload most calls take this path, so it costs little beyond the envelope.
                refusals = self._refusals
                raise refusals.refuse("queue_full", queued, refusals.busy)
        if self._permit is None:
            return Slot(core, timeout)
        return _PermitSlot(core, timeout, None, self._permit, self._refusals)

    def _level_slot(self, timeout: float | None, client: str | None, level: int) -> Slot:
        """The slot of a call with a priority (the checks of ``slot``, then ``_LevelSlot``)."""
        if timeout is not None:
            timeout = check_seconds("timeout", timeout, allow_inf=True)
        if client is not None:
            if client.__class__ is not str:
                raise TypeError(
                    f"client={type(client).__name__} is invalid: expected a str or None"
                )
            if len(client) > MAX_KEY_CHARS:
                client = bounded_key(client)
        core = self._core
        if self._permit is None:
            return _LevelSlot(core, timeout, client, level)
        return _PermitSlot(core, timeout, client, self._permit, self._refusals, level)

    async def acquire(self, client: str | None = None) -> Slot:
        """Wait for a slot like ``slot()`` does and return it held; call ``release()`` on it
        (``await arelease()`` with a permit, which is given back first)."""
        held = self.slot(None, client)
        await held.__aenter__()
        return held

    def acquire_nowait(self) -> Slot:
        """Take a free slot or raise ``anyio.WouldBlock`` (never queues, never sheds)."""
        if self._permit is not None:
            raise ConfigurationError(
                f"{type(self).__name__}.acquire_nowait() is not available with a permit to"
                " await (a fleet lease): use `await guard.acquire()` or `async with guard.slot()`"
            )
        slot = Slot(self._core, None)
        if not slot.take_free():
            raise anyio.WouldBlock
        return slot

    # -- public figures -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._core.name

    @property
    def active(self) -> int:
        """Calls holding a slot now."""
        return self._core.active

    @property
    def queued(self) -> int:
        """Callers waiting for a slot now."""
        return len(self._core.waiters)

    @property
    def limit(self) -> int:
        """The number of calls that may run at once now: ``max_active``, or what the adaptive
        ``limit`` last decided."""
        return self._core.max_active

    @property
    def max_active(self) -> int:
        """An alias of ``limit``, under the name the constructor and the envelopes use (kept
        for code written against it)."""
        return self._core.max_active

    @property
    def observer(self) -> ToolObserver | None:
        """The observer given at construction."""
        return self._core.observer

    @property
    def permit(self) -> Permit | None:
        """What a call holds besides its local slot (a fleet lease), if anything."""
        return self._permit

    @property
    def adaptive_limit(self) -> Limit | None:
        """The adaptive limit deciding the slots, or None for a fixed ``max_active``."""
        return self._adaptive

    @property
    def overload_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions counted as the tool's overload (``overload_errors=``)."""
        return self._core.overload_errors

    @property
    def max_queue(self) -> int:
        return self._core.max_queue

    @property
    def queue_timeout(self) -> float:
        return self._core.queue_timeout

    @property
    def lifo(self) -> bool:
        return self._core.discipline.lifo

    @property
    def standing_limit(self) -> int:
        return self._core.discipline.standing_limit

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
        """Whether the observer hears how each call ended (``finished(outcome, duration)``)
        from the slots: true unless the guard was made with the deprecated
        ``reports_finished=False``. (A caller that knows more of a call's answer than its
        exception hands the outcome to the slot instead: ``Slot.leave(..., outcome)``.)"""
        return self._reports_finished

    def statistics(self) -> ConcurrencyStatistics:
        return _statistics(self._core, self._learning)

    def stop_pacing(self) -> None:
        """Stop the timer that spaces a paced tool's admissions at once (no callback or task is
        left behind), and stop pacing: calls still waiting are admitted as calls end. A guard's
        ``aclose`` calls it; a rate-shaped error of a call still running paces again."""
        if self._learning is not None:
            self._learning.stop_pacing()

    def __repr__(self) -> str:
        core = self._core
        return (
            f"ConcurrencyGuard(name={core.name!r}, active={core.active}/{core.max_active},"
            f" queued={len(core.waiters)}/{core.max_queue}, queue_timeout={core.queue_timeout},"
            f" lifo={core.discipline.lifo})"
        )


# -- figures ----------------------------------------------------------------------------------


def _statistics(core: Core, learning: LimitLearning | None) -> ConcurrencyStatistics:
    return ConcurrencyStatistics(
        name=core.name,
        max_active=core.max_active,
        max_queue=core.max_queue,
        active=core.active,
        queued=len(core.waiters),
        admitted=core.admitted,
        shed_queue_full=core.shed_full,
        shed_standing=core.shed_standing,
        shed_queue_timeout=core.shed_timeout,
        shed_predicted=core.predicted,
        shed_fair_share=core.shed_fair,
        shed_client_limit=core.shed_client,
        clients=0 if core.fair is None else core.fair.clients,
        cancelled_queued=core.cancelled_queued,
        handler_timeouts=core.handler_timeouts,
        mean_service_time=core.service.mean,
        service_samples=core.service.samples,
        paced_rate=None if learning is None else learning.paced_rate,
        pace_timer_running=learning is not None and learning.pace_timer_running,
    )
