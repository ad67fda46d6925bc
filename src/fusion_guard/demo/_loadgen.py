"""An open-loop Poisson load generator.

Arrivals are drawn in advance and each call is started at its *intended* send time whether or not
earlier calls have answered (no coordinated omission); latency is measured from that intended
time, and a client gives up (cancels) ``client_timeout`` after it, as MCP clients do.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import anyio

__all__ = ["CallRecord", "Outcome", "poisson_arrivals", "run_open_loop"]

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


async def run_open_loop(
    arrivals: Sequence[float],
    call: Callable[[], Awaitable[Outcome]],
    *,
    client_timeout: float,
    records: list[CallRecord],
) -> None:
    """Start ``call`` at each arrival time and append one record per call to ``records``."""

    async def one(intended: float) -> None:
        sent = anyio.current_time()
        with anyio.CancelScope(deadline=intended + client_timeout) as scope:
            outcome = await call()
        latency = anyio.current_time() - intended
        records.append(
            CallRecord(intended, sent, latency, "timeout" if scope.cancelled_caught else outcome)
        )

    async with anyio.create_task_group() as tg:
        for intended in arrivals:
            if intended > anyio.current_time():
                await anyio.sleep_until(intended)
            tg.start_soon(one, intended)
