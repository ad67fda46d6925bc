"""The slot: one call's hold on a guard, from its entry to its end, and the one report of it.

``Slot`` is the listener of Netflix's concurrency-limits: every admitted call ends through it,
once (``_end``), and its end is what the rest learns from: the service time, the adaptive limit
(through the core's ``learn``), the next waiter (``Core.release``), the observer. The slot is
also the one owner of the call's deadline and the one reporter of its end, with the outcome its
leaver hands it (``leave(..., outcome)``: the Guard's ticket knows an error envelope from a
success; a bare guard's caller gets ``ok``, or what its exception says). The free path
(a slot free at arrival: ``__aenter__``, ``_hold``, ``__aexit__``, ``_end``) is written out in
full, without a call it could spare: it is what nearly every call of a guard not overloaded
costs.

Variants compose what a call holds besides a local slot: ``_ClientSlot`` a client's record
(fair shares, the per-client cap), ``_PermitSlot`` a :class:`Permit` such as a fleet lease.
A tool without a concurrency limit has slots too (``Unbounded``): always free, holding nothing,
they keep its calls' deadlines and report their ends the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import ClassVar, Protocol, Self, runtime_checkable

import anyio

from .._exceptions import HandlerTimeout
from .._observer import (
    Outcome,
    ToolObserver,
    bind_priorities,
    observer_failed,
    outcome_of,
    overload_raised,
)
from .._priority import DEFAULT_RANK, Priority, check_priority
from ._core import Core
from ._deadline import Deadline, Timeouts
from ._feedback import Seat
from ._refusal import Refusals

__all__ = ["Permit", "Slot", "Unbounded", "UnboundedSlot"]


class Slot:
    """One call's hold on a guard slot: an async context manager, used once.

    ``queue_wait`` is the time spent queued (0.0 when a slot was free). With a ``timeout`` the
    body runs under a deadline; past it the body is cancelled, the slot freed, and
    :class:`~fusion_guard.HandlerTimeout` raised. ``release()`` is idempotent.
    """

    __slots__ = (
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
        if core.active < core.max_active:  # free slot: take it without yielding
            core.active += 1
            return self._hold(0.0, core.observer)
        return self._hold(await core.wait(None), core.observer)

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
        if capacity is not None:
            self._seat = capacity.seat(self._client)
        self._inflight = core.active  # itself included: what an adaptive limit learns from
        self._rank = core.admitted  # calls that took a slot before it: _rank - 1
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
        if self._deadline is None:  # no deadline to tell apart: the hold simply ends
            if exc is None:
                self._end("ok")
            else:
                self._raised(exc)
            return False
        return self.leave(exc_type, exc, tb)

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
            if client is not None:  # FairQueue.ended: its client's record counts one fewer
                core.fair.ended(client)  # type: ignore[union-attr]  # kept from the first key
            held = core.clock() - self._start
            reached_tool = self._reached_tool
            if reached_tool:
                core.service.observe(held)
            learn = core.learn
            if learn is not None:
                # Of the calls that took a slot before this one, at least this many still hold
                # one (even if every call ended so far was among them): it overtook them.
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
            ends = self._ends
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

    def _end(self, outcome: Outcome) -> None:
        if self._held:
            levels = self._core.levels
            if levels is not None:  # before the slot is handed on: the share counts it gone
                levels.ended(self._level)
        super()._end(outcome)


@runtime_checkable
class Permit(Protocol):
    """Something a call must hold besides its local slot, composed into a guard with
    ``ConcurrencyGuard(permit=...)``: a fleet-wide lease in Redis, say. ``take`` is awaited once
    the local slot is held, ``deadline`` being the call's arrival plus ``queue_timeout`` (the
    guard's clock); it returns a token for ``give_back`` (None: nothing to give back, e.g.
    admitted by a failure policy), raises ``TimeoutError`` when no permit came by the deadline
    (the guard then refuses the call ``queue_timeout``, counted, reported and advised like its
    own refusals), or raises a :class:`~fusion_guard.ServerBusy` of its own, which passes as it
    is. ``give_back`` is awaited, shielded, before the local slot is released. A permit whose
    class sets ``takes_rank = True`` is called ``take(deadline, rank)``, ``rank`` being the
    call's priority (``Priority.rank``), so that a refusal it reports counts under it."""

    async def take(self, deadline: float) -> object | None: ...

    async def give_back(self, token: object) -> None: ...


class _PermitSlot(_LevelSlot):
    """A slot of a guard with a permit: the local slot, then the permit (awaited), given back in
    the opposite order. The permit sees nothing of the guard: only its deadline."""

    __slots__ = ("_permit", "_refusals", "_token")
    leaves_at_once: ClassVar[bool] = False  # the permit is given back (awaited) first

    def __init__(
        self,
        core: Core,
        timeout: float | None,
        client: str | None,
        permit: Permit,
        refusals: Refusals,
        level: int = DEFAULT_RANK,
    ) -> None:
        super().__init__(core, timeout, client, level)
        self._permit = permit
        self._refusals = refusals
        self._token: object | None = None

    async def __aenter__(self) -> _PermitSlot:
        # Slot.__aenter__ with one step more, the permit, between taking the local slot and
        # counting the call admitted (a call refused its permit was never admitted).
        core = self._core
        arrival = core.clock()
        if self._client is not None or core.fair is not None:
            if not core.arrive(self._client, self._level):
                await core.wait_as_client(self._client, self._level)
        elif core.active < core.max_active:  # a free local slot, taken without yielding
            core.active += 1
        else:
            await core.wait(None)  # sheds (and reports) queue_full or queue_timeout
        try:
            permit, deadline = self._permit, arrival + core.queue_timeout
            if getattr(permit, "takes_rank", False) is True:
                self._token = await permit.take(deadline, self._level)  # type: ignore[call-arg]
            else:
                self._token = await permit.take(deadline)
        except TimeoutError:  # no permit in time: the guard's own refusal
            refusals = self._refusals
            # Counted and advised while the local slot is still held, as every refusal is.
            busy = refusals.refuse(
                "queue_timeout", len(core.waiters), refusals.busy, None, None, self._level
            )
            self._give_back_local()
            raise busy from None
        except BaseException as failure:
            self._give_back_local()
            ends = core.ends
            if ends is not None and isinstance(failure, anyio.get_cancelled_exc_class()):
                # Cancelled waiting for its permit: the call's end (no duration, never run).
                try:
                    ends.finished("cancelled", None)
                except Exception as broken:  # observers never change an outcome
                    observer_failed(ends, "finished", broken)
            raise
        return self._hold(core.clock() - arrival, core.ranked[self._level])

    def _give_back_local(self) -> None:
        """The local slot of a call refused its permit (or cancelled waiting for it)."""
        core = self._core
        if self._client is not None:
            core.fair.ended(self._client)  # type: ignore[union-attr]  # kept
        if core.levels is not None:
            core.levels.ended(self._level)
        core.release()

    def take_free(self) -> bool:
        return False  # a local slot is not enough: the permit is awaited (``__aenter__``)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return await self.aleave(exc_type, exc, tb)

    async def aleave(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        outcome: Outcome = "ok",
    ) -> bool:
        token, self._token = self._token, None
        if token is not None:
            clock = self._core.clock
            giving = clock()
            # Shielded: a body cancelled by its deadline must still give its permit back.
            with anyio.CancelScope(shield=True):
                await self._permit.give_back(token)
            # The hold an adaptive limit learns from is the call's, not the permit's round trip
            # (a Redis that stalls is not a tool that slowed down).
            self._start += clock() - giving
        return self.leave(exc_type, exc, tb, outcome)

    async def arelease(self) -> None:
        """Give the permit and the local slot back (for slots taken with ``acquire()``)."""
        await self.__aexit__(None, None, None)


class Unbounded:
    """The slots of a tool without a concurrency limit (the Guard's gate of such a tool): every
    call takes one at once and waits for nothing. Its slots hold nothing but what every call's
    slot owns, the call's deadline and the report of its end, so that a tool with slots and one
    without end their calls the same way. ``observer`` hears ``admitted`` and ``finished``;
    ``clock``: monotonic seconds, for the durations reported."""

    __slots__ = ("clock", "observer", "ranked", "timeouts")

    def __init__(
        self, tool: str, observer: ToolObserver, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.observer = observer
        self.ranked = bind_priorities(observer)  # each priority's, for its calls' admissions
        self.timeouts = Timeouts(tool)  # what a deadline's expiry raises, kept rendered
        self.clock = clock

    def slot(
        self,
        timeout: float | None = None,
        client: str | None = None,
        priority: Priority | str | None = None,
    ) -> UnboundedSlot:
        """A slot under ``timeout`` (None: no deadline); ``client`` and ``priority`` change
        nothing here (nothing waits) but the observer of ``priority``'s calls hears of it."""
        if priority is None:
            return UnboundedSlot(self, timeout, self.observer)
        return UnboundedSlot(self, timeout, self.ranked[check_priority("priority", priority).rank])


class UnboundedSlot(Slot):
    """One call's slot of ``Unbounded``: always free, taken without a coroutine. ``Slot``'s way
    of leaving (the deadline told apart, the end reported once) is inherited; nothing is given
    back."""

    __slots__ = ("_observer", "_slots")

    def __init__(self, slots: Unbounded, timeout: float | None, observer: ToolObserver) -> None:
        # No core to hold a place in: only what leaving needs (Slot.__init__ is not called).
        self._slots = slots
        self._observer = observer  # its priority's (the admission) and the tool's (the end)
        self._timeout = timeout
        self._client = None
        self._deadline: Deadline | None = None
        self._held = False
        self.queue_wait = 0.0

    async def __aenter__(self) -> UnboundedSlot:
        self.take_free()
        return self

    def take_free(self) -> bool:
        slots = self._slots
        observer = self._observer
        try:
            observer.admitted(0.0)
        except Exception as failure:  # observers never change an outcome
            observer_failed(observer, "admitted", failure)
        self._held = True
        self._ends = slots.observer
        self._start = slots.clock()
        if self._timeout is not None:
            self._deadline = Deadline(self._timeout)
        return True

    def _timed_out(self) -> HandlerTimeout:
        return self._slots.timeouts.refusal(self._timeout or 0.0)

    def caught(self, exc: BaseException) -> None:
        pass  # no limit to tell

    def _now(self) -> float:
        return self._slots.clock()

    def _end(self, outcome: Outcome) -> None:
        if self._held:
            self.report(outcome)
            self._held = False
