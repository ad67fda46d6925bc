"""Fixtures for the concurrency guard tests."""

from __future__ import annotations

import pytest
from concurrency_support import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
