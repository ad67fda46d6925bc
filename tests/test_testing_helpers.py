"""fusion_guard.testing: the doubles users test their own servers with work against a real
Guard."""

from __future__ import annotations

import pytest

from fusion_guard import ConcurrencyGuard, ErrorCode, Guard
from fusion_guard.testing import FailingBackend, FakeClock, RecordingObserver, ToolRecorder

pytestmark = pytest.mark.anyio


async def _ok() -> str:
    return "ok"


async def test_the_recording_observer_hears_every_decision() -> None:
    observer = RecordingObserver()
    guard = Guard(metrics=False, max_active=10, rate=1, burst=1, observer=observer)
    assert (await guard.call("t", _ok)).text == "ok"
    refused = await guard.call("t", _ok)
    assert refused.code == ErrorCode.RATE_LIMITED
    assert observer.ends("t") == ["ok", "rate_limited"]
    assert observer.events["t"][0] == ("admitted", 0.0)
    assert observer.bound == [("t", 10)]


async def test_the_failing_backend_exercises_the_failure_policy() -> None:
    backend = FailingBackend()
    closed = Guard(metrics=False, rate=5, rate_backend=backend, redis_failure_policy="closed")
    busy = await closed.call("t", _ok)
    assert busy.code == ErrorCode.SERVER_BUSY
    assert "backend_unavailable" in busy.text
    opened = Guard(metrics=False, rate=5, rate_backend=backend, redis_failure_policy="open")
    assert (await opened.call("t", _ok)).text == "ok"
    assert backend.calls == 2


async def test_a_tool_recorder_and_a_fake_clock_drive_a_bare_guard() -> None:
    clock, recorder = FakeClock(100.0), ToolRecorder()
    guard = ConcurrencyGuard(1, max_queue=0, observer=recorder, clock=clock)
    async with guard.slot():
        clock.advance(0.5)
    assert recorder.events == [("admitted", 0.0), ("finished", "ok", 0.5)]
