"""The one interface through which every guard decision is reported.

Metrics and logs plug in here without touching the hot path's logic (Netflix concurrency-limits
keeps its metric registry behind a null-by-default interface the same way). An observer is bound
once per tool (``GuardObserver.for_tool``); the bound ``ToolObserver`` is what the hot path calls,
so nothing is looked up per call.

Every call that reaches the guard ends in exactly one of: ``shed``, ``rate_limited`` or
``finished``. ``admitted`` is reported in between for calls that got a slot.
"""

from __future__ import annotations

from typing import Literal, Protocol

__all__ = ["GuardObserver", "Outcome", "ShedReason", "ToolObserver", "ToolObservers"]

Outcome = Literal["ok", "error", "internal_error", "timeout", "cancelled"]
"""How an admitted (or queued, for ``cancelled``) call ended; ``shed`` and ``rate_limited``
have events of their own."""

ShedReason = Literal["queue_full", "queue_timeout", "backend_unavailable"]
"""Why SERVER_BUSY was answered; ``backend_unavailable``: a fail-closed limit could not reach its
shared backend (Redis)."""


class ToolObserver(Protocol):
    """Receives the decisions about one tool's calls. Methods must be cheap and must not raise."""

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


class ToolObservers:
    """Fans one tool's events out to several observers (for example metrics and logs)."""

    __slots__ = ("_observers",)

    def __init__(self, observers: tuple[ToolObserver, ...]) -> None:
        self._observers = observers

    def admitted(self, queue_wait: float) -> None:
        for observer in self._observers:
            observer.admitted(queue_wait)

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        for observer in self._observers:
            observer.shed(reason, active, queued, retry_after)

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        for observer in self._observers:
            observer.rate_limited(scope, retry_after, key)

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        for observer in self._observers:
            observer.finished(outcome, duration)

    def backend_error(self, backend: str, allowed: bool) -> None:
        for observer in self._observers:
            observer.backend_error(backend, allowed)
