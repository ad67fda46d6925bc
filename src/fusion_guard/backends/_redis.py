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
import logging
import math
import os
import secrets
import time
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

from .._exceptions import BackendError, ConfigurationError
from .._log import log_event
from ._base import ALLOWED, GcraRequest, GcraResult, key_digest

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_PREFIX",
    "DEFAULT_TIMEOUT",
    "FAILURE_POLICIES",
    "FailurePolicy",
    "FleetSemaphore",
    "LeaseGrant",
    "RedisConnection",
    "RedisRateLimitBackend",
    "check_failure_policy",
    "require_asyncio",
]

FailurePolicy: TypeAlias = Literal["open", "closed"]
"""What a limit does when Redis fails: ``open`` admits the call (counted and logged),
``closed`` sheds it with SERVER_BUSY."""

FAILURE_POLICIES: Final = ("open", "closed")
DEFAULT_TIMEOUT: Final = 0.05
DEFAULT_PREFIX: Final = "fusion_guard"
DEFAULT_LEASE: Final = 10.0
_US = 1_000_000  # the scripts count in integer microseconds
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


def _check_timeout(timeout: object) -> float:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigurationError(
            f"timeout={timeout!r} is invalid: expected a finite number of seconds > 0"
        )
    return float(timeout)


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
    except ImportError as exc:
        raise ConfigurationError(
            'the Redis backend needs redis-py: pip install "fusion-guard[redis]"'
        ) from exc
    try:
        # One immediate retry: the first command after a Redis restart meets a dead pooled
        # connection; the retry reconnects. The overall timeout still bounds both attempts.
        return Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 1),
        )
    except ValueError as exc:
        raise ConfigurationError(
            f"redis_url={url!r} is invalid: expected redis://, rediss:// or unix:// ({exc})"
        ) from exc


def _redis_errors() -> tuple[type[BaseException], ...]:
    from redis.exceptions import RedisError

    # TimeoutError (asyncio.timeout) and socket errors are OSErrors.
    return (RedisError, OSError)


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


class RedisConnection:
    """One redis-py asyncio client with the registered scripts and the one error boundary.

    ``target`` is a URL (``redis://host:port/db``) or an existing ``redis.asyncio.Redis``.
    ``timeout`` (seconds) bounds every call, so a hung Redis never hangs a tool.
    """

    __slots__ = ("_client", "_errors", "_log", "_scripts", "key_prefix", "prefix", "timeout")

    def __init__(
        self, target: str | Redis, *, timeout: float = DEFAULT_TIMEOUT, prefix: str = DEFAULT_PREFIX
    ) -> None:
        self.timeout = _check_timeout(timeout)
        self.prefix = _check_prefix(prefix)
        self.key_prefix = "{" + self.prefix + "}:"
        if isinstance(target, str):
            self._client = _client_from_url(target, self.timeout)
        elif hasattr(target, "register_script"):
            self._client = target
        else:
            raise ConfigurationError(
                f"redis={target!r} is invalid: expected a redis:// URL or a redis.asyncio.Redis"
            )
        self._errors = _redis_errors()
        self._scripts: dict[str, AsyncScript] = {
            name: self._client.register_script(_load_script(name)) for name in _SCRIPTS
        }
        self._log = _ErrorLog()

    @property
    def client(self) -> Redis:
        """The redis-py client (for PING in benchmarks, or closing)."""
        return self._client

    async def run(self, script: str, keys: list[str], args: list[str | int]) -> Any:
        """Run one registered script within the timeout; any failure is a BackendError."""
        require_asyncio()
        try:
            async with asyncio.timeout(self.timeout):
                return await self._scripts[script](keys, args)
        except self._errors as exc:
            raise BackendError(
                f"redis {script} failed: {type(exc).__name__}: {exc or 'timed out'}"
            ) from exc

    def failed(self, exc: BackendError, allowed: bool) -> None:
        """Log a failure (sampled); the caller reports it to its observer."""
        self._log.record(exc, allowed)

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self._client.aclose()


class LeaseGrant:
    """The reply to an acquire: a holder id when granted, else a hint of when to try again."""

    __slots__ = ("holder", "holders", "retry_in")

    def __init__(self, holder: str | None, holders: int, retry_in: float) -> None:
        self.holder = holder
        self.holders = holders
        self.retry_in = retry_in


class FleetSemaphore:
    """A semaphore shared by a fleet: at most ``limit`` leases in one Redis sorted set.

    Each lease lasts ``lease`` seconds unless refreshed; this process's running leases are
    refreshed by one background task per semaphore (not one per call), so a crashed process's
    permits come back within ``lease`` seconds.
    """

    __slots__ = (
        "_args",
        "_conn",
        "_counter",
        "_held",
        "_keys",
        "_owner",
        "_refresher",
        "_sleeping",
        "lease",
        "limit",
        "name",
    )

    def __init__(self, conn: RedisConnection, name: str, *, limit: int, lease: float) -> None:
        self._conn = conn
        self.name = name
        self.limit = limit
        self.lease = lease
        lease_ms = max(1, round(lease * 1000))
        self._keys = [f"{conn.key_prefix}lease:{name}"]
        self._args: list[str | int] = [limit, lease_ms]
        self._owner = _owner_id()
        self._counter = 0
        self._held: set[str] = set()
        self._refresher: asyncio.Task[None] | None = None
        self._sleeping = False

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
        reply = await self._conn.run("lease_acquire", self._keys, [holder, *self._args])
        if not reply[0]:
            return LeaseGrant(None, int(reply[1]), max(0, int(reply[2])) / 1000)
        self._held.add(holder)
        self._ensure_refresher()
        return LeaseGrant(holder, int(reply[1]), 0.0)

    async def release(self, holder: str) -> None:
        """Give a lease back; raises BackendError when Redis fails (the lease then expires)."""
        self._held.discard(holder)
        if not self._held and self._refresher is not None and self._sleeping:
            self._refresher.cancel()
            self._refresher = None
        await self._conn.run("lease_release", self._keys, [holder])

    def _ensure_refresher(self) -> None:
        if self._refresher is None or self._refresher.done():
            self._refresher = asyncio.get_running_loop().create_task(
                self._refresh_loop(), name=f"fusion_guard lease refresher {self.name}"
            )

    async def _refresh_loop(self) -> None:
        # A third of the lease: two refreshes may fail before a running call loses its lease.
        period = self.lease / 3
        while self._held:
            self._sleeping = True
            try:
                await asyncio.sleep(period)
            finally:
                self._sleeping = False
            if self._held:
                await self._refresh_once()

    async def _refresh_once(self) -> None:
        try:
            reply = await self._conn.run("lease_refresh", self._keys, [*self._args, *self._held])
        except BackendError as exc:
            log_event(logging.WARNING, "lease_refresh_failed", semaphore=self.name, error=str(exc))
            return
        if reply[1]:
            log_event(logging.WARNING, "lease_lost", semaphore=self.name, lost=int(reply[1]))


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

    __slots__ = ("_conn", "_rate_prefix", "failure_policy")

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

    @property
    def connection(self) -> RedisConnection:
        """The connection, to share with a :class:`DistributedConcurrencyGuard`."""
        return self._conn

    async def decide(self, requests: Sequence[GcraRequest]) -> GcraResult:
        """Decide one call against every request's limit, in one round trip."""
        prefix = self._rate_prefix
        keys: list[str] = []
        args: list[str | int] = []
        for key, emission_interval, tolerance in requests:
            keys.append(prefix + key_digest(key))
            args.append(round(emission_interval * _US))
            args.append(round(tolerance * _US))
        allowed, wait_us, refused = await self._conn.run("gcra", keys, args)
        if allowed:
            return ALLOWED
        return GcraResult(False, int(wait_us) / _US, int(refused) - 1)

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
