"""A concurrency limit for a whole fleet: leases in Redis, this process's bounded queue in front.

``DistributedConcurrencyGuard(max_active=8, redis="redis://...")`` lets at most ``max_active``
calls run at once across every process sharing the Redis and the guard's ``name``:

1. A call first takes a *local* slot from a :class:`ConcurrencyGuard` (its bounded queue and
   ``queue_timeout``): SERVER_BUSY ``queue_full`` when this process's queue is full.
2. Holding it, the call takes a *lease* in Redis (one Lua script: purge expired holders, check
   the count, add). While the fleet is at capacity it polls with jittered exponential backoff
   until ``queue_timeout`` (counted from arrival) runs out: then SERVER_BUSY ``queue_timeout``.
3. While calls run, one background task per guard and process refreshes their leases every
   third of ``lease``; a crashed process stops refreshing, so its permits come back within
   ``lease`` seconds. Leaving the slot releases the lease, then the local slot.

When Redis fails (down, slow past ``timeout``), :class:`BackendFailure` applies the guard's
``failure_policy``: ``open`` runs the call on its local slot alone (counted, logged), ``closed``
sheds it with SERVER_BUSY ``backend_unavailable``. Nothing else changes: the next call tries
Redis again, so recovery needs no restart. Needs asyncio (redis-py's client is asyncio-only).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

import anyio

from .._exceptions import BackendError, ServerBusy
from .._log import log_event
from .._observer import ShedReason, ToolObserver
from ..backends._redis import (
    DEFAULT_PREFIX,
    DEFAULT_TIMEOUT,
    FailurePolicy,
    FleetSemaphore,
    RedisConnection,
    RedisRateLimitBackend,
    check_failure_policy,
)
from ..wire._shedding import ServerBusyTemplate
from ._concurrency import ConcurrencyGuard, Slot, _check_int, _check_seconds

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["BackendFailure", "DistributedConcurrencyGuard", "FleetSlot"]

BACKEND_RETRY_AFTER = 1.0
"""retry_after advised when a fail-closed limit cannot reach Redis (seconds)."""
_FIRST_BACKOFF = 0.002
_MAX_BACKOFF = 0.05


class BackendFailure:
    """Applies one tool's failure policy to a :class:`~fusion_guard.BackendError`.

    ``handle(exc, active, queued)`` reports it (``observer.backend_error("redis", allowed)`` and
    a sampled log line), then returns ``None`` under ``open`` (admit the call) or, under
    ``closed``, the :class:`~fusion_guard.ServerBusy` to raise (reason ``backend_unavailable``,
    also reported as a shed). The Guard uses it for rate limits on a Redis backend too.
    """

    __slots__ = ("_log", "_observer", "policy", "template")

    def __init__(
        self,
        tool: str,
        policy: FailurePolicy,
        *,
        max_active: int,
        max_queue: int,
        observer: ToolObserver | None = None,
        log: Callable[[BackendError, bool], None] | None = None,
    ) -> None:
        self.policy = check_failure_policy(policy)
        self.template = ServerBusyTemplate(tool, max_active, max_queue)
        self._observer = observer
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
        if observer is not None:
            observer.shed("backend_unavailable", active, queued, BACKEND_RETRY_AFTER)
        response = self.template.render("backend_unavailable", active, queued, BACKEND_RETRY_AFTER)
        busy = ServerBusy(response, BACKEND_RETRY_AFTER, "backend_unavailable")
        busy.__cause__ = exc
        return busy


class FleetSlot:
    """One call's hold on a fleet slot (local slot + Redis lease): an async context manager."""

    __slots__ = ("_guard", "_holder", "_local", "_timeout", "queue_wait")

    def __init__(self, guard: DistributedConcurrencyGuard, timeout: float | None) -> None:
        self._guard = guard
        self._timeout = timeout
        self._local: Slot | None = None
        self._holder: str | None = None
        self.queue_wait = 0.0

    async def __aenter__(self) -> FleetSlot:
        guard = self._guard
        arrival = guard._clock()
        local = await guard._local_slot()
        try:
            self._holder = await guard._lease(arrival + guard.queue_timeout)
        except BaseException:
            local.release()
            raise
        self._local = local
        self.queue_wait = guard._clock() - arrival
        if guard._observer is not None:
            guard._observer.admitted(self.queue_wait)
        if self._timeout is not None:
            # The handler's deadline starts now, as ConcurrencyGuard.slot(timeout) does.
            local._timeout = self._timeout
            local._enter_deadline(self._timeout)
        return self

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
                await self._guard._release(holder)
        local, self._local = self._local, None
        if local is None:
            return False
        return await local.__aexit__(exc_type, exc, tb)


class DistributedConcurrencyGuard:
    """At most ``max_active`` calls at once across every process sharing ``redis`` and ``name``.

    ``redis``: a ``redis://`` URL, a ``redis.asyncio.Redis``, or a
    :class:`~fusion_guard.RedisRateLimitBackend` whose connection to share. ``max_queue`` and
    ``queue_timeout``: this process's queue, as for :class:`~fusion_guard.ConcurrencyGuard`
    (``queue_timeout`` also bounds the wait for a fleet lease). ``local_max_active``: slots of
    this process (default ``max_active``). ``lease``: seconds a lease lives unless refreshed
    (a crashed process's permits come back within it). ``failure_policy``: ``"open"`` or
    ``"closed"`` when Redis fails; ``timeout``: seconds any Redis call may take. ``prefix``:
    the Redis keys' namespace and hash tag. ``observer`` receives this tool's decisions.
    """

    __slots__ = (
        "_clock",
        "_conn",
        "_failure",
        "_local",
        "_observer",
        "_semaphore",
        "lease",
        "max_active",
        "queue_timeout",
    )

    def __init__(
        self,
        max_active: int,
        max_queue: int | None = None,
        queue_timeout: float = 2.0,
        *,
        redis: str | Redis | RedisRateLimitBackend | RedisConnection,
        name: str = "tool",
        lease: float = 10.0,
        failure_policy: FailurePolicy = "open",
        local_max_active: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        prefix: str = DEFAULT_PREFIX,
        observer: ToolObserver | None = None,
        **local_options: Any,
    ) -> None:
        self.max_active = _check_int("max_active", max_active, 1)
        # The local guard checks the rest; it reports nothing itself: this guard reports whole
        # decisions (a local slot is only half of one).
        self._local = ConcurrencyGuard(
            self.max_active if local_max_active is None else local_max_active,
            4 * self.max_active if max_queue is None else max_queue,
            queue_timeout,
            name=name,
            **local_options,
        )
        self.queue_timeout = self._local.queue_timeout
        self.lease = _check_seconds("lease", lease)
        self._conn = _connection(redis, timeout, prefix)
        self._semaphore = FleetSemaphore(self._conn, name, limit=max_active, lease=self.lease)
        self._observer = observer
        self._failure = BackendFailure(
            name,
            failure_policy,
            max_active=max_active,
            max_queue=self._local.max_queue,
            observer=observer,
            log=self._conn.failed,
        )
        self._clock: Callable[[], float] = time.monotonic

    def slot(self, timeout: float | None = None) -> FleetSlot:
        """``async with guard.slot():`` runs the body holding a fleet slot; raises
        :class:`~fusion_guard.ServerBusy` when shed; with ``timeout`` (seconds) the body is
        cancelled past that deadline and :class:`~fusion_guard.HandlerTimeout` raised."""
        if timeout is not None:
            timeout = _check_seconds("timeout", timeout, allow_inf=True)
        return FleetSlot(self, timeout)

    @property
    def name(self) -> str:
        return self._local.name

    @property
    def failure_policy(self) -> FailurePolicy:
        return self._failure.policy

    @property
    def active(self) -> int:
        """Calls of this process holding a slot (including those waiting for a lease)."""
        return self._local.active

    @property
    def queued(self) -> int:
        """Calls of this process waiting for a local slot."""
        return self._local.queued

    @property
    def max_queue(self) -> int:
        return self._local.max_queue

    @property
    def key(self) -> str:
        """The Redis key of the fleet's holders (a sorted set scored by lease expiry)."""
        return self._semaphore.key

    @property
    def local(self) -> ConcurrencyGuard:
        """This process's guard (its slots and queue)."""
        return self._local

    def __repr__(self) -> str:
        return (
            f"DistributedConcurrencyGuard(name={self.name!r}, max_active={self.max_active},"
            f" local={self._local!r}, lease={self.lease}, failure_policy={self.failure_policy!r})"
        )

    # -- the steps of a slot --------------------------------------------------------------------

    async def _local_slot(self) -> Slot:
        try:
            return await self._local.acquire()
        except ServerBusy as busy:
            if self._observer is not None:
                local = self._local
                # The local guard sheds for queue_full or queue_timeout only.
                reason = cast(ShedReason, busy.reason)
                retry_after = busy.retry_after or 0.0
                self._observer.shed(reason, local.active, local.queued, retry_after)
            raise

    async def _lease(self, deadline: float) -> str | None:
        """A lease's holder id; None when Redis failed and the policy is open."""
        backoff = _FIRST_BACKOFF
        while True:
            try:
                grant = await self._semaphore.try_acquire()
            except BackendError as exc:
                busy = self._failure.handle(exc, self._local.active, self._local.queued)
                if busy is not None:
                    raise busy from exc
                return None
            if grant.holder is not None:
                return grant.holder
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise self._fleet_full(grant.holders)
            # Full jitter: the fleet's waiters do not poll Redis in lockstep.
            await anyio.sleep(min(remaining, backoff * random.uniform(0.5, 1.0)))
            backoff = min(2 * backoff, _MAX_BACKOFF)

    async def _release(self, holder: str) -> None:
        try:
            await self._semaphore.release(holder)
        except BackendError as exc:  # the lease expires by itself within `lease` seconds
            log_event(logging.WARNING, "lease_release_failed", tool=self.name, error=str(exc))

    def _fleet_full(self, holders: int) -> ServerBusy:
        queued = self._local.queued
        retry_after = max(self._local.statistics().mean_service_time, _MAX_BACKOFF)
        if self._observer is not None:
            self._observer.shed("queue_timeout", holders, queued, retry_after)
        response = self._failure.template.render("queue_timeout", holders, queued, retry_after)
        return ServerBusy(response, retry_after, "queue_timeout")


def _connection(
    redis: str | Redis | RedisRateLimitBackend | RedisConnection, timeout: float, prefix: str
) -> RedisConnection:
    if isinstance(redis, RedisConnection):
        return redis
    if isinstance(redis, RedisRateLimitBackend):
        return redis.connection
    return RedisConnection(redis, timeout=timeout, prefix=prefix)
