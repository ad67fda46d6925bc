"""The failure policy, applied in one place: what a tool does when the store its limits are
shared through (Redis) fails.

``BackendFailure.handle`` is the only code that turns a :class:`~fusion_guard.BackendError` into
an answer: admit the call (``open``) or refuse it with SERVER_BUSY ``backend_unavailable``
(``closed``), reported and logged either way. Every path that meets a failing backend comes
here: a rate limiter's decision (``RateLimiter``, with the tool's policy or its own) and a
fleet lease (``RedisLease``). ``backend_failure`` makes a tool's once; the Guard gives it to the
tool's rate limiter, which applies it where the backend failed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from .._checks import check_failure_policy
from .._exceptions import BackendError, ServerBusy
from .._observer import ToolObserver, ToolObservers, bind_priorities
from .._priority import DEFAULT_RANK
from .._setting_names import FailurePolicy
from ..backends._redis import Outage
from ..wire._shedding import BackendUnavailableTemplate, ServerBusyTemplate

if TYPE_CHECKING:
    from ..backends._base import RateBackend
    from ..backends._redis import RedisConnection

__all__ = ["BACKEND_RETRY_AFTER", "BackendFailure", "Figures", "backend_failure"]

BACKEND_RETRY_AFTER = 1.0
"""The least retry_after advised when a fail-closed limit cannot reach Redis (seconds)."""


class Figures(Protocol):
    """What a failure's envelope reports of the slots a call would take: their capacity and
    the calls running and waiting now (a guard shows these)."""

    @property
    def active(self) -> int: ...

    @property
    def queued(self) -> int: ...

    @property
    def max_active(self) -> int: ...

    @property
    def max_queue(self) -> int: ...


class BackendFailure:
    """Applies one tool's failure policy to a :class:`~fusion_guard.BackendError`.

    ``handle(exc, rank)`` reports it (``observer.backend_error("redis", allowed)`` and a sampled
    log line), then returns ``None`` under ``open`` (admit the call) or, under ``closed``, the
    :class:`~fusion_guard.ServerBusy` to raise (reason ``backend_unavailable``, reported as a
    shed of the call's own priority, ``rank``: to its priority's observer, ``for_priority``).
    The envelope is the standard SERVER_BUSY of the wire contract when the tool has
    slots (``slots``: their capacity, and the calls running and waiting when it fails), else one
    without capacity figures.
    """

    __slots__ = ("_busy", "_log", "_observer", "_outage", "_ranked", "_slots", "policy")

    def __init__(
        self,
        tool: str,
        policy: FailurePolicy,
        *,
        observer: ToolObserver | None = None,
        log: Callable[[BackendError, bool], None] | None = None,
        slots: Figures | None = None,
        outage: Outage | None = None,
    ) -> None:
        self.policy = check_failure_policy(policy)
        self._outage = Outage(min_retry_after=BACKEND_RETRY_AFTER) if outage is None else outage
        self._slots = slots
        self._busy = (
            BackendUnavailableTemplate(tool)
            if slots is None
            else ServerBusyTemplate(tool, slots.max_active, slots.max_queue)
        )
        # Contained: what an observer raises never replaces the policy's answer.
        self._observer = None if observer is None else _contained(observer)
        # Each priority's observer, by rank, bound at the first refusal of a call not of the
        # default priority (a guard without priorities binds none).
        self._ranked: tuple[ToolObserver, ...] | None = None
        self._log = log

    def handle(self, exc: BackendError, rank: int = DEFAULT_RANK) -> ServerBusy | None:
        """The policy's answer to ``exc`` for a call of priority ``rank`` (see the class)."""
        allowed = self.policy == "open"
        if self._log is not None:
            self._log(exc, allowed)
        observer = self._observer
        if observer is not None:
            observer.backend_error("redis", allowed)
        if allowed:
            return None
        retry_after = self._outage.retry_after()
        slots = self._slots
        active, queued = (0, 0) if slots is None else (slots.active, slots.queued)
        if observer is not None:
            if rank != DEFAULT_RANK:
                ranked = self._ranked
                if ranked is None:
                    ranked = self._ranked = bind_priorities(observer)
                observer = ranked[rank]
            observer.shed("backend_unavailable", active, queued, retry_after)
        response = self._busy.render("backend_unavailable", active, queued, retry_after)
        busy = ServerBusy(response, retry_after, "backend_unavailable")
        busy.__cause__ = exc
        return busy


def _contained(observer: ToolObserver) -> ToolObserver:
    return observer if isinstance(observer, ToolObservers) else ToolObservers((observer,))


# -- the failure policy of a rate backend -------------------------------------------------------


def backend_failure(
    tool: str,
    policy: FailurePolicy,
    backend: RateBackend | RedisConnection,
    observer: ToolObserver | None = None,
    slots: Figures | None = None,
) -> BackendFailure:
    """The failure policy of ``tool`` for when its ``backend`` fails (a rate backend, or the
    Redis connection of fleet leases), made once per tool: logged through it (``failed``), its
    SERVER_BUSY advice paced by the connection's outage, its envelope with the tool's capacity
    figures when it has ``slots``. The policy is the tool's, not the backend's: one backend
    serves every tool of a Guard, and each tool may have its own."""
    connection = getattr(backend, "connection", backend)  # a connection is its own
    return BackendFailure(
        tool,
        policy,
        observer=observer,
        log=getattr(backend, "failed", None),
        slots=slots,
        outage=getattr(connection, "outage", None),
    )
