"""GCRA rate limits shared by a fleet, in Redis (see :class:`RedisRateLimitBackend`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._checks import check_failure_policy
from .._exceptions import BackendError, ConfigurationError
from .._setting_names import DEFAULT_CONNECT_TIMEOUT, DEFAULT_PREFIX, DEFAULT_TIMEOUT, FailurePolicy
from ._base import ALLOWED, GcraRequest, GcraResult, key_digest
from ._redis import Arg, RedisConnection

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

__all__ = ["RedisRateLimitBackend"]

_US = 1_000_000  # the scripts count in integer microseconds
_INDEX_BASE = 64  # gcra.lua's reply: retry_after * 64 + the refusing limit's index
_CACHE_SIZE = 4096  # encodings kept per table (a full table is cleared)
# The longest limiter key whose Redis keys are cached: a limit's name (at most 200 characters)
# and a client's key as the guard keeps it (``_keys.MAX_KEY_CHARS``), with room to spare; so
# the cache holds at most 4096 x 512 characters however long the keys callers pass.
_CACHED_KEY_CHARS = 512


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
