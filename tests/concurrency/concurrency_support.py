"""Helpers for the concurrency guard tests: a hand-driven clock, envelope parsing, a recorder."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import anyio

from fusion_guard import ConcurrencyGuard
from fusion_guard._observer import Outcome, ShedReason


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def envelope_details(text: str) -> dict[str, str]:
    """The ``<detail>`` entries of an envelope, in order (the envelope must be well-formed)."""
    root = ET.fromstring(text)
    return {d.attrib["key"]: d.text or "" for d in root.iter("detail")}


class RecordingObserver:
    """A ToolObserver that remembers what it was told."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def admitted(self, queue_wait: float) -> None:
        self.events.append(("admitted", queue_wait))

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        self.events.append(("shed", reason, active, queued, retry_after))

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        self.events.append(("rate_limited", scope, retry_after))

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        self.events.append(("finished", outcome, duration))

    def backend_error(self, backend: str, allowed: bool) -> None:
        self.events.append(("backend_error", backend, allowed))


async def serve_order(
    guard: ConcurrencyGuard, clock: FakeClock, age: float, callers: int = 4
) -> list[int]:
    """Queue callers 0, 1, ... behind a held slot, let them age, release; the order served."""
    order: list[int] = []
    holder = guard.acquire_nowait()

    async def caller(i: int) -> None:
        async with guard.slot():
            order.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(callers):
            tg.start_soon(caller, i)
            await anyio.wait_all_tasks_blocked()
        clock.advance(age)
        holder.release()
    return order
