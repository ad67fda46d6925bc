"""Fixtures of the Redis Cluster and Sentinel tests: real ``redis-server`` processes on loopback
(see ``topology.py``), skipped with a reason when redis-server is missing, a failure under
``CI=true``. The healthy topologies are shared by the module's tests; a failover test gets its
own, since it kills a primary. Everything runs on asyncio (redis-py is asyncio-only).
``topology`` (which needs redis-py) is imported by the fixtures, so a run without the redis
extra skips these tests instead of failing to load this file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from topology import ClusterSet, SentinelSet


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _started(topology: ClusterSet | SentinelSet) -> Iterator[Any]:
    try:
        topology.start()
        yield topology
    finally:
        topology.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSet]:
    from topology import ClusterSet, require_redis_server

    binary = require_redis_server()
    yield from _started(ClusterSet(binary, tmp_path_factory.mktemp("cluster")))


@pytest.fixture
def fresh_cluster(tmp_path: Path) -> Iterator[ClusterSet]:
    from topology import ClusterSet, require_redis_server

    yield from _started(ClusterSet(require_redis_server(), tmp_path))


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSet]:
    from topology import SentinelSet, require_redis_server

    binary = require_redis_server()
    yield from _started(SentinelSet(binary, tmp_path_factory.mktemp("sentinel")))


@pytest.fixture
def fresh_sentinel(tmp_path: Path) -> Iterator[SentinelSet]:
    from topology import SentinelSet, require_redis_server

    yield from _started(SentinelSet(require_redis_server(), tmp_path))
