"""Helpers for testing code that uses fusion_guard (not imported by ``import fusion_guard``):
a fake clock, an observer that records what the guard reports, a rate backend that fails like an
unreachable Redis, and a throwaway Redis server for integration tests."""

from __future__ import annotations

from ._clock import FakeClock
from ._test_doubles import Event, FailingBackend, RecordingObserver, ToolRecorder
from .backends._redis_server import RedisServer

__all__ = [
    "Event",
    "FailingBackend",
    "FakeClock",
    "RecordingObserver",
    "RedisServer",
    "ToolRecorder",
]
