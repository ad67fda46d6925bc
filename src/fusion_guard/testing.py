"""Helpers for testing code that uses fusion_guard (not imported by ``import fusion_guard``)."""

from __future__ import annotations

from ._clock import FakeClock

__all__ = ["FakeClock"]
