"""The ``redis-server`` of the Redis tests: skipped when missing, a failure under ``CI=true``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fusion_guard.testing import RedisServer

__all__ = ["RedisServer", "redis_server_or_skip"]


def redis_server_or_skip(directory: Path) -> RedisServer:
    """A (stopped) server in ``directory``; skips the test when the binary is missing, but
    fails it under ``CI=true`` (CI installs redis-server)."""
    if RedisServer.find() is None:
        reason = "redis-server is not installed (apt-get install redis-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true requires it")
        pytest.skip(reason)
    return RedisServer(directory)
