"""Reading the multi-node Redis URLs: ``redis+cluster://`` and ``redis+sentinel://``.

Pure text, no I/O and no redis-py, so the settings can refuse a bad URL at start-up and the
Redis backend can build its client from the same reading. The forms are the ``limits``
library's, which users of Python rate limits already know:

- ``redis+cluster://[user:password@]host:port[,host:port...]``: seed nodes of a Redis Cluster
  (any one is enough; the client learns the slot map from it);
- ``redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db]``: the sentinels,
  and the name of the primary they watch.

Credentials are the Redis nodes' (the sentinels are asked without: they usually have none).
A port left out is 6379 for cluster nodes, 26379 for sentinels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

__all__ = ["CLUSTER_SCHEME", "SENTINEL_SCHEME", "MultiNodeUrl", "parse_multi_node_url"]

CLUSTER_SCHEME = "redis+cluster://"
SENTINEL_SCHEME = "redis+sentinel://"
_DEFAULT_PORTS = {"cluster": 6379, "sentinel": 26379}
_HOST = re.compile(
    r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9_.\-]+))(?::(?P<port>\d+))?"
)
_SERVICE = re.compile(r"[A-Za-z0-9_.\-]+")
_MAX_PORT = 65535


@dataclass(frozen=True, slots=True)
class MultiNodeUrl:
    """A ``redis+cluster://`` or ``redis+sentinel://`` URL, read: ``nodes`` are the seeds (the
    sentinels for ``sentinel``), ``service`` the primary's name under Sentinel."""

    topology: Literal["cluster", "sentinel"]
    nodes: tuple[tuple[str, int], ...]
    service: str | None
    db: int
    username: str | None
    password: str | None


def parse_multi_node_url(url: str) -> MultiNodeUrl | None:
    """The reading of ``url``; None when it is not a multi-node URL (``redis://``, say).

    Raises ValueError naming what is wrong, never quoting the URL (it may hold a password).
    """
    if url.startswith(CLUSTER_SCHEME):
        topology: Literal["cluster", "sentinel"] = "cluster"
        rest = url[len(CLUSTER_SCHEME) :]
    elif url.startswith(SENTINEL_SCHEME):
        topology = "sentinel"
        rest = url[len(SENTINEL_SCHEME) :]
    else:
        return None
    if "?" in rest or "#" in rest:
        raise ValueError("query parameters and fragments are not supported in this form")
    userinfo, at, location = rest.rpartition("@")
    hosts, _, path = location.partition("/")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    nodes = tuple(_node(host, _DEFAULT_PORTS[topology]) for host in hosts.split(","))
    service, db = _path(topology, path)
    return MultiNodeUrl(topology, nodes, service, db, username, password)


def _node(text: str, default_port: int) -> tuple[str, int]:
    match = _HOST.fullmatch(text)
    if match is None:
        raise ValueError(
            "a node cannot be read: expected host:port, comma-separated, with ':', '/', '?',"
            " '#', ',' and '@' percent-encoded in a password"
        )
    port = int(match["port"]) if match["port"] else default_port
    if not 0 < port <= _MAX_PORT:
        raise ValueError("a port is out of range: expected a whole number from 1 to 65535")
    return match["ipv6"] or match["name"], port


def _path(topology: str, path: str) -> tuple[str | None, int]:
    parts = [part for part in path.split("/") if part]
    if topology == "cluster":
        if parts and parts != ["0"]:
            raise ValueError("a Redis Cluster has only database 0: leave the path empty")
        return None, 0
    if not parts or len(parts) > 2 or _SERVICE.fullmatch(parts[0]) is None:
        raise ValueError(
            "the Sentinel service name is missing or invalid: expected .../service_name"
        )
    if len(parts) == 2 and not parts[1].isdigit():
        raise ValueError("the database after the service name is not a number")
    return parts[0], int(parts[1]) if len(parts) == 2 else 0
