"""Limits shared by a fleet of processes through Redis (redis-py's asyncio client).

Every decision is one Lua script, so one round trip, atomic, on the server's clock (``TIME``):
the clocks of the replicas never matter. The scripts are package data (``backends/lua/*.lua``),
loaded with every new connection of a client made from a URL (so a Redis restarted empty gets them
back as its clients reconnect) and run by SHA1 (``EVALSHA``, falling back to ``SCRIPT LOAD`` after
``NOSCRIPT``, as after a ``SCRIPT FLUSH``).

Two budgets: ``timeout`` bounds each decision (one round trip), ``connect_timeout`` bounds
setting up a connection (handshake and loading the scripts) until the first one is up, so a cold
start under load is not taken for an outage; later connections (after a restart, say) set up
under ``timeout``, so a stalled Redis costs a call no more than that. The TCP connect itself
always has ``connect_timeout`` (redis-py fixes it per client): a stalled Redis still accepts
connections, so only a host that drops them costs that much per new connection.

Where keys live depends on the topology (``RedisConnection.key``). On one node (plain or found
through Sentinel) every key shares the tag ``{<prefix>}``, as it always has, and a decision over
any limits is one script. On a Redis Cluster the prefix is only a namespace and each budget (a
limit's key for one caller) and each fleet semaphore has its own hash tag, so they spread over
the shards, while the keys one script touches (a budget and its promise cursor; a semaphore's
holders, released ids and record) share a slot. A decision over limits whose budgets sit in
different slots is decided slot by slot, giving back what an earlier slot took when a later one
refuses (see ``RedisRateLimitBackend.decide``).

redis-py is imported inside the constructors, never at import time (``import fusion_guard`` stays
light). Its exceptions, and timeouts, are translated here, at one boundary, to
:class:`~fusion_guard.BackendError` with ``__cause__`` set.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import math
import os
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from .._bounds import LEASE_REFRESH_PERIOD
from .._checks import check_failure_policy, check_seconds
from .._exceptions import BackendError, ConfigurationError
from .._log import log_event
from .._secrets import redact_url
from .._setting_names import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LEASE,
    DEFAULT_PREFIX,
    DEFAULT_TIMEOUT,
    FailurePolicy,
)
from ._base import ALLOWED, GcraRequest, GcraResult, key_digest
from ._redis_topology import Topology, client_from_url, topology_of

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_LEASE",
    "DEFAULT_PREFIX",
    "DEFAULT_TIMEOUT",
    "FailurePolicy",
    "FleetSemaphore",
    "LeaseGrant",
    "LeaseRefresher",
    "RECOVERY_GRACE",
    "RedisConnection",
    "RedisRateLimitBackend",
    "check_failure_policy",
    "require_asyncio",
]

Arg: TypeAlias = bytes | str | int
"""A script key or argument; bytes go out as they are (the hot path encodes once, ahead)."""

RECOVERY_GRACE: Final = 0.5
"""Seconds new leases wait after Redis lost the holders (a restart), while running calls'
replicas register their leases again: each refreshes at least twice in that time."""
_US = 1_000_000  # the scripts count in integer microseconds
_INDEX_BASE = 64  # gcra.lua's reply: retry_after * 64 + the refusing limit's index
_CACHE_SIZE = 4096  # encodings kept per table (a full table is cleared)
# The longest limiter key whose Redis keys are cached: a limit's name (at most 200 characters)
# and a client's key as the guard keeps it (``_keys.MAX_KEY_CHARS``), with room to spare; so
# the cache holds at most 4096 x 512 characters however long the keys callers pass.
_CACHED_KEY_CHARS = 512
_KEY_COUNTS = tuple(b"%d" % n for n in range(_INDEX_BASE))
_ERROR_LOG_INTERVAL = 1.0
_SCRIPTS = ("gcra", "gcra_refund", "lease_acquire", "lease_release", "lease_refresh")
# The longest refresh period, RECOVERY_GRACE / 2: a silent replica (its calls running, none
# arriving) learns of a restart within the grace. The settings floor leases on it.
_REFRESH_MAX = LEASE_REFRESH_PERIOD
_FIRST_RETRY = 0.05  # the refresher's retries of leases left to settle, doubling up to
_MAX_RETRY = 0.2  # this (seconds): inside RECOVERY_GRACE
_ABANDONED_MAX = 4096  # ids kept to release per semaphore; older ones just expire with the lease
_RELEASE_BATCH = 256  # ids per release round trip


def require_asyncio() -> None:
    """Raise a clear ConfigurationError when not running under asyncio (trio, or no loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise ConfigurationError(
            "the Redis backend needs asyncio: redis-py's client is asyncio-only, and this code "
            "runs under another event loop (trio?); run the server under asyncio, or use "
            "FUSION_GUARD_BACKEND=memory"
        ) from None


def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise ConfigurationError(
            f"prefix={prefix!r} is invalid: expected a non-empty string without braces "
            "(on one Redis node the prefix is also the keys' hash tag)"
        )
    return prefix


def _load_script(name: str) -> str:
    return resources.files("fusion_guard.backends").joinpath(f"lua/{name}.lua").read_text("utf-8")


class Script:
    """A Lua script of ``backends/lua``, known to Redis by its SHA1 (``EVALSHA``)."""

    __slots__ = ("name", "sha", "text")

    def __init__(self, name: str) -> None:
        self.name = name
        self.text = _load_script(name)
        self.sha = hashlib.sha1(self.text.encode("utf-8")).hexdigest().encode()


def _redis_errors() -> tuple[tuple[type[BaseException], ...], type[BaseException]]:
    """What the boundary translates, and redis-py's NOSCRIPT error."""
    from redis.exceptions import NoScriptError

    # Redis errors, timeouts (asyncio.timeout's TimeoutError) and socket errors (OSError), and
    # anything else the client raises: redis-py 8.0's cluster client can raise AttributeError on
    # a connection closed under it during a failover. To a caller a client's fault is an outage
    # (its failure policy applies), never a crash.
    return (Exception,), NoScriptError


class _ErrorLog:
    """Logs backend failures at most once a second, with how many were folded in, so an
    outage never costs more in logging than the decisions it disturbs."""

    __slots__ = ("_next", "_suppressed")

    def __init__(self) -> None:
        self._next = 0.0
        self._suppressed = 0

    def record(self, exc: BackendError, allowed: bool) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        self._next = now + _ERROR_LOG_INTERVAL
        suppressed, self._suppressed = self._suppressed, 0
        log_event(
            logging.WARNING,
            "backend_error",
            backend="redis",
            decision="allowed" if allowed else "denied",
            error=str(exc),
            suppressed=suppressed,
        )


def _backend_error(script: Script, exc: BaseException) -> BackendError:
    # asyncio's TimeoutError has no message of its own.
    detail = str(exc) or ("timed out" if isinstance(exc, TimeoutError) else "no detail")
    return BackendError(f"redis {script.name} failed: {type(exc).__name__}: {detail}")


class Outage:
    """How long Redis has been failing, for the retry_after of fail-closed refusals.

    An outage is expected to last about as long again as it has lasted so far (at least
    ``min_retry_after``, at most ``max_retry_after``), with +-20 % jitter so that refused callers
    do not all come back in the same instant; failures more than ``gap`` seconds apart belong to
    separate outages. Shared by everything on one connection.
    """

    __slots__ = ("_clock", "_last", "_start", "gap", "max_retry_after", "min_retry_after")

    def __init__(
        self,
        *,
        min_retry_after: float = 1.0,
        max_retry_after: float = 30.0,
        gap: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.min_retry_after = min_retry_after
        self.max_retry_after = max_retry_after
        self.gap = gap
        self._clock = clock
        self._start = self._last = -math.inf

    def retry_after(self) -> float:
        """Record one more failure now and advise when to come back (seconds)."""
        now = self._clock()
        if now - self._last > self.gap:
            self._start = now
        self._last = now
        lasted = min(self.max_retry_after, max(self.min_retry_after, now - self._start))
        return lasted * random.uniform(0.8, 1.2)


class RedisConnection:
    """One redis-py asyncio client, the scripts, and the one error boundary.

    ``target`` is a URL (``redis://host:port/db``, ``redis+cluster://host:port,...``,
    ``redis+sentinel://host:port,.../service``) or an existing ``redis.asyncio.Redis`` or
    ``RedisCluster``.
    ``timeout`` (seconds) bounds every call, so a hung Redis never hangs a tool: through the
    socket timeouts of a client made from a URL (free: redis-py applies them anyway), or an
    ``asyncio.timeout`` around each call for a client given ready-made, and for a cluster (whose
    client retries through a new slot map, which a socket timeout alone does not bound).
    ``connect_timeout`` (seconds) bounds setting up the first connections instead (see the
    module); a client that sets up its connections itself (ready-made, or a cluster's) has it
    for its first calls, until one succeeded.
    """

    __slots__ = (
        "_aclose",
        "_client",
        "_errors",
        "_evalsha",
        "_execute",
        "_log",
        "_no_script",
        "_outer_timeout",
        "_started",
        "connect_timeout",
        "key_prefix",
        "outage",
        "prefix",
        "refresher",
        "scripts",
        "target",
        "timeout",
        "topology",
    )

    def __init__(
        self,
        target: str | Redis | RedisCluster,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        prefix: str = DEFAULT_PREFIX,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        self.timeout = check_seconds("timeout", timeout)
        self.connect_timeout = check_seconds("connect_timeout", connect_timeout)
        self.prefix = _check_prefix(prefix)
        self.key_prefix = "{" + self.prefix + "}:"
        self._started = False  # no connection set up (URL) or call answered (ready-made) yet
        self.scripts = {name: Script(name) for name in _SCRIPTS}
        self.topology: Topology
        self._client: Redis | RedisCluster
        if isinstance(target, str):
            self.target = redact_url(target)
            self._client, self.topology, self._aclose = client_from_url(
                target, self.timeout, self.connect_timeout, self._handshake
            )
            self._outer_timeout = self.topology == "cluster"
        elif callable(getattr(target, "execute_command", None)):
            self.target = f"<{type(target).__name__} given ready-made>"
            self._client = target
            self.topology = topology_of(target)
            self._aclose = target.aclose
            self._outer_timeout = True
        else:
            raise ConfigurationError(
                f"redis (a {type(target).__name__}) is invalid: expected a redis:// URL, a"
                " redis.asyncio.Redis or a RedisCluster"
            )
        # The cluster client reads the command name to route it, as text only; one node
        # takes bytes, sent as they are.
        self._evalsha: Arg = "EVALSHA" if self.topology == "cluster" else b"EVALSHA"
        self._execute: Callable[..., Awaitable[Any]] = self._client.execute_command
        self._errors, self._no_script = _redis_errors()
        self.refresher = LeaseRefresher()
        self.outage = Outage()
        self._log = _ErrorLog()

    @property
    def client(self) -> Redis | RedisCluster:
        """The redis-py client (for PING in benchmarks, or closing)."""
        return self._client

    def key(self, kind: str, ident: str) -> str:
        """The Redis key of ``ident`` (a budget's digest, a semaphore's name) of ``kind``.

        One node: ``{prefix}:kind:ident``, every key in one slot (as before clusters were
        spread). A cluster: ``prefix:kind:{ident}``, a slot per ident, so unrelated budgets and
        semaphores spread over the shards; a key made by appending to this one stays in its
        slot. An ident holding braces is tagged by its digest, so the tag is always whole.
        """
        if self.topology != "cluster":
            return f"{self.key_prefix}{kind}:{ident}"
        tag = key_digest(ident) if "{" in ident or "}" in ident else ident
        return f"{self.prefix}:{kind}:{{{tag}}}"

    async def run(self, script: Script, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        """Run ``script`` (one round trip); any failure or timeout is a BackendError."""
        require_asyncio()
        count = _KEY_COUNTS[len(keys)]
        try:
            if not self._outer_timeout:  # the hot path: one await, no extra coroutine
                return await self._execute(self._evalsha, script.sha, count, *keys, *args)
            return await self._run_bounded(script, count, keys, args)
        except self._no_script:  # SCRIPT FLUSH, or a ready-made client's restarted Redis
            return await self.run_loading(script, keys, args)
        except self._errors as exc:
            raise _backend_error(script, exc) from exc

    async def run_loading(self, script: Script, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        """``run``, loading the script first (after NOSCRIPT), the load under its own budget
        (``connect_timeout``; a URL client's socket timeout still bounds each of its reads)."""
        count = _KEY_COUNTS[len(keys)]
        try:
            async with asyncio.timeout(self.connect_timeout):
                await self._client.script_load(script.text)
            if self._outer_timeout:
                return await self._run_bounded(script, count, keys, args)
            return await self._execute(self._evalsha, script.sha, count, *keys, *args)
        except self._errors as exc:
            raise _backend_error(script, exc) from exc

    async def _run_bounded(
        self, script: Script, count: bytes, keys: Sequence[Arg], args: Sequence[Arg]
    ) -> Any:
        """A ready-made client's call under an asyncio.timeout: ``connect_timeout`` until a call
        succeeded (its first connections are set up inside the call), then ``timeout``."""
        budget = self.timeout if self._started else self.connect_timeout
        async with asyncio.timeout(budget):
            reply = await self._execute(self._evalsha, script.sha, count, *keys, *args)
        self._started = True
        return reply

    async def _handshake(self, connection: Any) -> None:
        """redis-py's on-connect step for a client made from a URL, under its own budget, then
        the scripts loaded on the new connection (a restarted Redis has none).

        ``socket_timeout`` is redis-py's public per-connection setting, read by every read: it
        is widened for the handshake only, then restored to the decisions' ``timeout``.
        """
        connection.socket_timeout = self.timeout if self._started else self.connect_timeout
        try:
            await connection.on_connect()
            await self._load_scripts(connection)
        finally:
            connection.socket_timeout = self.timeout
        self._started = True

    async def _load_scripts(self, connection: Any) -> None:
        """``SCRIPT LOAD`` every script in one round trip (pipelined); a refusal (an ACL
        without SCRIPT, say) is left for NOSCRIPT to reveal, since an operator may have loaded
        them."""
        from redis.exceptions import ResponseError

        for script in self.scripts.values():
            await connection.send_command("SCRIPT", "LOAD", script.text, check_health=False)
        for _ in self.scripts:
            with contextlib.suppress(ResponseError):
                await connection.read_response()

    def failed(self, exc: BackendError, allowed: bool) -> None:
        """Log a failure (sampled); the caller reports it to its observer."""
        self._log.record(exc, allowed)

    async def aclose(self) -> None:
        """Stop refreshing leases and close the client's connections."""
        self.refresher.stop()
        await self._aclose()


class LeaseGrant:
    """The reply to an acquire: the holder id when granted (None when the fleet is full), and
    how many holders the fleet has."""

    __slots__ = ("holder", "holders")

    def __init__(self, holder: str | None, holders: int) -> None:
        self.holder = holder
        self.holders = holders


class _LeaseScripts:
    __slots__ = ("lease_acquire", "lease_refresh", "lease_release")

    def __init__(self, conn: RedisConnection) -> None:
        self.lease_acquire = conn.scripts["lease_acquire"]
        self.lease_release = conn.scripts["lease_release"]
        self.lease_refresh = conn.scripts["lease_refresh"]


class FleetSemaphore:
    """A semaphore shared by a fleet: at most ``limit`` leases in one Redis sorted set.

    Each lease lasts ``lease`` seconds unless refreshed; this process's running leases are
    refreshed by the connection's one background task (see :class:`LeaseRefresher`), so a
    crashed process's permits come back within ``lease`` seconds.

    No lease outlives its call: an acquire that failed, timed out or was cancelled may still run
    on Redis (or have run), and a release that failed left its lease behind, so their holder ids
    are released by that task, in the background, retried until Redis answers (released ids
    stay released: a request delayed in a stalled Redis cannot bring them back). When Redis
    fails, or says it lost the holders, this process's running calls register their leases
    again, counted even beyond the limit, so the fleet refuses newcomers until they drain.

    ``key`` is the Redis key of the holders' sorted set.
    """

    __slots__ = (
        "_abandoned",
        "_conn",
        "_counter",
        "_grace_ms",
        "_held",
        "_keys",
        "_lease_ms",
        "_limit",
        "_owner",
        "_release_keys",
        "_remember_until",
        "_scripts",
        "_seen",
        "_suspect",
        "key",
        "lease",
        "limit",
        "name",
    )

    def __init__(self, conn: RedisConnection, name: str, *, limit: int, lease: float) -> None:
        self._conn = conn
        self._scripts = _LeaseScripts(conn)
        self.name = name
        self.limit = limit
        self.lease = lease
        self._limit = b"%d" % limit
        self._lease_ms = b"%d" % max(1, round(lease * 1000))
        self._grace_ms = b"%d" % round(RECOVERY_GRACE * 1000)
        self.key = conn.key("lease", name)
        # Encoded once: redis-py sends bytes as they are (str is encoded on every call).
        keys = (self.key, conn.key("released", name), conn.key("fleet", name))
        self._keys: list[Arg] = [key.encode() for key in keys]
        self._release_keys = self._keys[:2]
        self._owner = _owner_id()
        self._counter = 0
        self._held: set[str] = set()
        self._abandoned: dict[str, None] = {}  # holder ids to release, oldest first
        self._seen = b"0"  # b"1" once Redis answered an acquire: this replica knows the fleet
        self._suspect = False  # Redis failed since the held leases were last seen there
        # Until then (time.monotonic()), releases are remembered in Redis: a restore sent
        # before may still run, late, and must not bring a released lease back.
        self._remember_until = -math.inf

    @property
    def held(self) -> int:
        """How many leases this process holds now."""
        return len(self._held)

    @property
    def abandoned(self) -> int:
        """How many holder ids wait to be released in the background."""
        return len(self._abandoned)

    @property
    def owing(self) -> bool:
        """Whether failures left work for the background task (releases, re-registration)."""
        return bool(self._abandoned) or (self._suspect and bool(self._held))

    async def try_acquire(self) -> LeaseGrant:
        """One attempt (one round trip); raises BackendError when Redis fails."""
        self._counter += 1
        holder = f"{self._owner}:{self._counter}"
        args: list[Arg] = [holder, self._limit, self._lease_ms, self._seen, self._grace_ms]
        try:
            reply = await self._conn.run(self._scripts.lease_acquire, self._keys, args)
        except (BackendError, asyncio.CancelledError) as exc:
            # A timeout on the client does not stop the script: Redis may run it later (or ran
            # it, if the reply was on its way when cancelled). Never block the caller for it.
            self._abandon(holder, failed=isinstance(exc, BackendError))
            raise
        self._seen = b"1"
        granted, holders, recovering = reply
        if recovering:  # Redis lost the holders: ours too, if any
            self._lost()
        if self._abandoned or self._suspect:
            self._conn.refresher.wake()  # Redis answers again: settle now, not at the retry
        if not granted:
            return LeaseGrant(None, int(holders))
        self._held.add(holder)
        self._conn.refresher.holding(self)
        return LeaseGrant(holder, int(holders))

    async def release(self, holder: str) -> None:
        """Give a lease back; raises BackendError when Redis fails (the release is then
        retried in the background)."""
        self._held.discard(holder)
        remember = self._lease_ms if time.monotonic() < self._remember_until else b"0"
        try:
            await self._conn.run(
                self._scripts.lease_release, self._release_keys, [remember, holder]
            )
        except (BackendError, asyncio.CancelledError) as exc:
            self._abandon(holder, failed=isinstance(exc, BackendError))
            raise
        finally:
            if not self._held:
                self._conn.refresher.idle(self)

    async def refresh(self) -> bool:
        """Extend this process's leases (one round trip); after a failure, or when some were
        found missing, restore those Redis lost too. False when Redis failed (logged once per
        streak of failures, retried soon)."""
        if not self._held:
            self._suspect = False
            return True
        restore = self._suspect
        if restore:
            self._remember_until = time.monotonic() + self.lease
        args: list[Arg] = [self._lease_ms, self._grace_ms, b"1" if restore else b"0", *self._held]
        try:
            reply = await self._conn.run(self._scripts.lease_refresh, self._keys, args)
        except BackendError as exc:
            if not self._suspect:
                log_event(
                    logging.WARNING, "lease_refresh_failed", semaphore=self.name, error=str(exc)
                )
            self._lost()
            return False
        self._suspect = False
        if not reply[1]:
            return True
        if restore:
            log_event(
                logging.WARNING, "lease_restored", semaphore=self.name, restored=int(reply[1])
            )
        else:  # Redis lost some (a restart, a stall past the lease): restore them at once
            self._lost()
        return True

    async def settle(self) -> bool:
        """Do what failures left undone: register the running calls' leases again (first, so
        the fleet's count includes them), then release the abandoned ids, in batches. True when
        nothing is left."""
        if self._suspect and not await self.refresh():
            return False
        abandoned = self._abandoned
        while abandoned:
            batch = list(itertools.islice(abandoned, _RELEASE_BATCH))
            try:
                await self._conn.run(
                    self._scripts.lease_release, self._release_keys, [self._lease_ms, *batch]
                )
            except BackendError:
                return False
            for holder in batch:
                abandoned.pop(holder, None)
        return True

    def _abandon(self, holder: str, *, failed: bool) -> None:
        """Release ``holder`` in the background; after a failure, this process's held leases
        may be gone from Redis too."""
        abandoned = self._abandoned
        if len(abandoned) >= _ABANDONED_MAX:
            del abandoned[next(iter(abandoned))]  # the oldest: its lease, if any, expires
        abandoned[holder] = None
        if failed and self._held:
            self._suspect = True
        self._conn.refresher.owe(self)

    def _lost(self) -> None:
        """This process's leases may be missing from Redis: register them again at once."""
        if self._held:
            self._suspect = True
            self._conn.refresher.owe(self)


class LeaseRefresher:
    """The refreshing of one connection's leases, so one process's: every fleet semaphore
    holding some has them refreshed every third of the shortest lease (two refreshes may fail
    before a running call loses its lease) but at least every quarter second (so a restarted
    Redis gets the running calls' leases back within :data:`RECOVERY_GRACE`: one round trip
    per semaphore holding leases), and what failures left is settled (see
    :meth:`FleetSemaphore.settle`): at once, again whenever Redis answers a call, and every
    50 ms doubling to 200 ms while Redis keeps failing.

    A round is a timer (cheap to set and cancel with every call) that starts a task only when
    due; nothing is scheduled while nothing is held or owed, so an idle process runs nothing.
    """

    __slots__ = ("_failing", "_holding", "_owing", "_refreshed", "_retry", "_round", "_timer")

    def __init__(self) -> None:
        self._holding: set[FleetSemaphore] = set()
        self._owing: set[FleetSemaphore] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._round: asyncio.Task[None] | None = None
        self._refreshed = 0.0  # loop time of the last refresh, or of the first lease
        self._retry = _FIRST_RETRY
        self._failing = False  # the last settling failed: retry on the backoff or an answer

    @property
    def active(self) -> bool:
        """Whether a round is scheduled or running."""
        return self._timer is not None or self._round is not None

    def holding(self, semaphore: FleetSemaphore) -> None:
        """``semaphore`` holds leases: refresh them until it does not."""
        self._holding.add(semaphore)
        if not self.active:
            self._refreshed = asyncio.get_running_loop().time()
            self._schedule(self._period())

    def owe(self, semaphore: FleetSemaphore) -> None:
        """``semaphore`` has leases to settle: now, unless Redis is failing (then at the next
        retry, so an outage's failed calls do not each add a round trip)."""
        self._owing.add(semaphore)
        if not self._failing:
            self.wake()
        elif not self.active:
            self._schedule(self._retry)

    def wake(self) -> None:
        """Redis answered: settle now what is owed."""
        if self._owing and self._round is None:
            self._schedule(0.0)

    def idle(self, semaphore: FleetSemaphore) -> None:
        """``semaphore`` holds no lease any more."""
        self._holding.discard(semaphore)
        if not self._holding and not self._owing and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def stop(self) -> None:
        """Cancel what is scheduled or running (started again by the next lease or failure)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._round is not None:
            self._round.cancel()
            self._round = None

    def _schedule(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(max(0.0, delay), self._start_round)

    def _start_round(self) -> None:
        self._timer = None
        self._round = asyncio.get_running_loop().create_task(
            self._run_round(), name="fusion_guard lease refresher"
        )

    async def _run_round(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            if self._holding and loop.time() >= self._refreshed + self._period():
                for semaphore in tuple(self._holding):
                    await semaphore.refresh()
                self._refreshed = loop.time()
            self._failing = not await self._settle()
            self._retry = min(2 * self._retry, _MAX_RETRY) if self._failing else _FIRST_RETRY
        finally:
            self._round = None
        if self._owing:
            self._schedule(self._retry if self._failing else 0.0)
        elif self._holding:  # the period is read again: semaphores start and stop holding
            self._schedule(self._refreshed + self._period() - loop.time())

    async def _settle(self) -> bool:
        settled = True
        for semaphore in tuple(self._owing):
            # Calls may have left it more to do while it settled: it stays owed then.
            if await semaphore.settle() and not semaphore.owing:
                self._owing.discard(semaphore)
            else:
                settled = False
        return settled

    def _period(self) -> float:
        leases = [semaphore.lease for semaphore in self._holding]
        return min(min(leases) / 3, _REFRESH_MAX) if leases else math.inf


def _owner_id() -> str:
    """A short id unique to this semaphore object in this process (leases name their owner)."""
    return f"{os.getpid()}-{secrets.token_hex(4)}"


class RedisRateLimitBackend:
    """GCRA rate limits shared by a fleet, in Redis: a :class:`RateBackend`.

    ``redis``: a URL (``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://``,
    ``redis+sentinel://``), a ``redis.asyncio.Redis`` or ``RedisCluster``, or a
    :class:`RedisConnection` to share. ``timeout``: seconds any call may
    take (default 50 ms) before it counts as a failure; ``connect_timeout``: seconds setting up
    the first connections may take (default 1 s: a cold start is not an outage; see the
    module). ``failure_policy``: what the limits
    using this backend do when Redis fails, ``"open"`` (admit, count, log) or ``"closed"``
    (shed with SERVER_BUSY); ``decide`` itself raises :class:`~fusion_guard.BackendError` and the
    limiter applies the policy. ``prefix``: the keys' namespace (on one node also their hash
    tag; see :meth:`RedisConnection.key`).

    A decision is one ``EVALSHA`` (one round trip) on the server's clock, all or nothing over
    its limits, with the refusal's promised ``retry_after`` (staggered) in the same reply; on a
    Redis Cluster, one per slot its budgets sit in (see :meth:`decide`). Caller keys are stored
    as digests (they may name users). Needs asyncio (redis-py's client is asyncio-only).
    """

    __slots__ = ("_conn", "_digests", "_gcra", "_micros", "_refund", "_spread", "failure_policy")

    def __init__(
        self,
        redis: str | Redis | RedisCluster | RedisConnection,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        failure_policy: FailurePolicy = "open",
        prefix: str = DEFAULT_PREFIX,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        self.failure_policy = check_failure_policy(failure_policy)
        self._conn = (
            redis
            if isinstance(redis, RedisConnection)
            else RedisConnection(
                redis, timeout=timeout, prefix=prefix, connect_timeout=connect_timeout
            )
        )
        self._spread = self._conn.topology == "cluster"
        self._gcra = self._conn.scripts["gcra"]
        self._refund = self._conn.scripts["gcra_refund"]
        self._digests: dict[str, tuple[bytes, bytes]] = {}
        self._micros: dict[float, bytes] = {}

    @property
    def connection(self) -> RedisConnection:
        """The connection, to share with a :class:`DistributedConcurrencyGuard`."""
        return self._conn

    async def decide(
        self, requests: Sequence[GcraRequest], caller: str | None = None
    ) -> GcraResult:
        """Decide one call against every request's limit, in one round trip (on a cluster, one
        per slot its budgets sit in, see :meth:`_decide_by_slot`). ``caller``: who is asking,
        when known (one promise per caller, kept under a digest beside the first budget)."""
        if 2 * len(requests) >= _INDEX_BASE:  # two keys per limit, at most 63 keys
            raise ConfigurationError(
                f"{len(requests)} limits in one decision: the Redis backend decides at most"
                f" {(_INDEX_BASE - 1) // 2} at once"
            )
        if self._spread and len(requests) > 1:
            slots = self._slots(requests)
            if len(slots) > 1:
                return await self._decide_by_slot(requests, slots, caller)
        keys: list[Arg] = []
        args: list[Arg] = []
        digests, micros = self._digests, self._micros
        for key, emission_interval, tolerance in requests:
            keys += digests.get(key) or self._digest(key)
            args.append(micros.get(emission_interval) or self._micro(emission_interval))
            args.append(micros.get(tolerance) or self._micro(tolerance))
        if caller is not None:  # its promise, in the first budget's slot
            ident = key_digest("\x00".join([caller, *[key for key, _, _ in requests]]))
            first = requests[0][0]
            keys.append((digests.get(first) or self._digest(first))[0] + b":c:" + ident.encode())
        reply = await self._conn.run(self._gcra, keys, args)
        if not reply:
            return ALLOWED
        wait_us, refused = divmod(int(reply), _INDEX_BASE)
        return GcraResult(False, wait_us / _US, refused - 1)

    async def _decide_by_slot(
        self, requests: Sequence[GcraRequest], slots: dict[int, list[int]], caller: str | None
    ) -> GcraResult:
        """A decision whose budgets sit in several cluster slots (a script touches one slot):
        each slot's budgets decided in turn, in the order the limits were given; when a slot
        refuses, what the earlier slots admitted is given back (one more round trip each), so
        a refusal spends no budget, and the refusal is that slot's (its ``retry_after`` is a
        true opening of its budgets; later slots were not asked).

        Not one atomic step: between a slot's admission and its refund, that budget looks one
        call fuller to others (who may be refused for it), and a refund lost to a Redis failure
        leaves one call spent (on the side of fewer calls). A failure raises BackendError.
        """
        admitted: list[list[int]] = []
        for indices in slots.values():
            result = await self.decide([requests[index] for index in indices], caller)
            if not result.allowed:
                await self._give_back(requests, admitted)
                return GcraResult(False, result.retry_after, indices[result.refused])
            admitted.append(indices)
        return ALLOWED

    async def _give_back(self, requests: Sequence[GcraRequest], admitted: list[list[int]]) -> None:
        for indices in admitted:
            keys: list[Arg] = []
            args: list[Arg] = []
            for index in indices:
                key, emission_interval, _ = requests[index]
                keys.append((self._digests.get(key) or self._digest(key))[0])
                args.append(self._micros.get(emission_interval) or self._micro(emission_interval))
            try:
                await self._conn.run(self._refund, keys, args)
            except BackendError as exc:  # the call is refused anyway: only logged
                self._conn.failed(exc, False)

    def _slots(self, requests: Sequence[GcraRequest]) -> dict[int, list[int]]:
        """The indices of the requests whose budgets sit in each cluster slot, slots in the
        order of their first request."""
        from redis.crc import key_slot

        slots: dict[int, list[int]] = {}
        for index, (key, _, _) in enumerate(requests):
            tat = (self._digests.get(key) or self._digest(key))[0]
            slots.setdefault(key_slot(tat), []).append(index)
        return slots

    # The per-call encodings are cached (bounded: a full table is cleared), so the hot path
    # sends ready bytes: a decision should cost about what a PING costs.

    def _digest(self, key: str) -> tuple[bytes, bytes]:
        """The Redis keys of a limiter key, from a digest (keys may name users): its TAT, and its
        promise cursor (written by refusals only), in the same hash slot; known callers'
        promises go beside the TAT too (``<TAT key>:c:<digest>``). A key too long to cache is
        digested at each call, never kept."""
        tat = self._conn.key("rate", key_digest(key)).encode()
        redis_keys = (tat, tat + b":p")
        if len(key) <= _CACHED_KEY_CHARS:
            digests = self._digests
            if len(digests) >= _CACHE_SIZE:
                digests.clear()
            digests[key] = redis_keys
        return redis_keys

    def _micro(self, seconds: float) -> bytes:
        """Seconds as the scripts' integer microseconds, encoded."""
        micros = self._micros
        if len(micros) >= _CACHE_SIZE:
            micros.clear()
        encoded = micros[seconds] = b"%d" % round(seconds * _US)
        return encoded

    def failed(self, exc: BackendError, allowed: bool) -> None:
        """Log a failure the limiter handled by its policy (sampled under a storm)."""
        self._conn.failed(exc, allowed)

    async def aclose(self) -> None:
        """Close the Redis client's connections."""
        await self._conn.aclose()

    def __repr__(self) -> str:
        conn = self._conn
        return (
            f"RedisRateLimitBackend(redis={conn.target!r}, prefix={conn.prefix!r},"
            f" timeout={conn.timeout}, failure_policy={self.failure_policy!r})"
        )
