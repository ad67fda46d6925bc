"""Fixtures for the concurrency guard tests."""

from __future__ import annotations

import pytest

from fusion_guard.testing import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)  # well past the instants a fresh guard starts from
