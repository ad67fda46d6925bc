"""Helpers for the concurrency guard tests: envelope parsing and serving order."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import anyio
import anyio.abc

from fusion_guard import ConcurrencyGuard
from fusion_guard.testing import FakeClock


def envelope_details(text: str) -> dict[str, str]:
    """The ``<detail>`` entries of an envelope, in order (the envelope must be well-formed)."""
    root = ET.fromstring(text)
    return {d.attrib["key"]: d.text or "" for d in root.iter("detail")}


async def fill(guard: ConcurrencyGuard, tg: anyio.abc.TaskGroup, queued: int) -> None:
    """Take every slot of ``guard`` and queue ``queued`` callers behind them (in ``tg``)."""
    for _ in range(guard.limit):
        guard.acquire_nowait()
    for _ in range(queued):
        tg.start_soon(guard.acquire)
    await anyio.wait_all_tasks_blocked()


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


@dataclass
class Call:
    """One call of a property test's program: ``done`` ends its body, ``fail`` makes it raise,
    ``scope`` cancels it; ``entered`` and ``started`` (the guard's own stamp) once admitted."""

    index: int
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    fail: bool = False
    entered: bool = False
    started: float = 0.0
