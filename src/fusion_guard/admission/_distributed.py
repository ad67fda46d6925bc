"""A concurrency limit for a whole fleet: leases in Redis, this process's bounded queue in front.

``DistributedConcurrencyGuard(8, redis="redis://...", name="billing.charge")`` lets at most 8
calls run at once across every process sharing the Redis, the ``prefix`` and the ``name``. It is a
:class:`ConcurrencyGuard` (the local slots, bounded queue and shedding are that class's, through
the seam its module describes) that also holds a Redis lease while a call runs:

1. A call first takes a *local* slot (at most ``max_active`` in this process, a bounded queue,
   ``queue_timeout``): SERVER_BUSY ``queue_full`` when this process's queue is full.
2. Holding it, the call takes a *lease* in Redis (one Lua script: purge expired holders, check
   the count, add). While the fleet is at capacity it polls with jittered exponential backoff
   (2 ms doubling to 50 ms) until ``queue_timeout``, counted from arrival, runs out: then
   SERVER_BUSY ``queue_timeout``. Waiting callers hold their local slot, so later arrivals
   queue locally, and are shed ``queue_full`` once that queue is full too.
3. While calls run, one refresher per Redis connection (so per process, when the guards share
   one, as the Guard's do) refreshes their leases every third of ``lease`` (at least every
   quarter second); a crashed process stops refreshing, so its permits come back within
   ``lease`` seconds. Leaving the slot releases the lease, then the local slot.

When Redis fails (down, or slower than ``timeout``), :class:`BackendFailure` applies
``failure_policy``: ``open`` runs the call on its local slot alone (counted, logged), ``closed``
sheds it with SERVER_BUSY ``backend_unavailable``. The next call tries Redis again, so recovery
needs no restart, and no lease outlives its call: an acquire given up on (timed out, failed,
cancelled) and a release that failed are released in the background once Redis answers, and
running calls whose leases Redis lost register them again, counted (see
:class:`~fusion_guard.backends._redis.FleetSemaphore`). Needs asyncio (redis-py's client is
asyncio-only).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from .._checks import check_seconds
from .._exceptions import BackendError, ConfigurationError, ServerBusy
from .._log import log_event
from .._observer import ToolObserver, ToolObservers
from ..backends._redis import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LEASE,
    DEFAULT_PREFIX,
    DEFAULT_TIMEOUT,
    FailurePolicy,
    FleetSemaphore,
    Outage,
    RedisConnection,
    RedisRateLimitBackend,
    check_failure_policy,
)
from ..wire._render import escape_content
from ..wire._shedding import ServerBusyTemplate
from ._concurrency import ConcurrencyGuard, Slot

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from ..backends._base import RateBackend
    from ..config._settings import GuardSettings

__all__ = [
    "BACKEND_RETRY_AFTER",
    "BackendFailure",
    "DistributedConcurrencyGuard",
    "FleetSlot",
    "concurrency_guard",
    "rate_backend_failure",
]

BACKEND_RETRY_AFTER = 1.0
"""The least retry_after advised when a fail-closed limit cannot reach Redis (seconds)."""
_FIRST_BACKOFF = 0.002
_MAX_BACKOFF = 0.05


class _BackendUnavailableTemplate(ServerBusyTemplate):
    """SERVER_BUSY for a tool without slots whose fail-closed rate limit could not be decided:
    the standard layout (reason, active, queued, retry_after) without capacity figures, its own
    message and advice (rendered once per tool)."""

    __slots__ = ()

    def __init__(self, tool: str) -> None:
        super().__init__(tool, 0, 0)
        name = escape_content(tool)
        self._head = (
            '<tool_error code="SERVER_BUSY" severity="error">\n'
            f'  <message>Tool "{name}" cannot take calls right now: the store its limits are'
            " shared through is unavailable ("
        )
        self._mid = (
            " queued).</message>\n"
            "  <recovery>Wait for the retry_after time, then call again; the fault is on the"
            " server's side and clears by itself.</recovery>\n"
            "  <details>\n"
            '    <detail key="reason">'
        )
        self._tail = "  </details>\n  <retry_after>"


class BackendFailure:
    """Applies one tool's failure policy to a :class:`~fusion_guard.BackendError`.

    ``handle(exc, active, queued)`` reports it (``observer.backend_error("redis", allowed)`` and
    a sampled log line), then returns ``None`` under ``open`` (admit the call) or, under
    ``closed``, the :class:`~fusion_guard.ServerBusy` to raise (reason ``backend_unavailable``,
    reported as a shed). The envelope is the standard SERVER_BUSY of the wire contract when the
    tool has slots (``max_active``, ``max_queue``), else one without capacity figures.
    """

    __slots__ = ("_busy", "_log", "_observer", "_outage", "policy")

    def __init__(
        self,
        tool: str,
        policy: FailurePolicy,
        *,
        observer: ToolObserver | None = None,
        log: Callable[[BackendError, bool], None] | None = None,
        max_active: int | None = None,
        max_queue: int = 0,
        outage: Outage | None = None,
    ) -> None:
        self.policy = check_failure_policy(policy)
        self._outage = Outage(min_retry_after=BACKEND_RETRY_AFTER) if outage is None else outage
        self._busy = (
            _BackendUnavailableTemplate(tool)
            if max_active is None
            else ServerBusyTemplate(tool, max_active, max_queue)
        )
        # Contained: what an observer raises never replaces the policy's answer.
        self._observer = None if observer is None else _contained(observer)
        self._log = log

    def handle(self, exc: BackendError, active: int, queued: int) -> ServerBusy | None:
        allowed = self.policy == "open"
        if self._log is not None:
            self._log(exc, allowed)
        observer = self._observer
        if observer is not None:
            observer.backend_error("redis", allowed)
        if allowed:
            return None
        retry_after = self._outage.retry_after()
        if observer is not None:
            observer.shed("backend_unavailable", active, queued, retry_after)
        response = self._busy.render("backend_unavailable", active, queued, retry_after)
        busy = ServerBusy(response, retry_after, "backend_unavailable")
        busy.__cause__ = exc
        return busy


def _contained(observer: ToolObserver) -> ToolObserver:
    return observer if isinstance(observer, ToolObservers) else ToolObservers((observer,))


class FleetSlot(Slot):
    """One call's hold on a fleet slot: a local slot plus a Redis lease (see the module)."""

    __slots__ = ("_fleet", "_holder")
    leaves_at_once: ClassVar[bool] = False  # the lease is given back (awaited) first

    def __init__(self, guard: DistributedConcurrencyGuard, timeout: float | None) -> None:
        super().__init__(guard, timeout)
        self._fleet = guard
        self._holder: str | None = None

    async def __aenter__(self) -> FleetSlot:
        # Slot.__aenter__ with one step more, the lease, between taking the local slot and
        # counting the call admitted (a call refused a lease was never admitted).
        guard = self._fleet
        arrival = guard._clock()
        if guard._active < guard._max_active:  # a free local slot, taken without yielding
            guard._active += 1
        else:
            await guard._wait()  # sheds (and reports) queue_full or queue_timeout
        try:
            self._holder = await guard._lease(arrival + guard._queue_timeout)
        except BaseException:
            guard._release()
            raise
        return self._hold(guard._clock() - arrival)

    def take_free(self) -> bool:
        return False  # a local slot is not enough: the lease is awaited (``__aenter__``)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        holder, self._holder = self._holder, None
        if holder is not None:
            # Shielded: a body cancelled by its deadline must still give its lease back (the
            # release is bounded by the Redis timeout).
            with anyio.CancelScope(shield=True):
                await self._fleet._release_lease(holder)
        return await super().__aexit__(exc_type, exc, tb)

    async def arelease(self) -> None:
        """Give the lease and the local slot back (for slots taken with ``acquire()``)."""
        await self.__aexit__(None, None, None)


class DistributedConcurrencyGuard(ConcurrencyGuard):
    """At most ``max_active`` calls at once across every process sharing ``redis``, ``prefix``
    and ``name``; this process queues as a :class:`~fusion_guard.ConcurrencyGuard` does.

    ``redis``: a ``redis://`` URL, a ``redis.asyncio.Redis``, or a
    :class:`~fusion_guard.RedisRateLimitBackend` whose connection to share. ``lease``: seconds
    a lease lives unless refreshed (a crashed process's permits come back within it).
    ``failure_policy``: ``"open"`` or ``"closed"`` when Redis fails; ``timeout``: seconds any
    Redis call may take; ``connect_timeout``: seconds setting up the first connections may take
    (a cold start is not an outage); ``prefix``: the keys' namespace and hash tag (these three
    apply to a connection made here, not to a shared one). Every other argument is
    :class:`~fusion_guard.ConcurrencyGuard`'s, for this process's slots and queue.
    """

    __slots__ = ("_conn", "_failure", "_semaphore", "lease")

    def __init__(
        self,
        max_active: int,
        max_queue: int | None = None,
        queue_timeout: float = 2.0,
        *,
        redis: str | Redis | RedisRateLimitBackend | RedisConnection,
        lease: float = DEFAULT_LEASE,
        failure_policy: FailurePolicy = "open",
        timeout: float = DEFAULT_TIMEOUT,
        prefix: str = DEFAULT_PREFIX,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        **local: Any,
    ) -> None:
        super().__init__(max_active, max_queue, queue_timeout, **local)
        self.lease = check_seconds("lease", lease)
        self._conn = _connection(redis, timeout, prefix, connect_timeout)
        self._semaphore = FleetSemaphore(self._conn, self.name, limit=max_active, lease=self.lease)
        self._failure = BackendFailure(
            self.name,
            failure_policy,
            observer=self._observer,
            log=self._conn.failed,
            max_active=self.max_active,
            max_queue=self.max_queue,
            outage=self._conn.outage,
        )

    def free_at_once(self) -> bool:
        return False  # a local slot is not enough: the lease is awaited

    def slot(self, timeout: float | None = None) -> FleetSlot:
        """``async with guard.slot():`` runs the body holding a fleet slot; raises
        :class:`~fusion_guard.ServerBusy` when shed; with ``timeout`` (seconds) the body is
        cancelled past that deadline and :class:`~fusion_guard.HandlerTimeout` raised."""
        # The base class checks the timeout and refuses at once when the local queue is full;
        # its plain Slot is discarded (the Redis round trip dwarfs that allocation).
        return FleetSlot(self, super().slot(timeout)._timeout)

    async def acquire(self) -> FleetSlot:
        """A held fleet slot; give it back with ``await slot.arelease()``."""
        held = FleetSlot(self, None)
        await held.__aenter__()
        return held

    def acquire_nowait(self) -> Slot:
        """Not available: a fleet slot needs a Redis round trip (use ``await acquire()``)."""
        raise ConfigurationError(
            "DistributedConcurrencyGuard.acquire_nowait() is not available: a fleet slot needs"
            " a Redis round trip; use `await guard.acquire()` or `async with guard.slot()`"
        )

    @property
    def failure_policy(self) -> FailurePolicy:
        return self._failure.policy

    @property
    def key(self) -> str:
        """The Redis key of the fleet's holders (a sorted set scored by lease expiry)."""
        return self._semaphore.key

    @property
    def held_leases(self) -> int:
        """Leases this process holds now (calls running with a fleet slot)."""
        return self._semaphore.held

    def __repr__(self) -> str:
        return (
            f"DistributedConcurrencyGuard(name={self.name!r}, max_active={self.max_active},"
            f" active={self.active}, queued={self.queued}, lease={self.lease},"
            f" failure_policy={self.failure_policy!r})"
        )

    async def _lease(self, deadline: float) -> str | None:
        """A lease's holder id; None when Redis failed and the policy is open."""
        backoff = _FIRST_BACKOFF
        while True:
            try:
                grant = await self._semaphore.try_acquire()
            except BackendError as exc:
                busy = self._failure.handle(exc, self._active, len(self._waiters))
                if busy is not None:
                    raise busy from exc
                return None
            if grant.holder is not None:
                return grant.holder
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise self._shed("queue_timeout", len(self._waiters), predicted=False)
            # Full jitter: the fleet's waiters do not poll Redis in lockstep.
            await anyio.sleep(min(remaining, backoff * random.uniform(0.5, 1.0)))
            backoff = min(2 * backoff, _MAX_BACKOFF)

    async def _release_lease(self, holder: str) -> None:
        try:
            await self._semaphore.release(holder)
        except BackendError as exc:  # retried in the background (FleetSemaphore.release)
            log_event(logging.WARNING, "lease_release_failed", tool=self.name, error=str(exc))


def _connection(
    redis: str | Redis | RedisRateLimitBackend | RedisConnection,
    timeout: float,
    prefix: str,
    connect_timeout: float,
) -> RedisConnection:
    if isinstance(redis, RedisConnection):
        return redis
    if isinstance(redis, RedisRateLimitBackend):
        return redis.connection
    return RedisConnection(redis, timeout=timeout, prefix=prefix, connect_timeout=connect_timeout)


# -- the Guard's hooks --------------------------------------------------------------------------


def concurrency_guard(
    settings: GuardSettings,
    rate_backend: RateBackend | None,
    max_active: int,
    max_queue: int | None,
    queue_timeout: float,
    *,
    failure_policy: FailurePolicy,
    **local: Any,
) -> ConcurrencyGuard:
    """A tool's slots for the Guard: fleet-wide with ``BACKEND=redis`` (sharing the rate
    backend's connection when that is the Redis one), else this process's own.
    ``failure_policy``: the tool's own (a per-tool override, else ``REDIS_FAILURE_POLICY``)."""
    if settings.backend != "redis" or settings.redis_url is None:
        return ConcurrencyGuard(max_active, max_queue, queue_timeout, **local)
    redis: str | RedisRateLimitBackend = (
        rate_backend
        if isinstance(rate_backend, RedisRateLimitBackend)
        else settings.redis_url.get_secret_value()
    )
    return DistributedConcurrencyGuard(
        max_active,
        max_queue,
        queue_timeout,
        redis=redis,
        lease=settings.redis_lease,
        failure_policy=failure_policy,
        timeout=settings.redis_timeout,
        connect_timeout=settings.redis_connect_timeout,
        prefix=settings.redis_prefix,
        **local,
    )


def rate_backend_failure(
    tool: str,
    policy: FailurePolicy,
    backend: RateBackend,
    exc: BackendError,
    observer: ToolObserver,
    slots: ConcurrencyGuard | None,
) -> ServerBusy | None:
    """The Guard's answer when a rate limit's backend failed: the tool's failure policy applied
    by :class:`BackendFailure`; None admits the call. The policy is the tool's, not the
    backend's: one backend serves every tool of a Guard, and each tool may have its own."""
    log = getattr(backend, "failed", None)
    connection = getattr(backend, "connection", None)
    outage = getattr(connection, "outage", None)
    if slots is None:
        failure = BackendFailure(tool, policy, observer=observer, log=log, outage=outage)
        return failure.handle(exc, 0, 0)
    failure = BackendFailure(
        tool,
        policy,
        observer=observer,
        log=log,
        max_active=slots.max_active,
        max_queue=slots.max_queue,
        outage=outage,
    )
    return failure.handle(exc, slots.active, slots.queued)
