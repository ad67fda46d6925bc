"""Helpers for testing code that uses fusion_guard (not imported by ``import fusion_guard``)."""

from __future__ import annotations

from ._clock import FakeClock
from .backends._redis_server import RedisServer

__all__ = ["FakeClock", "RedisServer"]
