"""A concurrency limit for a whole fleet: leases in Redis, this process's bounded queue in front.

``DistributedConcurrencyGuard(8, redis="redis://...", name="billing.charge")`` lets at most 8
calls run at once across every process sharing the Redis, the ``prefix`` and the ``name``. It is a
:class:`ConcurrencyGuard` composed with a :class:`RedisLease` permit (the local slots, bounded
queue and shedding are the guard's; the lease is what a call holds besides):

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

When Redis fails (down, or slower than ``timeout``), ``BackendFailure`` (``_failure.py``) applies
``failure_policy``: ``open`` runs the call on its local slot alone (counted, logged), ``closed``
sheds it with SERVER_BUSY ``backend_unavailable``. The next call tries Redis again, so recovery
needs no restart, and no lease outlives its call: an acquire given up on (timed out, failed,
cancelled) and a release that failed are released in the background once Redis answers, and
running calls whose leases Redis lost register them again, counted (see
:class:`~fusion_guard.backends._redis_lease.FleetSemaphore`). Needs asyncio (redis-py's client is
asyncio-only).

With an adaptive ``limit=`` the leases keep ``max_active`` as the fleet's hard cap, and the local
slots of step 1 follow the limit in force in this process (``max_active="auto"`` with
``FUSION_GUARD_BACKEND=redis``: the cap is ``FUSION_GUARD_AUTO_MAX_ACTIVE``).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from .._bounds import MAX_LEASE
from .._checks import check_failure_policy, check_int, check_name, check_seconds
from .._exceptions import BackendError, ConfigurationError
from .._log import log_event
from .._observer import ToolObserver
from .._priority import DEFAULT_RANK, Priority
from .._setting_names import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LEASE,
    DEFAULT_PREFIX,
    DEFAULT_TIMEOUT,
    FailurePolicy,
)
from ..backends._redis import RedisConnection
from ..backends._redis_lease import FleetSemaphore
from ..backends._redis_rate import RedisRateLimitBackend
from ._concurrency import ConcurrencyGuard, ConcurrencyStatistics
from ._failure import BACKEND_RETRY_AFTER, BackendFailure, Figures, backend_failure
from ._limit import Limit
from ._permit import Permit
from ._slot import Slot

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

__all__ = [
    "BACKEND_RETRY_AFTER",
    "BackendFailure",
    "DistributedConcurrencyGuard",
    "RedisLease",
    "backend_failure",
]

_FIRST_BACKOFF = 0.002
_MAX_BACKOFF = 0.05


class RedisLease:
    """The fleet-wide half of a fleet slot, a :class:`~fusion_guard.Permit`: a lease in Redis
    (see the module), taken once the call holds its local slot and given back before it.

    ``take`` polls while the fleet is full, with jittered exponential backoff, until the
    ``deadline`` (then the guard's ``queue_timeout`` refusal); when Redis fails it applies
    ``failure_policy`` (``open``: no lease, the call runs on its local slot; ``closed``: SERVER_BUSY
    ``backend_unavailable``, reported to ``observer``). It sees nothing of the guard but the
    figures it reads for that envelope (``watch``).
    """

    #: ``take`` is given the call's priority rank (``Permit``).
    takes_rank: ClassVar[bool] = True

    __slots__ = (
        "_clock",
        "_conn",
        "_failure",
        "_figures",
        "_name",
        "_observer",
        "_policy",
        "_semaphore",
        "lease",
    )

    def __init__(
        self,
        conn: RedisConnection,
        name: str,
        *,
        limit: int,
        lease: float,
        failure_policy: FailurePolicy,
        clock: Callable[[], float],
        observer: ToolObserver | None = None,
    ) -> None:
        self.lease = check_seconds("lease", lease)
        if self.lease > MAX_LEASE:  # the scripts' millisecond times would no longer be exact
            raise ConfigurationError(
                f"lease={lease!r} is invalid: expected at most {MAX_LEASE:.0f} seconds (a day)"
            )
        self._conn = conn
        self._name = name
        self._clock = clock
        self._policy = check_failure_policy(failure_policy)
        self._semaphore = FleetSemaphore(conn, name, limit=limit, lease=self.lease)
        self._failure: BackendFailure | None = None  # made on the first failure
        self._observer = observer  # what a failure is reported to
        self._figures: Figures | None = None  # see watch()

    @property
    def failure_policy(self) -> FailurePolicy:
        return self._policy

    @property
    def connection(self) -> RedisConnection:
        return self._conn

    @property
    def key(self) -> str:
        """The Redis key of the fleet's holders (a sorted set scored by lease expiry)."""
        return self._semaphore.key

    @property
    def held(self) -> int:
        """Leases this process holds now."""
        return self._semaphore.held

    @property
    def limit(self) -> int:
        """The most leases the fleet holds at once."""
        return self._semaphore.limit

    def watch(self, figures: Figures) -> None:
        """Report a failure's envelope with ``figures`` (the guard the lease is composed into):
        its capacity as at the first failure, the calls running and waiting at each."""
        self._figures = figures

    async def take(self, deadline: float, rank: int = DEFAULT_RANK) -> str | None:
        """A lease's holder id; None when Redis failed and the policy is open. Raises
        ``TimeoutError`` when the fleet stayed full until ``deadline`` (the guard's clock).
        ``rank``: the call's priority, which a refusal for a failed Redis is reported under."""
        backoff = _FIRST_BACKOFF
        while True:
            try:
                grant = await self._semaphore.try_acquire()
            except BackendError as exc:
                busy = self._failed().handle(exc, rank)
                if busy is not None:
                    raise busy from exc
                return None
            if grant.holder is not None:
                return grant.holder
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise TimeoutError  # the guard refuses the call queue_timeout
            # Full jitter: the fleet's waiters do not poll Redis in lockstep.
            await anyio.sleep(min(remaining, backoff * random.uniform(0.5, 1.0)))
            backoff = min(2 * backoff, _MAX_BACKOFF)

    async def give_back(self, token: object) -> None:
        try:
            await self._semaphore.release(str(token))
        except BackendError as exc:  # retried in the background (FleetSemaphore.release)
            log_event(logging.WARNING, "lease_release_failed", tool=self._name, error=str(exc))

    def _failed(self) -> BackendFailure:
        failure = self._failure
        if failure is None:
            failure = self._failure = backend_failure(
                self._name, self._policy, self._conn, self._observer, self._figures
            )
        return failure


class DistributedConcurrencyGuard:
    """At most ``max_active`` calls at once across every process sharing ``redis``, ``prefix``
    and ``name``; this process queues as a :class:`~fusion_guard.ConcurrencyGuard` does.

    With ``limit=`` (an adaptive :class:`~fusion_guard.Limit`, a ``GradientLimit``, say) the
    fleet-wide ``max_active`` stays a hard cap and this process's own slots follow the limit
    inside it (``fleet_max_active`` is the cap, ``max_active`` and ``limit`` this process's
    slots in force). Each process learns from its own calls, whose latency the whole fleet's
    load sets; the time a call waits for a fleet lease is queueing, not latency it learns from.

    A :class:`~fusion_guard.ConcurrencyGuard` composed with a :class:`RedisLease` permit
    (``guard.guard`` and ``guard.permit``); it answers as that guard does, with the fleet's
    figures besides.
    ``redis``: a URL (``redis://``, ``redis+cluster://``, ``redis+sentinel://``...), a
    ``redis.asyncio.Redis`` or ``RedisCluster``, or a
    :class:`~fusion_guard.RedisRateLimitBackend` whose connection to share. ``lease``: seconds
    a lease lives unless refreshed (a crashed process's permits come back within it).
    ``failure_policy``: ``"open"`` or ``"closed"`` when Redis fails; ``timeout``: seconds any
    Redis call may take; ``connect_timeout``: seconds setting up the first connections may take
    (a cold start is not an outage); ``prefix``: the keys' namespace (these three
    apply to a connection made here, not to a shared one). Every other argument is
    :class:`~fusion_guard.ConcurrencyGuard`'s, for this process's slots and queue.
    A held slot from ``await acquire()`` is given back with ``await slot.arelease()``.
    """

    __slots__ = ("__weakref__", "_guard", "_lease")

    def __init__(
        self,
        max_active: int,
        max_queue: int | None = None,
        queue_timeout: float = 2.0,
        *,
        redis: str | Redis | RedisCluster | RedisRateLimitBackend | RedisConnection,
        lease: float = DEFAULT_LEASE,
        failure_policy: FailurePolicy = "open",
        timeout: float = DEFAULT_TIMEOUT,
        prefix: str = DEFAULT_PREFIX,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        **local: Any,
    ) -> None:
        name = check_name(local.get("name", "tool"))
        self._lease = RedisLease(
            _connection(redis, timeout, prefix, connect_timeout),
            name,
            limit=check_int("max_active", max_active, 1),
            lease=lease,
            failure_policy=failure_policy,
            clock=local.get("clock", time.monotonic),
            observer=local.get("observer"),
        )
        # With a limit, the fleet's cap is the lease's and this process's slots are the limit's.
        local_slots = max_active if local.get("limit") is None else None
        self._guard = ConcurrencyGuard(
            local_slots, max_queue, queue_timeout, permit=self._lease, **local
        )
        self._lease.watch(self._guard)

    @property
    def guard(self) -> ConcurrencyGuard:
        """This process's guard: its slots and queue, composed with the fleet lease."""
        return self._guard

    # -- the guard's surface, answered by the guard -----------------------------------------

    def slot(
        self,
        timeout: float | None = None,
        client: str | None = None,
        priority: Priority | str | None = None,
    ) -> Slot:
        """``async with guard.slot():``: a local slot, then a fleet lease (see the module).
        ``priority`` orders this process's queue: priorities act per process."""
        return self._guard.slot(timeout, client, priority)

    async def acquire(self, client: str | None = None) -> Slot:
        """A held slot and lease; give them back with ``await slot.arelease()``."""
        return await self._guard.acquire(client)

    def acquire_nowait(self) -> Slot:
        """Not available: a fleet lease is awaited."""
        raise ConfigurationError(
            "DistributedConcurrencyGuard.acquire_nowait() is not available with a permit to"
            " await (a fleet lease): use `await guard.acquire()` or `async with guard.slot()`"
        )

    def statistics(self) -> ConcurrencyStatistics:
        return self._guard.statistics()

    @property
    def name(self) -> str:
        return self._guard.name

    @property
    def active(self) -> int:
        """Calls holding a local slot now."""
        return self._guard.active

    @property
    def queued(self) -> int:
        """Callers waiting for a local slot now."""
        return self._guard.queued

    @property
    def limit(self) -> int:
        """This process's slots in force (see ``fleet_max_active`` for the fleet's cap)."""
        return self._guard.limit

    @property
    def max_active(self) -> int:
        """An alias of ``limit`` (this process's slots in force)."""
        return self._guard.max_active

    @property
    def max_queue(self) -> int:
        return self._guard.max_queue

    @property
    def queue_timeout(self) -> float:
        return self._guard.queue_timeout

    @property
    def lifo(self) -> bool:
        return self._guard.lifo

    @property
    def standing_limit(self) -> int:
        return self._guard.standing_limit

    @property
    def fair(self) -> bool:
        return self._guard.fair

    @property
    def max_active_per_client(self) -> int | None:
        return self._guard.max_active_per_client

    @property
    def observer(self) -> ToolObserver | None:
        return self._guard.observer

    @property
    def adaptive_limit(self) -> Limit | None:
        return self._guard.adaptive_limit

    @property
    def reports_finished(self) -> bool:
        return self._guard.reports_finished

    @property
    def permit(self) -> Permit:
        """The fleet lease (a :class:`RedisLease`)."""
        return self._lease

    # -- the fleet's figures, answered by the lease -----------------------------------------

    @property
    def fleet_max_active(self) -> int:
        """The most calls at once across the fleet (the leases' cap)."""
        return self._lease.limit

    @property
    def lease(self) -> float:
        """Seconds a lease lives unless refreshed."""
        return self._lease.lease

    @property
    def failure_policy(self) -> FailurePolicy:
        return self._lease.failure_policy

    @property
    def key(self) -> str:
        """The Redis key of the fleet's holders (a sorted set scored by lease expiry)."""
        return self._lease.key

    @property
    def connection(self) -> RedisConnection:
        """The Redis connection (shared with a rate backend when given one): close it with
        ``await guard.connection.aclose()`` when the guard owns it."""
        return self._lease.connection

    @property
    def held_leases(self) -> int:
        """Leases this process holds now (calls running with a fleet slot)."""
        return self._lease.held

    def __repr__(self) -> str:
        return (
            f"DistributedConcurrencyGuard(name={self.name!r}, max_active={self.max_active},"
            f" fleet_max_active={self.fleet_max_active}, active={self.active},"
            f" queued={self.queued}, lease={self.lease},"
            f" failure_policy={self.failure_policy!r})"
        )


def _connection(
    redis: str | Redis | RedisCluster | RedisRateLimitBackend | RedisConnection,
    timeout: float,
    prefix: str,
    connect_timeout: float,
) -> RedisConnection:
    if isinstance(redis, RedisConnection):
        return redis
    if isinstance(redis, RedisRateLimitBackend):
        return redis.connection
    return RedisConnection(redis, timeout=timeout, prefix=prefix, connect_timeout=connect_timeout)
