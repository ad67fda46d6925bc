"""Limits shared by a fleet of processes through Redis (redis-py's asyncio client).

Every decision is one Lua script, so one round trip, atomic, on the server's clock (``TIME``):
the clocks of the replicas never matter. The scripts are package data (``backends/lua/*.lua``),
registered once per client (``EVALSHA``, falling back to ``SCRIPT LOAD`` after ``NOSCRIPT``: a
Redis restarted empty gets them back on the next call).

All keys share one hash tag, ``{<prefix>}``, so every decision's keys live in one Redis Cluster
slot (a decision may combine a server-wide limit with a per-client one, so no narrower tag would
do); use distinct prefixes to spread unrelated groups of limits over a cluster.

redis-py is imported inside the constructors, never at import time (``import fusion_guard`` stays
light). Its exceptions, and timeouts, are translated here, at one boundary, to
:class:`~fusion_guard.BackendError` with ``__cause__`` set.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

import anyio

from .._exceptions import BackendError, ConfigurationError
from .._log import log_event
from ..admission._concurrency import _check_seconds
from ._base import ALLOWED, GcraRequest, GcraResult, key_digest

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_PREFIX",
    "DEFAULT_TIMEOUT",
    "FailurePolicy",
    "FleetSemaphore",
    "LeaseGrant",
    "LeaseRefresher",
    "RedisConnection",
    "RedisRateLimitBackend",
    "check_failure_policy",
    "require_asyncio",
]

Arg: TypeAlias = bytes | str | int
"""A script key or argument; bytes go out as they are (the hot path encodes once, ahead)."""

FailurePolicy: TypeAlias = Literal["open", "closed"]
"""What a limit does when Redis fails: ``open`` admits the call (counted and logged),
``closed`` sheds it with SERVER_BUSY."""

DEFAULT_TIMEOUT: Final = 0.05
DEFAULT_PREFIX: Final = "fusion_guard"
DEFAULT_LEASE: Final = 10.0
_US = 1_000_000  # the scripts count in integer microseconds
_INDEX_BASE = 64  # gcra.lua's reply: retry_after * 64 + the refusing limit's index
_CACHE_SIZE = 4096  # encodings kept per table (a full table is cleared)
_KEY_COUNTS = tuple(b"%d" % n for n in range(_INDEX_BASE))
_ERROR_LOG_INTERVAL = 1.0
_SCRIPTS = ("gcra", "lease_acquire", "lease_release", "lease_refresh")


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


def check_failure_policy(value: object, parameter: str = "failure_policy") -> FailurePolicy:
    """``value`` when it is ``"open"`` or ``"closed"``, else a ConfigurationError."""
    if value == "open":
        return "open"
    if value == "closed":
        return "closed"
    raise ConfigurationError(f"{parameter}={value!r} is invalid: expected 'open' or 'closed'")


def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise ConfigurationError(
            f"prefix={prefix!r} is invalid: expected a non-empty string without braces "
            "(the prefix becomes the keys' Redis Cluster hash tag)"
        )
    return prefix


def _load_script(name: str) -> str:
    return resources.files("fusion_guard.backends").joinpath(f"lua/{name}.lua").read_text("utf-8")


def _client_from_url(url: str, timeout: float) -> Redis:
    try:
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import ConnectionError as RedisConnectionError
    except ImportError as exc:
        raise ConfigurationError(
            'the Redis backend needs redis-py: pip install "fusion-guard[redis]"'
        ) from exc
    try:
        # socket_timeout bounds every read and write, socket_connect_timeout every connect.
        # One immediate retry on a connection error only: the first command after a Redis
        # restart meets a dead pooled connection, and the retry reconnects; a timeout is not
        # retried, so a hung Redis costs one timeout.
        return Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        )
    except ValueError as exc:
        raise ConfigurationError(
            f"redis_url={url!r} is invalid: expected redis://, rediss:// or unix:// ({exc})"
        ) from exc


class Script:
    """A Lua script of ``backends/lua``, known to Redis by its SHA1 (``EVALSHA``)."""

    __slots__ = ("name", "sha", "text")

    def __init__(self, name: str) -> None:
        self.name = name
        self.text = _load_script(name)
        self.sha = hashlib.sha1(self.text.encode("utf-8")).hexdigest().encode()


def _redis_errors() -> tuple[tuple[type[BaseException], ...], type[BaseException]]:
    """What the boundary translates, and redis-py's NOSCRIPT error."""
    from redis.exceptions import NoScriptError, RedisError

    # TimeoutError (asyncio.timeout) and socket errors are OSErrors.
    return (RedisError, OSError), NoScriptError


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
    return BackendError(f"redis {script.name} failed: {type(exc).__name__}: {exc or 'timed out'}")


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

    ``target`` is a URL (``redis://host:port/db``) or an existing ``redis.asyncio.Redis``.
    ``timeout`` (seconds) bounds every call, so a hung Redis never hangs a tool: through the
    socket timeouts of a client made from a URL (free: redis-py applies them anyway), or an
    ``asyncio.timeout`` around each call for a client given ready-made.
    """

    __slots__ = (
        "_client",
        "_errors",
        "_execute",
        "_log",
        "_no_script",
        "_outer_timeout",
        "key_prefix",
        "outage",
        "prefix",
        "refresher",
        "scripts",
        "timeout",
    )

    def __init__(
        self, target: str | Redis, *, timeout: float = DEFAULT_TIMEOUT, prefix: str = DEFAULT_PREFIX
    ) -> None:
        self.timeout = _check_seconds("timeout", timeout)
        self.prefix = _check_prefix(prefix)
        self.key_prefix = "{" + self.prefix + "}:"
        if isinstance(target, str):
            self._client = _client_from_url(target, self.timeout)
            self._outer_timeout = False
        elif callable(getattr(target, "execute_command", None)):
            self._client = target
            self._outer_timeout = True
        else:
            raise ConfigurationError(
                f"redis={target!r} is invalid: expected a redis:// URL or a redis.asyncio.Redis"
            )
        self._execute: Callable[..., Awaitable[Any]] = self._client.execute_command
        self._errors, self._no_script = _redis_errors()
        self.scripts = {name: Script(name) for name in _SCRIPTS}
        self.refresher = LeaseRefresher()
        self.outage = Outage()
        self._log = _ErrorLog()

    @property
    def client(self) -> Redis:
        """The redis-py client (for PING in benchmarks, or closing)."""
        return self._client

    async def run(self, script: Script, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        """Run ``script`` (one round trip); any failure or timeout is a BackendError."""
        require_asyncio()
        try:
            if not self._outer_timeout:  # the hot path: one await, no extra coroutine
                count = _KEY_COUNTS[len(keys)]
                return await self._execute(b"EVALSHA", script.sha, count, *keys, *args)
            async with asyncio.timeout(self.timeout):
                return await self._evalsha(script, keys, args)
        except self._no_script:  # a Redis restarted empty, or SCRIPT FLUSH: load it again
            return await self.run_loading(script, keys, args)
        except self._errors as exc:
            raise _backend_error(script, exc) from exc

    async def run_loading(self, script: Script, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        """``run``, loading the script first (after NOSCRIPT)."""
        try:
            async with asyncio.timeout(self.timeout):
                await self._client.script_load(script.text)
                return await self._execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except self._errors as exc:
            raise _backend_error(script, exc) from exc

    async def _evalsha(self, script: Script, keys: Sequence[Arg], args: Sequence[Arg]) -> Any:
        try:
            return await self._execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except self._no_script:
            await self._client.script_load(script.text)
            return await self._execute("EVALSHA", script.sha, len(keys), *keys, *args)

    def failed(self, exc: BackendError, allowed: bool) -> None:
        """Log a failure (sampled); the caller reports it to its observer."""
        self._log.record(exc, allowed)

    async def aclose(self) -> None:
        """Stop refreshing leases and close the client's connections."""
        self.refresher.stop()
        await self._client.aclose()


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
    """

    __slots__ = (
        "_args",
        "_conn",
        "_counter",
        "_held",
        "_keys",
        "_owner",
        "_scripts",
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
        lease_ms = max(1, round(lease * 1000))
        self._keys = [f"{conn.key_prefix}lease:{name}"]
        self._args: list[Arg] = [limit, lease_ms]
        self._owner = _owner_id()
        self._counter = 0
        self._held: set[str] = set()

    @property
    def key(self) -> str:
        """The Redis key of the holders' sorted set."""
        return self._keys[0]

    @property
    def held(self) -> int:
        """How many leases this process holds now."""
        return len(self._held)

    async def try_acquire(self) -> LeaseGrant:
        """One attempt (one round trip); raises BackendError when Redis fails."""
        self._counter += 1
        holder = f"{self._owner}:{self._counter}"
        args = [holder, *self._args]
        try:
            reply = await self._conn.run(self._scripts.lease_acquire, self._keys, args)
        except asyncio.CancelledError:
            await self._forget(holder)
            raise
        if not reply[0]:
            return LeaseGrant(None, int(reply[1]))
        self._held.add(holder)
        self._conn.refresher.holding(self)
        return LeaseGrant(holder, int(reply[1]))

    async def _forget(self, holder: str) -> None:
        """Cancelled while the acquire was in flight: Redis may have granted it, so release it
        (shielded, bounded by the timeout; if that fails too, the lease just expires)."""
        with anyio.CancelScope(shield=True), contextlib.suppress(BackendError):
            await self._conn.run(self._scripts.lease_release, self._keys, [holder])

    async def release(self, holder: str) -> None:
        """Give a lease back; raises BackendError when Redis fails (the lease then expires)."""
        self._held.discard(holder)
        if not self._held:
            self._conn.refresher.idle(self)
        await self._conn.run(self._scripts.lease_release, self._keys, [holder])

    async def refresh(self) -> None:
        """Extend this process's leases (one round trip); failures are logged, not raised."""
        if not self._held:
            return
        try:
            args = [*self._args, *self._held]
            reply = await self._conn.run(self._scripts.lease_refresh, self._keys, args)
        except BackendError as exc:
            log_event(logging.WARNING, "lease_refresh_failed", semaphore=self.name, error=str(exc))
            return
        if reply[1]:
            log_event(logging.WARNING, "lease_lost", semaphore=self.name, lost=int(reply[1]))


class LeaseRefresher:
    """One background task per connection, so per process, that refreshes the leases of every
    fleet semaphore holding some, every third of the shortest lease (two refreshes may fail
    before a running call loses its lease). It starts with the first lease and ends when no
    semaphore holds any, so an idle process runs no task."""

    __slots__ = ("_holding", "_sleeping", "_task")

    def __init__(self) -> None:
        self._holding: set[FleetSemaphore] = set()
        self._task: asyncio.Task[None] | None = None
        self._sleeping = False

    def holding(self, semaphore: FleetSemaphore) -> None:
        """``semaphore`` holds leases: refresh them until it does not."""
        self._holding.add(semaphore)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="fusion_guard lease refresher"
            )

    def idle(self, semaphore: FleetSemaphore) -> None:
        """``semaphore`` holds no lease any more."""
        self._holding.discard(semaphore)
        if not self._holding and self._sleeping:
            self.stop()

    def stop(self) -> None:
        """Cancel the task (it is started again by the next lease)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while self._holding:
            period = min(semaphore.lease for semaphore in self._holding) / 3
            self._sleeping = True
            try:
                await asyncio.sleep(period)
            finally:
                self._sleeping = False
            for semaphore in tuple(self._holding):
                await semaphore.refresh()


def _owner_id() -> str:
    """A short id unique to this semaphore object in this process (leases name their owner)."""
    return f"{os.getpid()}-{secrets.token_hex(4)}"


class RedisRateLimitBackend:
    """GCRA rate limits shared by a fleet, in Redis: a :class:`RateBackend`.

    ``redis``: a ``redis://`` URL or a ``redis.asyncio.Redis``. ``timeout``: seconds any call may
    take (default 50 ms) before it counts as a failure. ``failure_policy``: what the limits
    using this backend do when Redis fails, ``"open"`` (admit, count, log) or ``"closed"``
    (shed with SERVER_BUSY); ``decide`` itself raises :class:`~fusion_guard.BackendError` and the
    limiter applies the policy. ``prefix``: the keys' namespace and Redis Cluster hash tag.

    A decision is one ``EVALSHA`` (one round trip) on the server's clock, all or nothing over
    its limits, with the exact ``retry_after`` in the same reply. Caller keys are stored as
    digests (they may name users). Needs asyncio (redis-py's client is asyncio-only).
    """

    __slots__ = ("_conn", "_digests", "_gcra", "_micros", "_rate_prefix", "failure_policy")

    def __init__(
        self,
        redis: str | Redis | RedisConnection,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        failure_policy: FailurePolicy = "open",
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        self.failure_policy = check_failure_policy(failure_policy)
        self._conn = (
            redis
            if isinstance(redis, RedisConnection)
            else RedisConnection(redis, timeout=timeout, prefix=prefix)
        )
        self._rate_prefix = f"{self._conn.key_prefix}rate:"
        self._gcra = self._conn.scripts["gcra"]
        self._digests: dict[str, bytes] = {}
        self._micros: dict[float, bytes] = {}

    @property
    def connection(self) -> RedisConnection:
        """The connection, to share with a :class:`DistributedConcurrencyGuard`."""
        return self._conn

    async def decide(self, requests: Sequence[GcraRequest]) -> GcraResult:
        """Decide one call against every request's limit, in one round trip."""
        if len(requests) >= _INDEX_BASE:
            raise ConfigurationError(
                f"{len(requests)} limits in one decision: the Redis backend decides at most"
                f" {_INDEX_BASE - 1} at once"
            )
        keys: list[Arg] = []
        args: list[Arg] = []
        digests, micros = self._digests, self._micros
        for key, emission_interval, tolerance in requests:
            keys.append(digests.get(key) or self._digest(key))
            args.append(micros.get(emission_interval) or self._micro(emission_interval))
            args.append(micros.get(tolerance) or self._micro(tolerance))
        reply = await self._conn.run(self._gcra, keys, args)
        if not reply:
            return ALLOWED
        wait_us, refused = divmod(int(reply), _INDEX_BASE)
        return GcraResult(False, wait_us / _US, refused - 1)

    # The per-call encodings are cached (bounded: a full table is cleared), so the hot path
    # sends ready bytes: a decision should cost about what a PING costs.

    def _digest(self, key: str) -> bytes:
        """The Redis key of a limiter key: a digest (keys may name users)."""
        digests = self._digests
        if len(digests) >= _CACHE_SIZE:
            digests.clear()
        redis_key = digests[key] = (self._rate_prefix + key_digest(key)).encode()
        return redis_key

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
        return (
            f"RedisRateLimitBackend(prefix={self._conn.prefix!r}, timeout={self._conn.timeout},"
            f" failure_policy={self.failure_policy!r})"
        )
