"""Fixtures of the Redis backend's tests: a real ``redis-server`` on a free loopback port.

Skips with a reason when the binary is missing, but fails under ``CI=true`` (CI installs it).
The server is started once per session; ``redis_url`` flushes it before each test, and tests
that stop it (outage tests) start it again before they end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis_testserver import RedisServer, redis_server_or_skip


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = redis_server_or_skip(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The URL of an empty, running server."""
    if not redis_server.running:
        redis_server.start()
    with redis_server.client() as client:
        client.flushall()
    return redis_server.url


@pytest.fixture
def anyio_backend() -> str:
    # redis-py's client is asyncio-only (documented); the trio error has its own test.
    return "asyncio"
