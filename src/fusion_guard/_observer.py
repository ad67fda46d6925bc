"""The one interface through which every guard decision is reported.

Metrics and logs plug in here without touching the hot path's logic (Netflix concurrency-limits
keeps its metric registry behind a null-by-default interface the same way). An observer is bound
once per tool (``GuardObserver.for_tool``); the bound ``ToolObserver`` is what the hot path calls,
so nothing is looked up per call.

Every call that reaches the guard ends in exactly one of: ``shed``, ``rate_limited`` or
``finished``. ``admitted`` is reported in between for calls that got a slot.

Priorities: a tool's observer may have the optional method ``for_priority(priority)``, returning
the observer of that priority's calls (bound once per tool and priority, like ``for_tool``:
``bind_priorities``). The guard then reports ``admitted`` and ``shed`` of a call of another
priority than the default to its priority's observer; everything else (and every event of an
observer without the method) goes to the tool's observer, which is the default priority's
(``interactive``). So a call's priority costs the hot path a tuple index, never a look-up.

Observers never change an outcome: whatever an observer raises (``Exception``) is caught where
it is called, reported once per observer class and method (``observer_failed``, on the stdlib
logger ``fusion_guard``), and the call's answer stands. Every call site catches it (free in
CPython when nothing raises), so a tool with one observer reaches it directly;
``ToolObservers`` catches it for each observer it fans out to, so one failing observer does not
keep the others from hearing of the event.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, Protocol, overload

import anyio

from ._exceptions import Rejected
from ._log import report_once
from ._priority import DEFAULT_RANK, PRIORITY_NAMES, Priority
from .wire._codes import ErrorCode
from .wire._response import ToolResponse

__all__ = [
    "GuardObserver",
    "Outcome",
    "ShedReason",
    "ToolObserver",
    "ToolObservers",
    "bind_priorities",
    "bind_tool",
    "observer_failed",
    "outcome_of",
    "overload_raised",
    "overload_response",
    "response_outcome",
]

Outcome = Literal["ok", "error", "internal_error", "timeout", "cancelled"]
"""How an admitted (or queued, for ``cancelled``) call ended; ``shed`` and ``rate_limited``
have events of their own."""

ShedReason = Literal[
    "queue_full", "queue_timeout", "backend_unavailable", "fair_share", "client_limit"
]
"""Why SERVER_BUSY was answered; ``backend_unavailable``: a fail-closed limit could not reach its
shared backend (Redis); ``fair_share``: a queued call of the heaviest client gave its place to a
lighter client's; ``client_limit``: the call's client was at ``max_active_per_client``."""


class ToolObserver(Protocol):
    """Receives the decisions about one tool's calls. Methods should be cheap and should not
    raise (what they raise is contained, see the module documentation)."""

    def admitted(self, queue_wait: float) -> None:
        """A call got a slot after waiting ``queue_wait`` seconds (0 when a slot was free)."""

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        """SERVER_BUSY was answered."""

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        """RATE_LIMITED was answered by the limit of ``scope``. ``key`` is the caller's identity
        (the client key) when known: private, so an observer may log only a digest of it."""

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        """A call ended; ``duration`` is the handler time, None when it never ran."""

    def backend_error(self, backend: str, allowed: bool) -> None:
        """A shared backend failed; ``allowed`` tells whether the call was let through
        (fail-open) or refused (fail-closed)."""


class GuardObserver(Protocol):
    """Makes the per-tool observers, once per tool."""

    def for_tool(self, tool: str, *, max_active: int | None) -> ToolObserver: ...


def observer_failed(observer: object, method: str, failure: Exception) -> None:
    """``observer.method`` raised ``failure``: log it once per observer class and method."""
    kind = type(observer)
    report_once(
        (kind, method),
        "observer_failed",
        failure,
        observer=f"{kind.__module__}.{kind.__qualname__}",
        method=method,
    )


def response_outcome(response: ToolResponse) -> Outcome:
    """The outcome of a call that answered ``response``, returned or raised: ``ok`` for a
    success or a warning, ``internal_error`` for INTERNAL_ERROR, ``error`` for any other error
    envelope. The one place a response becomes an outcome (the Guard, the adapters and
    ``outcome_of`` ask it)."""
    if not response.is_error:
        return "ok"
    return "internal_error" if response.code == ErrorCode.INTERNAL_ERROR else "error"


OVERLOAD_CODES = frozenset({ErrorCode.SERVER_BUSY, ErrorCode.RATE_LIMITED, ErrorCode.TIMEOUT})
"""The codes of a tool's answer that say the tool (or what it calls) is overloaded."""


def overload_response(response: ToolResponse) -> bool:
    """Whether ``response``, a tool's answer, says that the tool is overloaded: an error
    envelope of SERVER_BUSY, RATE_LIMITED or TIMEOUT (``docs/overload-errors.md``). Its
    outcome is still ``response_outcome``'s; only an adaptive limit learns from this."""
    return response.is_error and response.code in OVERLOAD_CODES


def overload_raised(
    exc: BaseException, named: tuple[type[BaseException], ...], depth: int = 0
) -> bool:
    """Whether a call's body raising ``exc`` says that the tool is overloaded: ``exc`` is one of
    the ``named`` overload errors, or a raised SERVER_BUSY, RATE_LIMITED or TIMEOUT envelope (a
    guard's refusal or timeout from inside the tool too); or it was raised from one (its
    ``__cause__``, as a framework wraps a handler's error), or a task group raised one in an
    exception group. ``depth``: how far down the causes and groups this one is (up to 3)."""
    if named and isinstance(exc, named):
        return True
    if isinstance(exc, ToolResponse):
        return overload_response(exc)
    if isinstance(exc, Rejected):
        return exc.response.code in OVERLOAD_CODES
    if depth >= 3:
        return False
    if isinstance(exc, BaseExceptionGroup):
        return any(overload_raised(inner, named, depth + 1) for inner in exc.exceptions)
    cause = exc.__cause__
    return cause is not None and overload_raised(cause, named, depth + 1)


def outcome_of(exc: BaseException) -> Outcome:
    """The outcome of a call whose body raised ``exc``: cancellation is ``cancelled``, a
    deadline's TIMEOUT ``timeout``, a raised envelope its ``response_outcome``, another guard's
    refusal ``error``, anything else ``internal_error``."""
    if isinstance(exc, ToolResponse):
        return response_outcome(exc)
    if isinstance(exc, Rejected):  # a HandlerTimeout, or a nested guard's refusal
        return "timeout" if exc.response.code == ErrorCode.TIMEOUT else "error"
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return "cancelled"
    return "internal_error"


class ToolObservers:
    """Fans one tool's events out to several observers (for example metrics, logs and the
    application's own), each call contained: an observer that raises is reported once
    (``observer_failed``) and the others still hear of the event."""

    __slots__ = ("_observers",)

    def __init__(self, observers: tuple[ToolObserver, ...]) -> None:
        self._observers = observers

    def admitted(self, queue_wait: float) -> None:
        for observer in self._observers:
            try:
                observer.admitted(queue_wait)
            except Exception as failure:
                observer_failed(observer, "admitted", failure)

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        for observer in self._observers:
            try:
                observer.shed(reason, active, queued, retry_after)
            except Exception as failure:
                observer_failed(observer, "shed", failure)

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        for observer in self._observers:
            try:
                observer.rate_limited(scope, retry_after, key)
            except Exception as failure:
                observer_failed(observer, "rate_limited", failure)

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        for observer in self._observers:
            try:
                observer.finished(outcome, duration)
            except Exception as failure:
                observer_failed(observer, "finished", failure)

    def backend_error(self, backend: str, allowed: bool) -> None:
        for observer in self._observers:
            try:
                observer.backend_error(backend, allowed)
            except Exception as failure:
                observer_failed(observer, "backend_error", failure)

    def retried(self) -> None:
        """A call arrived as a client's retry: told to the observers that count retries (those
        with a ``retried`` method; the method is optional, as ``watch`` is)."""
        self._optional("retried")

    def priority_hint_ignored(self) -> None:
        """A call's request carried a priority hint naming no priority: told to the observers
        that count them (an optional ``priority_hint_ignored`` method)."""
        self._optional("priority_hint_ignored")

    def _optional(self, event: str) -> None:
        for observer in self._observers:
            heard = getattr(observer, event, None)
            if callable(heard):
                try:
                    heard()
                except Exception as failure:
                    observer_failed(observer, event, failure)

    def for_priority(self, priority: Priority) -> ToolObservers:
        """The fan-out of ``priority``'s calls: each observer's own for that priority (its
        ``for_priority``), or the observer itself when it has none."""
        return ToolObservers(tuple(_for_priority(o, priority) for o in self._observers))

    def watch(self, figures: object) -> None:
        """Hand ``figures`` (a guard's live ``active`` / ``queued``) to the observers that show
        them (those with a ``watch`` method)."""
        for observer in self._observers:
            watch = getattr(observer, "watch", None)
            if callable(watch):
                try:
                    watch(figures)
                except Exception as failure:
                    observer_failed(observer, "watch", failure)


def bind_tool(
    observers: Iterable[GuardObserver], tool: str, max_active: int | None
) -> ToolObserver | None:
    """``tool``'s observer: each observer bound to it, behind one contained fan-out (none when
    there is no observer; the observer itself when there is one: a refusal then reaches it in
    one step). An observer whose ``for_tool`` raises sits out for this tool."""
    bound: list[ToolObserver] = []
    for observer in observers:
        try:
            bound.append(observer.for_tool(tool, max_active=max_active))
        except Exception as failure:
            observer_failed(observer, "for_tool", failure)
    if not bound:
        return None
    if len(bound) == 1:  # one observer: every call site contains it, no fan-out to pass
        return bound[0]
    return ToolObservers(tuple(bound))


def _for_priority(observer: ToolObserver, priority: Priority) -> ToolObserver:
    """``observer``'s observer of ``priority``'s calls: its optional ``for_priority``, else the
    observer itself (which then hears every priority's calls alike); contained like ``for_tool``:
    an observer whose ``for_priority`` raises hears them as the tool's."""
    bind = getattr(observer, "for_priority", None)
    if not callable(bind):
        return observer
    try:
        bound: ToolObserver = bind(priority)
    except Exception as failure:
        observer_failed(observer, "for_priority", failure)
        return observer
    return bound


@overload
def bind_priorities(observer: ToolObserver) -> tuple[ToolObserver, ...]: ...
@overload
def bind_priorities(observer: None) -> tuple[None, ...]: ...
@overload
def bind_priorities(observer: ToolObserver | None) -> tuple[ToolObserver | None, ...]: ...
def bind_priorities(observer: ToolObserver | None) -> tuple[ToolObserver | None, ...]:
    """The observers of a tool's calls by priority rank (index 0: ``critical``), bound once: the
    default priority's is ``observer`` itself, so calls without a priority report as before."""
    if observer is None:
        return (None,) * len(PRIORITY_NAMES)
    return tuple(
        observer if rank == DEFAULT_RANK else _for_priority(observer, priority)
        for rank, priority in enumerate(PRIORITY_NAMES)
    )
