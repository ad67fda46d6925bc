"""Fixtures of the guard tests."""

from __future__ import annotations

import pytest
from guard_recorder import RecordingObserver


@pytest.fixture
def observer() -> RecordingObserver:
    return RecordingObserver()
