"""Fixtures of the rate-limit tests."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from fusion_guard import MemoryBackend
from fusion_guard.backends import GcraRequest, GcraResult
from fusion_guard.testing import FakeClock


class AsyncOnlyBackend:
    """A backend that decides only asynchronously (as the Redis one does), counting its calls;
    the state lives in a MemoryBackend on a fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.inner = MemoryBackend(clock)
        self.calls = 0

    async def decide(self, requests: Sequence[GcraRequest]) -> GcraResult:
        self.calls += 1
        return await self.inner.decide(requests)


@pytest.fixture
def async_only_backend() -> AsyncOnlyBackend:
    return AsyncOnlyBackend(FakeClock())
