"""``Guard``: one object wrapping every tool call of a server with its limits.

A call goes through, in this order: the rate limits (a refused call never takes a slot or a
queue place), the concurrency slot (queueing, or SERVER_BUSY), then the handler under its
deadline (TIMEOUT). Every decision is reported once to the tool's observer: ``rate_limited``,
``shed``, or ``admitted`` then ``finished(outcome, duration)``; a call cancelled while queued ends
with ``finished("cancelled", None)``.

``Guard.admit`` is the primitive the SDK adapters use; ``Guard.call`` and ``Guard.protect`` add
the normalisation of what the handler returned or raised into a ``ToolResponse``.

Lifecycle: with ``BACKEND=redis`` a guard opens Redis connections (and, for fleet slots, the
task refreshing their leases) on first use. ``await guard.aclose()`` (or leaving ``async with
Guard(...)``) closes them for good; ``guard.lifespan()`` wraps a server's lifespan (the SDK
adapters put it around theirs), closing them when the last server using the guard stops, to
open again with the next call.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import anyio

from ._clock import Clock, monotonic
from ._exceptions import (
    ConfigurationError,
    GuardClosed,
    RateLimited,
    Rejected,
)
from ._gates import OVERFLOW_TOOL, Gate, GateAssembly, GateTable, Slots
from ._keys import MAX_KEY_CHARS, bounded_key
from ._log import log_event
from ._observer import (
    GuardObserver,
    Outcome,
    observer_failed,
    overload_response,
    response_outcome,
)
from ._outcomes import response_from_exception
from ._policy import PolicyTable, ToolLimits, specificity
from ._priority import DEFAULT_RANK, PRIORITY_NAMES, Priority, check_priority
from .admission._concurrency import Slot
from .admission._context import CallContext
from .admission._rate import RateLimiter
from .backends._base import RateBackend
from .backends._memory import MemoryBackend
from .observability._defaults import default_observers
from .wire._internal import as_response
from .wire._response import ToolResponse

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from .config._settings import GuardSettings

__all__ = ["MAX_TOOLS", "OVERFLOW_TOOL", "Guard", "Ticket", "admitted_call"]

P = ParamSpec("P")

_DEFAULT_PRIORITY = PRIORITY_NAMES[DEFAULT_RANK]
"""``Priority.INTERACTIVE``, read once: an enum member's look-up costs a tenth of a refusal."""

MAX_TOOLS = 1024
"""Distinct tool names a guard keeps a gate (and metric series) of its own for. Past it, a new
name shares the gate of the names that match the same configured patterns, so its limits still
apply; a name configured exactly always gets its own gate (``GateTable``, with
``OVERFLOW_TOOL`` for the names that match no configured pattern)."""


class Ticket:
    """One call through ``Guard.admit``: the async context manager and what it yields.

    ``outcome`` starts as ``"ok"``; ``answered(response)`` sets it from the response the call
    answered (``"error"`` or ``"internal_error"`` for an error envelope), or set it yourself.
    When the block raises, the exception decides
    instead: cancellation is ``cancelled``, the deadline ``timeout``, a raised error envelope
    ``error``, anything else ``internal_error``. ``queue_wait``: seconds spent queued.
    ``complete(outcome)`` reports the end early; completion is idempotent (reported once).

    The call's slot (the tool's, or an always free one for a tool without a concurrency limit)
    owns its deadline and reports its end: the ticket hands it the outcome when it leaves.
    """

    __slots__ = ("_client", "_gate", "_priority", "_request", "_slot", "outcome", "queue_wait")

    def __init__(
        self,
        gate: Gate,
        client: str | None,
        request: object | None,
        priority: Priority | None = None,
    ) -> None:
        self._gate = gate
        self._client = client
        self._priority = priority  # None: interactive, the default
        self._request = request
        self._slot: Slot | None = None  # made once the rate limits let the call through
        self.outcome: Outcome | str = "ok"
        self.queue_wait = 0.0

    @property
    def tool(self) -> str:
        return self._gate.tool

    async def __aenter__(self) -> Ticket:
        slot = self._slot
        if slot is None:  # not entered part-way by admitted_call (rates decided, slot made)
            gate = self._gate
            rates = gate.rates
            if rates is not None:
                if rates.is_sync:  # in memory: decided without a coroutine
                    self._refused(gate, rates.check(self._context(gate)))
                else:  # a shared backend's decision may be cancelled too
                    await self._check_rates(gate, rates)
            slot = self._slot = gate.admission.slot(
                gate.limits.timeout, self._client, self._priority
            )
            if slot.take_free():
                self.queue_wait = slot.queue_wait
                return self
        # Reports admitted, or shed (raising ServerBusy), or a cancellation while queued.
        await slot.__aenter__()
        self.queue_wait = slot.queue_wait
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        # The slot frees itself, tells its deadline's expiry apart (raising HandlerTimeout) and
        # reports the end: the ticket's outcome, or what the block's exception says.
        slot: Slot = self._slot  # type: ignore[assignment]  # entered
        outcome: Outcome = self.outcome  # type: ignore[assignment]  # an Outcome, or the caller's word
        if slot.leaves_at_once:
            return slot.leave(exc_type, exc, tb, outcome)
        return await slot.aleave(exc_type, exc, tb, outcome)

    def answered(self, response: ToolResponse) -> None:
        """Say that the call answered ``response`` (returned, or made of what the handler
        raised): its outcome is ``response_outcome(response)``, the one rule the Guard and the
        adapters share. An answer of SERVER_BUSY, RATE_LIMITED or TIMEOUT also tells the tool's
        adaptive limit that the tool is overloaded (``docs/overload-errors.md``)."""
        self.outcome = response_outcome(response)
        if self.outcome == "error" and overload_response(response) and self._slot is not None:
            self._slot.overloaded()

    def caught(self, exc: BaseException) -> None:
        """Say that the call's body raised ``exc``, which its SDK caught and the adapter answers
        as an envelope: a named overload error (or one it was raised from) still tells the
        tool's adaptive limit that the tool is overloaded."""
        if self._slot is not None:
            self._slot.caught(exc)

    def invalid_arguments(self) -> None:
        """Say that the call's arguments failed validation before the tool ran (the SDK
        adapters do): the call is still reported, but the adaptive limit and the service time
        learn nothing from its hold, which says nothing of the tool."""
        if self._slot is not None:
            self._slot.invalid_arguments()

    def retried(self) -> None:
        """Say that the call is a client's retry (the SDK adapters read its attempt number):
        the tool's observer hears it, if it counts retries (its optional ``retried()``)."""
        self._tell("retried")

    def hint_ignored(self) -> None:
        """Say that the call's request carried a priority hint naming no priority (the SDK
        adapters ignore it): the tool's observer hears it, if it counts them (its optional
        ``priority_hint_ignored()``)."""
        self._tell("priority_hint_ignored")

    def _tell(self, event: str) -> None:
        observer = self._gate.observer
        heard = getattr(observer, event, None)  # optional: not every observer
        if heard is not None:
            try:
                heard()
            except Exception as failure:  # observers never change an outcome
                observer_failed(observer, event, failure)

    def complete(self, outcome: Outcome | str | None = None) -> None:
        """Report how the call ended (``outcome`` or the ticket's ``outcome``), once."""
        if self._slot is not None:
            self._slot.report(outcome or self.outcome)  # type: ignore[arg-type]

    def _context(self, gate: Gate) -> CallContext:
        if self._client is None and self._request is None and self._priority is None:
            return gate.context
        return CallContext(gate.tool, self._client, self._request, self._priority)

    async def _check_rates(self, gate: Gate, rates: RateLimiter) -> None:
        # A failing backend: the limiter applies the tool's failure policy (admit, or raise
        # SERVER_BUSY backend_unavailable).
        try:
            refusal = await rates.acheck(self._context(gate))
        except Exception:  # a refusal: reported where it was decided
            raise
        except anyio.get_cancelled_exc_class():  # looked up only for what is no Exception
            # Cancelled before it reached a slot: the one end no slot can report.
            observer = gate.observer
            try:
                observer.finished("cancelled", None)
            except Exception as failure:  # observers never change an outcome
                observer_failed(observer, "finished", failure)
            raise
        self._refused(gate, refusal)

    def _refused(self, gate: Gate, refusal: RateLimited | None) -> None:
        if refusal is not None:
            observer = gate.observer
            try:
                observer.rate_limited(refusal.scope, refusal.retry_after or 0.0, self._client)
            except Exception as failure:  # observers never change an outcome
                observer_failed(observer, "rate_limited", failure)
            raise refusal


R = TypeVar("R")


async def admitted_call(
    ticket: Ticket,
    call: Callable[[], Awaitable[R]],
    failed: Callable[[Any], bool],
    passthrough: tuple[type[BaseException], ...],
    current: ContextVar[Ticket | None],
) -> R | Rejected:
    """``async with ticket: result = await call()`` spelled out for the SDK adapters, so that
    the usual call (admitted at once, left at once) costs no coroutine for the ticket.

    What the call returned sets the ticket's outcome, unless decided inside the call already
    (``answered``): a ``ToolResponse`` by ``answered``, anything else ``error`` when ``failed``
    says so (an SDK's error result). An exception of ``passthrough`` (the SDK's own errors) ends
    the call as ``error`` and is raised once the slot is free; ``current`` holds the ticket while
    the call runs (for code the SDK runs inside it). A call refused at once (``RateLimited``,
    ``ServerBusy``) is not run: its refusal is returned, not raised (one refused later, while
    queued, is raised)."""
    # ``__aenter__`` without a coroutine, as far as nothing needs awaiting: admitted at once (a
    # free slot, no shared rate backend), or carried on by ``await ticket.__aenter__()`` from
    # where this stopped, or refused at once. Under overload most calls are refused here, and
    # an exception unwound through the adapters' frames up to their answer cost a sixth of
    # the whole refusal: the refusal is returned instead.
    gate = ticket._gate
    rates = gate.rates
    try:
        if rates is None or rates.is_sync:  # in memory, if any: decided without a coroutine
            if rates is not None:
                ticket._refused(gate, rates.check(ticket._context(gate)))
            slot = ticket._slot = gate.admission.slot(
                gate.limits.timeout, ticket._client, ticket._priority
            )
            entered = slot.take_free()
        else:
            entered = False
    except Rejected as refusal:
        # Returned, not raised on: its frames would keep the caller's (which holds it) alive
        # in a cycle for the garbage collector.
        refusal.__traceback__ = None
        return refusal
    if not entered:
        await ticket.__aenter__()
        slot = ticket._slot  # type: ignore[assignment]  # entered
    deferred: BaseException | None = None
    try:
        token = current.set(ticket)
        try:
            result = await call()
        except passthrough as exc:
            ticket.outcome = "error"
            deferred = exc  # re-raised once the slot is free, reported as an error
        finally:
            current.reset(token)
        if deferred is None and ticket.outcome == "ok":
            if isinstance(result, ToolResponse):
                ticket.answered(result)
            elif failed(result):
                ticket.outcome = "error"
    except BaseException as exc:
        if slot.leaves_at_once:
            slot.leave(type(exc), exc, exc.__traceback__, ticket.outcome)  # type: ignore[arg-type]
        else:
            await slot.aleave(type(exc), exc, exc.__traceback__, ticket.outcome)  # type: ignore[arg-type]
        raise
    if slot.leaves_at_once:
        slot.leave(None, None, None, ticket.outcome)  # type: ignore[arg-type]
    else:
        await slot.aleave(None, None, None, ticket.outcome)  # type: ignore[arg-type]
    if deferred is not None:
        raise deferred
    return result


class Guard:
    """Rate limits, a concurrency guard and a deadline around every tool call.

    ``Guard(settings)``, or ``Guard(max_active=5, tools={"billing.*": {"max_active": 2}})``
    (keyword limits, as ``GuardSettings`` names them; the environment is not read), or
    ``Guard.from_env(**overrides)`` (``FUSION_GUARD_*`` variables, the overrides on top).
    ``overload_errors=(PoolExhausted, ...)``: exception classes that mean a tool's backend is
    saturated, counted by its slots as overload (per tool in ``tools``; dotted names in
    ``FUSION_GUARD_OVERLOAD_ERRORS``); a bad one fails here, as every bad setting does.
    ``registry``: the Prometheus registry for the default metrics; ``observer``: a
    ``GuardObserver`` that receives every decision, besides the default observers.
    ``rate_backend``: where rate-limit state lives (default: from ``settings.backend``); when it
    fails, each tool applies its own ``failure_policy`` (``REDIS_FAILURE_POLICY``, or a per-tool
    override), not the backend's. ``clock``: the monotonic seconds the guard's slots, queues,
    default in-memory rate limits and adapters' retry counts read (default ``time.monotonic``;
    ``anyio.current_time`` runs them on the event loop's clock, virtual under a test clock).

    Per-tool state is made on a tool's first call and kept. The SDK adapters admit only the
    server's real tools; past ``MAX_TOOLS`` distinct names in direct use, a further name shares
    one gate with the names that match the same configured patterns (so those patterns' limits
    still apply; ``"(other tools)"`` when it matches none), and an exactly configured name always
    gets its own.

    ``async with Guard(...) as guard:`` or ``await guard.aclose()`` closes what the guard opened
    (with ``BACKEND=redis``: its Redis connections and lease refreshing; a ``rate_backend``
    given to it stays open, the caller's to close) and logs the summaries of sampled events
    still owed; a call after that raises ``GuardClosed``.
    """

    __slots__ = (
        "_clock",
        "_closed",
        "_defaults",
        "_expose",
        "_gates",
        "_policies",
        "_serving",
        "_settings",
    )

    def __init__(
        self,
        settings: GuardSettings | None = None,
        *,
        registry: CollectorRegistry | None = None,
        observer: GuardObserver | None = None,
        rate_backend: RateBackend | None = None,
        clock: Clock = monotonic,
        **limits: Any,
    ) -> None:
        if not callable(clock):
            raise ConfigurationError(
                f"clock={clock!r} is invalid: expected a function returning monotonic seconds,"
                " such as time.monotonic or anyio.current_time"
            )
        self._clock = clock
        self._settings = _settings(settings, limits)
        (self._defaults,) = default_observers(self._settings, registry)
        assembly = GateAssembly(
            self._settings, (self._defaults, *_user_observer(observer)), rate_backend, clock
        )
        # A rate backend that can fail (Redis, given directly) makes failure policies apply.
        shared_backend = rate_backend is not None and not isinstance(rate_backend, MemoryBackend)
        self._policies = PolicyTable(self._settings, shared_backend=shared_backend)
        self._gates = GateTable(self._policies, assembly, MAX_TOOLS)
        self._expose = self._settings.expose_exceptions
        self._closed = False
        self._serving = 0  # servers running on this guard (``lifespan``)

    @classmethod
    def from_env(
        cls,
        *,
        registry: CollectorRegistry | None = None,
        observer: GuardObserver | None = None,
        rate_backend: RateBackend | None = None,
        clock: Clock = monotonic,
        **overrides: Any,
    ) -> Guard:
        """A guard configured by the ``FUSION_GUARD_*`` variables, ``overrides`` winning."""
        from .config._settings import GuardSettings  # the settings model loads on first use

        return cls(
            GuardSettings(**overrides),
            registry=registry,
            observer=observer,
            rate_backend=rate_backend,
            clock=clock,
        )

    @property
    def settings(self) -> GuardSettings:
        return self._settings

    @property
    def clock(self) -> Clock:
        """The guard's clock (``clock=``): the adapters count retries on it."""
        return self._clock

    @property
    def expose_exceptions(self) -> bool:
        """Whether INTERNAL_ERROR messages carry ``ExceptionType: message`` (off by default)."""
        return self._expose

    def limits(self, tool: str) -> ToolLimits:
        """The limits in force for ``tool`` (resolved once, on first use)."""
        return self._gates.gate(tool).limits

    def configured_limits(self) -> dict[str, ToolLimits]:
        """What the configuration gives: ``""`` maps to the limits of a tool no per-tool pattern
        matches, then each pattern, least specific first, to the limits of a tool it matches
        (its own keys over those of less specific patterns it falls under, over the defaults).
        Makes no gate."""
        patterns = sorted(self._settings.tools, key=specificity)
        resolved = {pattern: self._policies.resolve(pattern) for pattern in patterns}
        return {"": self._policies.defaults(), **resolved}

    def concurrency(self, tool: str) -> Slots | None:
        """The tool's concurrency guard (``active``, ``queued``, ``statistics()``), if limited."""
        return self._gates.gate(tool).slots

    def admit(
        self,
        tool: str,
        *,
        client: str | None = None,
        request: object | None = None,
        priority: Priority | str | None = None,
    ) -> Ticket:
        """``async with guard.admit(tool) as ticket:`` runs the block as one admitted call.

        Raises ``RateLimited``, ``ServerBusy`` (on entry) or ``HandlerTimeout`` (on exit, the
        block cancelled at the deadline). ``client`` keys per-client limits (never shown; a
        key over ``MAX_KEY_CHARS`` characters is kept as its digest); ``request`` is the SDK's
        request context, for custom key functions. ``priority`` (a ``Priority`` or its name):
        the call's, instead of the tool's (``ToolPolicy(priority=...)``, ``Guard(priority=...)``;
        ``interactive`` unless set); the server's own code is trusted with it, so it may raise
        a call above its tool's (the adapters only ever lower it: ``docs/priorities.md``).
        """
        if self._closed:
            raise self._closed_error()
        gate = self._gates.made.get(tool)
        if gate is None:
            gate = self._gates.gate(tool)
        if isinstance(client, str) and len(client) > MAX_KEY_CHARS:  # kept as a digest
            client = bounded_key(client)
        if priority is None:
            priority = gate.limits.priority
            if priority is _DEFAULT_PRIORITY:  # the default: a call without priorities
                return Ticket(gate, client, request)
        else:
            priority = check_priority("priority", priority)
        return Ticket(gate, client, request, priority)

    async def call(
        self,
        tool: str,
        handler: Callable[P, Awaitable[object]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> ToolResponse:
        """Run ``handler(*args, **kwargs)`` as a guarded call of ``tool``; always an envelope.
        A ``priority=`` keyword is the call's priority (as for ``admit``), not the handler's.

        A returned ``ToolResponse`` (or builder) passes through, any other value becomes
        ``success(value)``; a raised envelope arrives intact; a refusal is its envelope; any
        other exception is INTERNAL_ERROR. Only cancellation propagates, and ``GuardClosed``
        once the guard is closed (the caller outlived it: no answer of the tool's).
        """
        if self._closed:
            raise self._closed_error()
        priority: Any = kwargs.pop("priority", None)  # checked by admit: a bad one raises
        admission = self.admit(tool, priority=priority)
        try:
            async with admission as ticket:
                try:
                    response = as_response(await handler(*args, **kwargs))
                except ToolResponse as raised:
                    response = response_from_exception(raised, tool=tool)
                ticket.answered(response)
            return response
        except Rejected as refusal:
            return refusal.response
        except Exception as exc:
            return response_from_exception(exc, tool=tool, expose_exception=self._expose)

    def protect(
        self, tool: str
    ) -> Callable[[Callable[P, Awaitable[object]]], Callable[P, Coroutine[Any, Any, ToolResponse]]]:
        """Decorate an async handler so that every call goes through ``call(tool, ...)``.

        The wrapper keeps the handler's name, docstring and signature (``functools.wraps``);
        the tool's limits are resolved now, so a bad configuration fails at decoration.
        """
        self._gates.gate(tool)

        def decorate(
            handler: Callable[P, Awaitable[object]],
        ) -> Callable[P, Coroutine[Any, Any, ToolResponse]]:
            _check_async(tool, handler)

            @functools.wraps(handler)
            async def guarded(*args: P.args, **kwargs: P.kwargs) -> ToolResponse:
                return await self.call(tool, handler, *args, **kwargs)

            return guarded

        return decorate

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether ``aclose`` ran: the guard admits no more calls."""
        return self._closed

    async def aclose(self) -> None:
        """Close what the guard opened, for good: its Redis connections and lease refreshing
        (with ``BACKEND=redis``; not a ``rate_backend`` given to it) and the sampled log
        events' summaries still owed. Idempotent; a call after it raises ``GuardClosed``.
        Calls still running finish, their Redis calls failing under the failure policy."""
        if self._closed:
            return
        self._closed = True
        await self._release()

    async def __aenter__(self) -> Guard:
        if self._closed:
            raise self._closed_error()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[Guard]:
        """``async with guard.lifespan():`` around a server's run (its lifespan): when the last
        server running on this guard stops, what the guard opened is closed, and opens again
        with the next call, so a server may start again (as each in-memory test client starts
        it). The SDK adapters put it around their server's lifespan; other servers can too.
        The guard itself stays open: ``aclose`` ends it."""
        if self._closed:
            raise self._closed_error()
        self._serving += 1
        try:
            yield self
        finally:
            self._serving -= 1
            if not self._serving:
                await self._release()

    async def _release(self) -> None:
        # Shielded: a server stopping on a cancellation still closes what it opened.
        with anyio.CancelScope(shield=True):
            self._defaults.flush()
            try:
                await self._gates.aclose()
            except Exception as failure:  # a connection that fails to close is gone anyway
                # Logged, not raised: at a server's stop it would replace the stop's own error.
                log_event(logging.WARNING, "guard_close_failed", failure, error=str(failure))

    def _closed_error(self) -> GuardClosed:
        return GuardClosed(
            f"{self!r} is closed (aclose, or the end of async with): it admits no more calls;"
            " make a new Guard, or close this one only once its server has stopped"
        )

    def __repr__(self) -> str:
        return f"Guard({self._settings!r}, tools_seen={len(self._gates.made)})"


def _settings(settings: GuardSettings | None, limits: dict[str, Any]) -> GuardSettings:
    from .config._settings import GuardSettings  # the settings model loads on first use

    if settings is None:
        return GuardSettings.from_values(**limits)
    if not isinstance(settings, GuardSettings):
        raise ConfigurationError(
            f"settings={settings!r} is invalid: expected a GuardSettings (or None, with the"
            " limits as keyword arguments)"
        )
    return settings.with_values(**limits) if limits else settings


def _user_observer(observer: GuardObserver | None) -> tuple[GuardObserver, ...]:
    if observer is None:
        return ()
    if not callable(getattr(observer, "for_tool", None)):
        raise ConfigurationError(
            f"observer={observer!r} is invalid: expected a GuardObserver (with"
            " for_tool(tool, *, max_active) returning a ToolObserver)"
        )
    return (observer,)


def _check_async(tool: str, handler: object) -> None:
    call = getattr(handler, "__call__", None)  # noqa: B004 (an async __call__ counts too)
    if not (inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)):
        raise ConfigurationError(
            f"protect({tool!r}) wraps async handlers (async def); {handler!r} is not one"
        )
