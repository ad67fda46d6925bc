"""The slot: one call's hold on a guard, from its entry to its end, and the one report of it.

``Slot`` is the listener of Netflix's concurrency-limits: every admitted call ends through it,
once (``_end``), and its end is what the rest learns from: the service time, the adaptive limit
(through the core's ``learn``), the next waiter (``Core.release``), the observer. The slot is
also the one owner of the call's deadline and the one reporter of its end, with the outcome its
leaver hands it (``leave(..., outcome)``: the Guard's ticket knows an error envelope from a
success; a bare guard's caller gets ``ok``, or what its exception says). The free path
(a slot free at arrival, under a fixed limit: ``__aenter__`` then ``__aexit__``, which write
out ``_hold`` and ``_end``) is written out in full, without a call it could spare: it is what
nearly every call of a guard not overloaded costs. Every other way in and out goes through
``_hold`` and ``_end``.

Variants compose what a call holds besides a local slot: ``_ClientSlot`` a client's record
(fair shares, the per-client cap), ``_LevelSlot`` a priority; ``_PermitSlot`` (``_permit.py``) a
:class:`Permit` such as a fleet lease. A tool without a concurrency limit has slots too
(``Unbounded``, ``_unbounded.py``): always free, holding nothing, they keep its calls'
deadlines and report their ends the same way.
"""

from __future__ import annotations

from types import TracebackType
from typing import ClassVar, Self

from .._exceptions import HandlerTimeout
from .._observer import Outcome, ToolObserver, observer_failed, outcome_of, overload_raised
from ._core import Core
from ._deadline import Deadline
from ._feedback import Seat

__all__ = ["Slot"]


class Slot:
    """One call's hold on a guard slot: an async context manager, used once.

    ``queue_wait`` is the time spent queued (0.0 when a slot was free). With a ``timeout`` the
    body runs under a deadline; past it the body is cancelled, the slot freed, and
    :class:`~fusion_guard.HandlerTimeout` raised. ``release()`` is idempotent.
    """

    __slots__ = (
        "_alone",
        "_client",
        "_core",
        "_deadline",
        "_ends",
        "_held",
        "_inflight",
        "_overload",
        "_rank",
        "_reached_tool",
        "_seat",
        "_start",
        "_timeout",
        "queue_wait",
    )

    _seat: Seat  # its place in the core's capacity feedback (under an adaptive limit)

    def __init__(self, core: Core, timeout: float | None, client: str | None = None) -> None:
        self._core = core
        self._timeout = timeout
        self._client = client  # the caller's key (a plain slot's call is keyless)
        self._deadline: Deadline | None = None
        self._held = False
        self._overload = False  # its answer or exception said the tool is overloaded
        self.queue_wait = 0.0

    #: Whether ``leave`` ends the hold (a fleet slot must also give its lease back, awaited).
    leaves_at_once: ClassVar[bool] = True

    async def __aenter__(self) -> Slot:
        core = self._core
        active = core.active
        if active >= core.max_active:  # no free slot: queue (or be refused there)
            return self._hold(await core.wait(None), core.observer)
        # A free slot, taken without yielding: ``_hold(0.0, core.observer)`` written out, as
        # ``_end`` writes out ``Core.release``. This is what nearly every call of a guard not
        # overloaded costs, and the call spared is 4 % of it (``benchmarks/ab_concurrency.py``).
        core.active = active = active + 1
        core.admitted += 1
        observer = core.observer
        if observer is not None:
            try:
                observer.admitted(0.0)
            except Exception as failure:  # observers never change an outcome
                observer_failed(observer, "admitted", failure)
        self._held = True
        self._ends = core.ends
        self._reached_tool = True
        capacity = core.capacity
        if capacity is not None:
            self._seat = capacity.seat(self._client)
            self._inflight = active
            self._rank = core.admitted
        else:
            self._alone = active == 1
        self._start = core.latest_start = core.clock()
        if self._timeout is not None:
            self._deadline = Deadline(self._timeout)
        return self

    def take_free(self) -> bool:
        """Take a free slot without a coroutine: True when taken (held as after ``async with``),
        False when the caller must enter with ``await slot.__aenter__()`` (it would queue).
        The Guard's tickets use it so an uncontended call costs one coroutine less. A call over
        its client's ``max_active_per_client`` raises ``ServerBusy`` (``client_limit``)."""
        core = self._core
        if core.active < core.max_active:
            core.active += 1
            self._hold(0.0, core.observer)
            return True
        return False

    def _hold(self, queue_wait: float, observer: ToolObserver | None) -> Self:
        """The slot is ours after ``queue_wait`` seconds: count it, report it to ``observer``
        (the core's, or its priority's: ``core.ranked``, passed in so that a call without a
        priority pays nothing for the choice), start the clock (and the deadline). Variants
        that take more than a local slot end their entry here."""
        core = self._core
        self.queue_wait = queue_wait
        core.admitted += 1
        if observer is not None:
            try:
                observer.admitted(queue_wait)
            except Exception as failure:  # observers never change an outcome
                observer_failed(observer, "admitted", failure)
        self._held = True
        self._ends = core.ends  # who hears the call's end, once (``report`` may tell it early)
        self._reached_tool = True
        capacity = core.capacity
        if capacity is not None:  # an adaptive limit's (set with core.learn): what it learns from
            self._seat = capacity.seat(self._client)
            self._inflight = core.active  # itself included
            self._rank = core.admitted  # calls that took a slot before it: _rank - 1
        else:  # found the guard empty: a hold the service time samples (``_service_time.py``)
            self._alone = core.active == 1 and not queue_wait
        self._start = core.latest_start = core.clock()
        if self._timeout is not None:
            self._deadline = Deadline(self._timeout)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._deadline is not None or exc is not None:
            return self.leave(exc_type, exc, tb)  # a deadline to tell apart, or a raised body
        core = self._core
        if core.learn is not None or not self._held:
            self._end("ok")
            return False
        # ``_end("ok")`` of a call under a fixed limit, written out as ``_hold`` is in
        # ``__aenter__``: the free path's end, the call spared 3-4 % of it (measured with
        # ``benchmarks/ab_concurrency.py``). A variant with an end of its own (``_end``
        # overridden) leaves through ``leave`` instead (``test_concurrency_basic.py`` pins it).
        self._held = False
        client = self._client
        if client is not None:  # as in ``_end`` (see there)
            fair = core.fair
            fair.records[client].running -= 1  # type: ignore[union-attr]  # kept
            fair.keyed_active -= 1  # type: ignore[union-attr]  # from the first key
        ends = self._ends
        if self._alone and next(core.service.skips, False):  # a hold not sampled
            held = 0.0 if ends is None else core.clock() - self._start
        else:
            held = core.clock() - self._start
            if self._reached_tool:
                core.service.observe(held, self._alone)
        if core.waiters and core.active <= core.max_active:  # Core.release, as in ``_end``
            core.hand_off()
        else:
            core.active -= 1
        if ends is not None:
            try:
                ends.finished("ok", held)
            except Exception as failure:  # observers never change an outcome
                observer_failed(ends, "finished", failure)
        return False

    def leave(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        outcome: Outcome = "ok",
    ) -> bool:
        """``__aexit__`` without a coroutine, for slots that ``leaves_at_once``: end the hold
        and the deadline, and report the call's end: ``outcome`` when the body raised nothing
        (the Guard's ticket passes how the call answered), else what its exception says.
        Raises ``HandlerTimeout`` when the deadline cancelled the body."""
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
                raise self._timed_out() from None
        if exc is None:
            self._end(outcome)
        else:
            self._raised(exc)
        return False

    async def aleave(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        outcome: Outcome = "ok",
    ) -> bool:
        """``leave`` for any slot, awaited: a fleet slot gives its permit back first."""
        return self.leave(exc_type, exc, tb, outcome)

    def _timed_out(self) -> HandlerTimeout:
        return self._core.timed_out(self._timeout or 0.0)

    def report(self, outcome: Outcome) -> None:
        """Report now that the call ended with ``outcome`` (``Ticket.complete``), while the
        slot is still held; its end then reports nothing more. Once at most."""
        if not self._held:  # not taken (refused, or never entered), or ended already
            return
        ends = self._ends
        if ends is not None:
            self._ends = None
            try:
                ends.finished(outcome, self._now() - self._start)
            except Exception as failure:  # observers never change an outcome
                observer_failed(ends, "finished", failure)

    def _now(self) -> float:
        return self._core.clock()

    def release(self) -> None:
        """Give the slot back (to the next waiter, if any), the call reported ``ok``. Safe to
        call twice."""
        self._end("ok")

    def _raised(self, exc: BaseException) -> None:
        """The body raised ``exc``: end with the outcome it says, the limit told whether it says
        the tool is overloaded (a named overload error, a raised SERVER_BUSY, RATE_LIMITED or
        TIMEOUT envelope)."""
        self.caught(exc)
        self._end(outcome_of(exc))

    def caught(self, exc: BaseException) -> None:
        """Say that the call's body raised ``exc`` and its SDK caught it (an adapter answers it
        as an envelope): the limit learns whether it says the tool is overloaded, as when the
        body's exception leaves the slot itself. The outcome is the answer's."""
        if overload_raised(exc, self._core.overload_errors):
            self._overload = True

    def overloaded(self) -> None:
        """Say that the call's answer says the tool is overloaded (a SERVER_BUSY, RATE_LIMITED
        or TIMEOUT envelope: ``Ticket.answered``): an adaptive limit learns it as a drop. The
        outcome reported is still the answer's own."""
        self._overload = True

    def invalid_arguments(self) -> None:
        """Say that the call's arguments failed validation before the tool ran: its hold
        then tells nothing of the tool, and neither the adaptive limit nor the service time
        learns from it. The SDK adapters call it (through ``Ticket.invalid_arguments``)."""
        self._reached_tool = False

    def _end(self, outcome: Outcome) -> None:
        """Give the slot back and report how the call ended, once."""
        if self._held:
            self._held = False
            core = self._core
            client = self._client
            if client is not None:
                # FairQueue.ended, inlined (and in ``__aexit__``): the keyed hot path. Its two
                # counters are public figures of the fair queue, written here and at arrival
                # (``Waiting.arrive``, FairQueue.started inlined) rather than through its
                # method: the call cost the keyed slot 5 % (1.049x), near its 2x target.
                fair = core.fair
                fair.records[client].running -= 1  # type: ignore[union-attr]  # kept
                fair.keyed_active -= 1  # type: ignore[union-attr]  # from the first key
            ends = self._ends
            learn = core.learn
            if learn is None and self._alone and next(core.service.skips, False):
                # A hold the service time does not sample (``_service_time.py``, whose
                # countdown this draws from): measured only for whoever hears the call's end.
                held = 0.0 if ends is None else core.clock() - self._start
            else:
                held = core.clock() - self._start
                reached_tool = self._reached_tool
                if reached_tool:
                    core.service.observe(held, learn is None and self._alone)
                if learn is not None:
                    # Of the calls that took a slot before this one, at least this many still
                    # hold one (even if every call ended so far was among them): it overtook
                    # them.
                    overtook = max(0, self._rank - 1 - core.ended)
                    core.ended += 1
                    learn(
                        self._seat,
                        self._start,
                        held,
                        self._inflight,
                        self._timeout,
                        outcome,
                        self._overload,
                        overtook,
                        reached_tool,
                    )
            # Core.release, inlined: the free path. Above a lowered limit the slot is not
            # handed on: the calls in flight drain first.
            if core.waiters and core.active <= core.max_active:
                core.hand_off()
            else:
                core.active -= 1
            if ends is not None:
                try:
                    ends.finished(outcome, held)
                except Exception as failure:  # observers never change an outcome
                    observer_failed(ends, "finished", failure)


class _ClientSlot(Slot):
    """A slot of a call in a guard that keeps clients' records (fair shares, the per-client
    cap): the call belongs to its client (``client`` None: the keyless client) from arrival to
    release. Its own type, so that a guard without client keys pays nothing for them."""

    __slots__ = ()

    async def __aenter__(self) -> Slot:
        core = self._core
        if core.arrive(self._client):
            return self._hold(0.0, core.observer)
        return self._hold(await core.wait_as_client(self._client), core.observer)

    def take_free(self) -> bool:
        core = self._core
        if core.active < core.max_active:
            core.arrive(self._client)  # takes the free slot, or refuses over the cap
            self._hold(0.0, core.observer)
            return True
        return False


class _LevelSlot(_ClientSlot):
    """A slot of a call with a priority (``level``, its rank: see ``_levels.py``) in a guard
    that keeps clients' records. Its own type, so that calls without a priority pay nothing for
    priorities."""

    __slots__ = ("_level",)

    def __init__(self, core: Core, timeout: float | None, client: str | None, level: int) -> None:
        super().__init__(core, timeout, client)
        self._level = level

    async def __aenter__(self) -> Slot:
        core = self._core
        if core.arrive(self._client, self._level):
            return self._hold(0.0, core.ranked[self._level])
        queue_wait = await core.wait_as_client(self._client, self._level)
        return self._hold(queue_wait, core.ranked[self._level])

    def take_free(self) -> bool:
        core = self._core
        if core.active < core.max_active and core.arrive(self._client, self._level):
            self._hold(0.0, core.ranked[self._level])
            return True
        return False

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return self.leave(exc_type, exc, tb)  # its own end, not the one Slot's writes out

    def _end(self, outcome: Outcome) -> None:
        if self._held:
            levels = self._core.levels
            if levels is not None:  # before the slot is handed on: the share counts it gone
                levels.ended(self._level)
        super()._end(outcome)
