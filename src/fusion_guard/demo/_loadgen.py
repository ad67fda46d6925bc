"""An open-loop Poisson load generator.

Arrivals are drawn in advance and each call is started at its *intended* send time whether or not
earlier calls have answered (no coordinated omission); latency is measured from that intended
time, and a client gives up (cancels) ``client_timeout`` after it, as MCP clients do.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import anyio

__all__ = [
    "CallRecord",
    "Outcome",
    "drive_calls",
    "drive_tool",
    "percentile",
    "poisson_arrivals",
    "run_open_loop",
]

Outcome = Literal["ok", "shed", "rate_limited", "timeout", "error"]


@dataclass(frozen=True, slots=True)
class CallRecord:
    intended: float
    """When the call was meant to be sent (event-loop clock)."""
    sent: float
    """When the call was actually sent: later than ``intended`` when the event loop lags."""
    latency: float
    """From the intended send time to the answer (or to the client giving up)."""
    outcome: Outcome


def poisson_arrivals(rate: float, start: float, duration: float, rng: random.Random) -> list[float]:
    """Send times of a Poisson process of ``rate`` calls/s in ``[start, start+duration)``."""
    times: list[float] = []
    t = start + rng.expovariate(rate)
    end = start + duration
    while t < end:
        times.append(t)
        t += rng.expovariate(rate)
    return times


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` by the nearest rank (None when there are none)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def run_open_loop(
    arrivals: Sequence[float],
    call: Callable[[int], Awaitable[Outcome]],
    *,
    client_timeout: float,
    records: list[CallRecord],
) -> None:
    """Start ``call(index)`` at each arrival time (``index``: the arrival's place in
    ``arrivals``) and append one record per call to ``records``."""

    async def one(index: int, intended: float) -> None:
        sent = anyio.current_time()
        with anyio.CancelScope(deadline=intended + client_timeout) as scope:
            outcome = await call(index)
        latency = anyio.current_time() - intended
        records.append(
            CallRecord(intended, sent, latency, "timeout" if scope.cancelled_caught else outcome)
        )

    async with anyio.create_task_group() as tg:
        for index, intended in enumerate(arrivals):
            if intended > anyio.current_time():
                await anyio.sleep_until(intended)
            tg.start_soon(one, index, intended)


_Tool = TypeVar("_Tool")


async def drive_tool(
    arrivals: Sequence[float],
    policy: Callable[[_Tool], Awaitable[Outcome]],
    tool: _Tool,
    *,
    client_timeout: float,
    records: list[CallRecord],
) -> None:
    """``run_open_loop`` of calls to ``tool`` through ``policy``: how the demos drive each
    policy with the same arrivals."""
    await drive_calls(
        arrivals, policy, lambda _: tool, client_timeout=client_timeout, records=records
    )


async def drive_calls(
    arrivals: Sequence[float],
    policy: Callable[[_Tool], Awaitable[Outcome]],
    tool_for: Callable[[int], _Tool],
    *,
    client_timeout: float,
    records: list[CallRecord],
) -> None:
    """``run_open_loop`` of calls through ``policy``, each to ``tool_for(index)`` (``index``:
    its arrival's): a demo that gives every call its own work gives it the same work under
    every policy."""

    async def call(index: int) -> Outcome:
        return await policy(tool_for(index))

    await run_open_loop(arrivals, call, client_timeout=client_timeout, records=records)
