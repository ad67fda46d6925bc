"""The redis-py client for each Redis topology a URL names: one node, a Cluster, or a primary
found through Sentinel.

- ``redis://``, ``rediss://``, ``unix://``: one ``redis.asyncio.Redis``.
- ``redis+cluster://``: a ``redis.asyncio.cluster.RedisCluster`` seeded with the nodes given (any
  one is enough): it keeps the slot map, follows ``MOVED`` and ``ASK``, and after a connection
  error learns the map again, so a promoted replica is found without a restart.
- ``redis+sentinel://``: a ``redis.asyncio.Redis`` whose connections ask the sentinels for the
  primary's address as they connect, so after a failover the next connection reaches the new
  primary (a demoted one answering ``READONLY`` is dropped by redis-py's Sentinel connection).

Imported by ``RedisConnection`` when it builds a client, never at ``import fusion_guard``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeAlias

from .._exceptions import ConfigurationError
from .._redis_urls import MultiNodeUrl, parse_multi_node_url
from .._secrets import redact_url

__all__ = ["ClientParts", "Topology", "client_from_url", "topology_of"]

Topology: TypeAlias = Literal["single", "cluster", "sentinel"]
ClientParts: TypeAlias = tuple[Any, Topology, Callable[[], Awaitable[None]]]
"""A client, its topology, and what closes everything it opened."""

# redis-py's cluster client caps each node's pool (100 by default) and then raises instead of
# waiting: a burst of calls to one shard would be taken for an outage. The single-node pool
# has no cap either.
_CLUSTER_MAX_CONNECTIONS = 2**31 - 1
_SCHEMES = "redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://"


def client_from_url(
    url: str,
    timeout: float,
    connect_timeout: float,
    handshake: Callable[[Any], Awaitable[None]],
) -> ClientParts:
    """The client ``url`` names, every read bounded by ``timeout``, every TCP connect by
    ``connect_timeout``; ``handshake`` replaces redis-py's on-connect step where redis-py lets
    it (one node and Sentinel: the cluster client owns its connections' set-up)."""
    try:
        multi = parse_multi_node_url(url)
    except ValueError as exc:  # its reason never quotes the URL
        raise _invalid(url, f" ({exc})") from None
    try:
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import ConnectionError as RedisConnectionError
    except ImportError as exc:
        raise ConfigurationError(
            'the Redis backend needs redis-py: pip install "fusion-guard[redis]"'
        ) from exc
    # One immediate retry on a connection error only: the first command after a Redis
    # restart (or a failover) meets a dead pooled connection, and the retry reconnects (to
    # the new primary); a timeout is not retried, so a hung Redis costs one timeout.
    retry = Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
    if multi is None:
        try:
            # socket_timeout bounds every read and write, socket_connect_timeout every TCP
            # connect; `handshake` replaces redis-py's on-connect step.
            client = Redis.from_url(
                url,
                socket_timeout=timeout,
                socket_connect_timeout=connect_timeout,
                redis_connect_func=handshake,
                retry=retry,
            )
        except ValueError as exc:
            # The parser's reason may quote a piece of a password that holds a delimiter.
            raise _invalid(url, "" if _has_credentials(url) else f" ({exc})") from exc
        return client, "single", client.aclose
    if multi.topology == "cluster":
        return _cluster(multi, timeout, connect_timeout, retry)
    return _sentinel(multi, timeout, connect_timeout, handshake, retry)


def topology_of(client: object) -> Topology:
    """The topology of a client given ready-made (a Sentinel-managed one is a plain Redis)."""
    try:
        from redis.asyncio.cluster import RedisCluster
    except ImportError:  # no redis-py, so the client is some other object with the same API
        return "single"
    return "cluster" if isinstance(client, RedisCluster) else "single"


def _cluster(
    multi: MultiNodeUrl, timeout: float, connect_timeout: float, retry: Any
) -> ClientParts:
    from redis._parsers import AsyncCommandsParser
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    class CommandTableOnce(AsyncCommandsParser):
        """redis-py fetches the whole command table (``COMMAND``: about 20 ms here, most of
        learning the slot map again) every time it learns the map, as after every connection
        error; a failover does not change it, and the calls made here (``EVALSHA``, ``SCRIPT
        LOAD``) are routed without it: fetched once, the first call after a failover fits the
        decision's timeout."""

        __slots__ = ()

        async def initialize(self, node: ClusterNode | None = None) -> None:
            if node:
                self.node = node
            if not self.commands:
                await super().initialize(node)

    client = RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in multi.nodes],
        username=multi.username,
        password=multi.password,
        socket_timeout=timeout,
        socket_connect_timeout=connect_timeout,
        # After a connection error, one retry: redis-py learns the slot map again first.
        retry=retry,
        max_connections=_CLUSTER_MAX_CONNECTIONS,
    )
    client.commands_parser = CommandTableOnce()
    return client, "cluster", client.aclose


def _sentinel(
    multi: MultiNodeUrl,
    timeout: float,
    connect_timeout: float,
    handshake: Callable[[Any], Awaitable[None]],
    retry: Any,
) -> ClientParts:
    from redis.asyncio.sentinel import Sentinel

    assert multi.service is not None  # a sentinel URL is read with its service name
    # redis-py left Sentinel's constructor untyped before 8.2: called as Any for every version.
    make_sentinel: Any = Sentinel
    sentinel = make_sentinel(
        list(multi.nodes),
        sentinel_kwargs={"socket_timeout": timeout, "socket_connect_timeout": connect_timeout},
    )
    client = sentinel.master_for(
        multi.service,
        db=multi.db,
        username=multi.username,
        password=multi.password,
        socket_timeout=timeout,
        socket_connect_timeout=connect_timeout,
        redis_connect_func=handshake,
        retry=retry,
    )

    async def aclose() -> None:
        try:
            await client.aclose()
        finally:
            # Sentinel.aclose arrived in redis-py 8.1; its sentinels' clients close alike on 8.0.
            for sentinel_client in sentinel.sentinels:
                await sentinel_client.aclose()

    return client, "sentinel", aclose


def _invalid(url: str, reason: str) -> ConfigurationError:
    return ConfigurationError(
        f"redis_url={redact_url(url)!r} is invalid: expected {_SCHEMES} with valid hosts and"
        f" ports{reason}"
    )


def _has_credentials(url: str) -> bool:
    return "@" in url or redact_url(url) != url
