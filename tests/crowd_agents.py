"""A crowd of agents at one rate-limited tool, each retrying at exactly its ``retry_after``.

Every agent calls the tool through a :class:`~fusion_guard.Guard` at the same instant; a refused
agent reads ``retry_after`` from the RATE_LIMITED envelope (as a model would, with
``parse_tool_error``), waits exactly that long and calls again, until admitted. Used by the crowd
tests in one process (memory backend, asyncio and trio) and, run as a script, as one process of a
fleet sharing a Redis backend:

    python crowd_agents.py URL AGENTS RATE BURST

The script connects (its first decision, on a tool of its own, also loads the Lua script; one
connection per agent is opened ahead), prints
``ready``, reads the start instant from stdin (a ``time.monotonic()`` instant: the clock is
system-wide on Linux, so every process starts its agents at once), runs its agents, and prints
their records as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass

import anyio

from fusion_guard import (
    Guard,
    RedisRateLimitBackend,
    Rejected,
    ToolResponse,
    parse_tool_error,
    success,
)
from fusion_guard.backends import RateBackend

Clock = Callable[[], float]

TOOL = "search"


@dataclass(frozen=True)
class Agent:
    """One agent's story: refusals before its call ran, whether its first retry (if any) was
    admitted, when its call ran and when it first called (seconds after the start), its first
    ``retry_after``."""

    refusals: int
    first_retry_admitted: bool
    done: float
    first_advice: float | None
    first_call: float


@dataclass(frozen=True)
class CrowdFigures:
    """What the issue's target measures, for a crowd at ``rate`` calls/s with bursts of
    ``burst``."""

    agents: int
    refused_first: int  # agents refused on their first call
    first_retries_admitted: int
    distinct_first_advice: int  # distinct retry_after values told to the first refusals
    refusals: int
    volley: float  # from the first agent's first call to the last agent's (seconds)
    first_done: float  # the burst: the first call ran (seconds after the start)
    last_done: float
    ideal: float  # how long after the burst the last call runs if the budget is used perfectly

    @property
    def first_retry_rate(self) -> float:
        return self.first_retries_admitted / self.refused_first if self.refused_first else 1.0

    @property
    def refusals_per_call(self) -> float:
        return self.refusals / self.agents

    @property
    def last_vs_ideal(self) -> float:
        """The last call's time after the burst, over the ideal (a slow start of the
        processes, before the first decision, is not the advice's doing)."""
        return (self.last_done - self.first_done) / self.ideal

    def __str__(self) -> str:
        return (
            f"{self.agents} agents (first calls over {1000 * self.volley:.1f} ms): first retries"
            f" admitted {self.first_retries_admitted}/"
            f"{self.refused_first} ({self.first_retry_rate:.0%}), {self.distinct_first_advice}"
            f" distinct first retry_after, {self.refusals_per_call:.2f} refusals per call, last"
            f" call {self.last_done - self.first_done:.3f} s after the burst ="
            f" {self.last_vs_ideal:.2f}x the ideal {self.ideal:.3f} s"
        )


def crowd_guard(rate: float, burst: int, backend: RateBackend | None = None) -> Guard:
    """A guard limiting the tool to ``rate`` calls per second, bursts of ``burst``, and nothing
    else (no slots, no deadline: only the rate limit is under test). A Redis failure sheds the
    call (``redis_failure_policy="closed"``), so it cannot pass unnoticed as an admission."""
    redis = {} if backend is None else {"redis_failure_policy": "closed"}
    return Guard(
        max_active=None,
        timeout=None,
        rate=rate,
        burst=burst,
        metrics=False,
        rate_backend=backend,
        **redis,
    )


async def _handler() -> str:
    return "ok"


async def _call(guard: Guard, client: str | None) -> ToolResponse:
    """One call of the tool as ``client`` (None: anonymous)."""
    try:
        async with guard.admit(TOOL, client=client):
            return success("ok")
    except Rejected as exc:
        return exc.response


async def agent(
    guard: Guard, start: float, client: str | None = None, clock: Clock = time.monotonic
) -> Agent:
    refusals = 0
    first_advice: float | None = None
    first_call = clock() - start
    while True:
        response = await _call(guard, client)
        if not response.is_error:
            done = clock() - start
            return Agent(refusals, refusals <= 1, done, first_advice, first_call)
        assert response.code == "RATE_LIMITED", response.text
        info = parse_tool_error(response.text)
        assert info is not None
        assert info.retry_after is not None
        if first_advice is None:
            first_advice = info.retry_after
        refusals += 1
        await anyio.sleep(info.retry_after)


async def run_agents(
    guard: Guard,
    count: int,
    start: float,
    *,
    known: bool = True,
    name: str = "agent",
    clock: Clock = time.monotonic,
) -> list[Agent]:
    """``count`` agents calling at once (at ``start``, an instant of ``clock``), each under a
    client key of its own (``name``-n) when ``known``, as agents over MCP are told apart by
    their credentials; else all anonymous."""
    agents: list[Agent] = []

    async def one(client: str | None) -> None:
        agents.append(await agent(guard, start, client, clock))

    await anyio.sleep(max(0.0, start - clock()))
    async with anyio.create_task_group() as group:
        for n in range(count):
            group.start_soon(one, f"{name}-{n}" if known else None)
    return agents


def figures(agents: Sequence[Agent], rate: float, burst: int) -> CrowdFigures:
    refused = [a for a in agents if a.refusals]
    return CrowdFigures(
        agents=len(agents),
        refused_first=len(refused),
        first_retries_admitted=sum(a.first_retry_admitted for a in refused),
        distinct_first_advice=len({a.first_advice for a in refused}),
        refusals=sum(a.refusals for a in agents),
        volley=max(a.first_call for a in agents) - min(a.first_call for a in agents),
        first_done=min(a.done for a in agents),
        last_done=max(a.done for a in agents),
        ideal=max(1, len(agents) - burst) / rate,
    )


def from_json(line: str) -> list[Agent]:
    return [Agent(*fields) for fields in json.loads(line)]


async def _process(url: str, count: int, rate: float, burst: int) -> None:
    backend = RedisRateLimitBackend(url, timeout=1.0)  # generous: shared, busy machine
    try:
        guard = crowd_guard(rate, burst, backend)
        assert not (await guard.call("warm-up", _handler)).is_error
        # One pooled connection per agent, opened now: not in the crowd's first round trips.
        await asyncio.gather(*(backend.connection.client.ping() for _ in range(count)))
        print("ready", flush=True)
        start = float(await asyncio.to_thread(sys.stdin.readline))
        agents = await run_agents(guard, count, start, name=f"agent-{os.getpid()}")
    finally:
        await backend.aclose()
    print(json.dumps([astuple(a) for a in agents]), flush=True)


def main(argv: list[str]) -> None:
    url, count, rate, burst = argv
    asyncio.run(_process(url, int(count), float(rate), int(burst)))


if __name__ == "__main__":
    main(sys.argv[1:])
