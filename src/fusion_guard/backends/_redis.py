"""A fleet's connection to Redis (redis-py's asyncio client): the scripts, the one error boundary.

Every decision is one Lua script, so one round trip, atomic, on the server's clock (``TIME``):
the clocks of the replicas never matter. The scripts are package data (``backends/lua/*.lua``),
loaded with every new connection of a client made from a URL (so a Redis restarted empty gets them
back as its clients reconnect) and run by SHA1 (``EVALSHA``, falling back to ``SCRIPT LOAD`` after
``NOSCRIPT``, as after a ``SCRIPT FLUSH``). Over a connection run the rate limits
(``_redis_rate.py``) and the fleet semaphores (``_redis_lease.py``), whose leases the
connection's refresher keeps alive (``_redis_refresher.py``).

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
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeAlias

from .._checks import check_seconds
from .._exceptions import BackendError, ConfigurationError
from .._log import log_event
from .._secrets import redact_url
from .._setting_names import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_PREFIX,
    DEFAULT_TIMEOUT,
)
from ._base import key_digest
from ._redis_refresher import LeaseRefresher
from ._redis_topology import Topology, client_from_url, topology_of

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

__all__ = ["Arg", "Outage", "RedisConnection", "Script", "require_asyncio"]

Arg: TypeAlias = bytes | str | int
"""A script key or argument; bytes go out as they are (the hot path encodes once, ahead)."""

_KEY_COUNTS = tuple(b"%d" % n for n in range(64))  # every count of keys a script is run with
_ERROR_LOG_INTERVAL = 1.0
_SCRIPTS = ("gcra", "gcra_refund", "lease_acquire", "lease_release", "lease_refresh")


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
