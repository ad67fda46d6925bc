"""Fixtures for tests/integrations (helpers live in integrations_support.py)."""

from __future__ import annotations

import pytest
from integrations_support import Harness


@pytest.fixture(params=["mcpserver", "lowlevel", "fastmcp"])
def harness(request: pytest.FixtureRequest, anyio_backend: str) -> Harness:
    return Harness(str(request.param), anyio_backend)


@pytest.fixture(params=["mcpserver", "fastmcp"])
def validating(request: pytest.FixtureRequest, anyio_backend: str) -> Harness:
    """The SDKs that validate tool arguments themselves (the low-level Server does not)."""
    return Harness(str(request.param), anyio_backend)
