"""Shared test configuration: every async test runs on asyncio and on trio; a real
``redis-server`` on a free loopback port for the tests that need one (started once per session,
on first use: skips with a reason when the binary is missing, fails under ``CI=true``)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator

import pytest

from fleet_runs import spawned
from redis_testserver import RedisServer, redis_server_or_skip


@pytest.fixture(
    params=[
        pytest.param("asyncio", id="asyncio"),
        pytest.param("trio", id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


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
    """The URL of an empty, running server (tests that stop it start it again before they
    end; a test that did not is made whole here)."""
    if not redis_server.running:
        redis_server.start()
    with redis_server.client() as client:
        client.flushall()
    return redis_server.url


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start fleet workers (``tests/redis/redis_fleet_worker.py``); killed at the end."""
    yield from spawned()
