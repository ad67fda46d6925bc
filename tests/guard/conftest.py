"""Fixtures of the guard tests."""

from __future__ import annotations

import pytest

from fusion_guard.testing import RecordingObserver


@pytest.fixture
def observer() -> RecordingObserver:
    return RecordingObserver()
