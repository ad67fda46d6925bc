"""The Redis backend's tests run on asyncio only: redis-py's client is asyncio-only (documented;
the trio error has its own test). The server fixtures are the suite's (``tests/conftest.py``)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
