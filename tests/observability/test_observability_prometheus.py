"""End to end against a real Prometheus: a Guard driven through admitted, shed, rate-limited,
timed-out, failing and cancelled calls is scraped through ``serve_metrics``; every PromQL
expression of the dashboard and of the alert rules must parse and return data for the tool, and
the counters must equal what the clients saw, call for call.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from observability_support import Prometheus, alert_rules, dashboard_exprs
from prometheus_client import CollectorRegistry

from fusion_guard import BackendError, Guard, ToolResponse, parse_tool_error, tool_error
from fusion_guard.backends._base import GcraRequest, GcraResult

pytestmark = pytest.mark.anyio

HANDLER_TIMEOUT = 0.5
QUEUE_TIMEOUT = 0.1


class RedisOutageBackend:
    """A shared rate-limit backend that is down, with the fail-open policy."""

    failure_policy = "open"

    async def decide(self, requests: Sequence[GcraRequest]) -> GcraResult:
        raise BackendError("redis unreachable")


class Clients:
    """What the callers saw: outcomes and shed reasons, counted from the envelopes."""

    def __init__(self, guard: Guard, tool: str) -> None:
        self.guard = guard
        self.tool = tool
        self.outcomes: Counter[str] = Counter()
        self.shed_reasons: Counter[str] = Counter()

    async def call(self, seconds: float = 0.0, *, answer: str = "ok") -> None:
        response = await self.guard.call(self.tool, handler, seconds, answer)
        self.outcomes[self.outcome_of(response)] += 1

    def outcome_of(self, response: ToolResponse) -> str:
        info = parse_tool_error(response.text)
        if info is None:
            return "ok"
        codes = {
            "SERVER_BUSY": "shed",
            "RATE_LIMITED": "rate_limited",
            "TIMEOUT": "timeout",
            "INTERNAL_ERROR": "internal_error",
        }
        if info.code == "SERVER_BUSY":
            self.shed_reasons[str(info.details["reason"])] += 1
        return codes.get(info.code, "error")

    async def concurrently(self, count: int, seconds: float) -> None:
        async with anyio.create_task_group() as group:
            for _ in range(count):
                group.start_soon(self.call, seconds)

    async def cancelled_call(self) -> None:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(self.call, 5.0)
                await anyio.wait_all_tasks_blocked()
                scope.cancel()
        assert scope.cancelled_caught
        self.outcomes["cancelled"] += 1


async def handler(seconds: float, answer: str) -> object:
    if seconds:
        await anyio.sleep(seconds)
    if answer == "raise":
        raise RuntimeError("the database is down")
    if answer == "error":
        return tool_error("NOT_FOUND", "No such invoice")
    return answer


async def drive(clients: Clients, prometheus: Prometheus, backend_guard: Guard) -> None:
    """Calls of every kind, spread over several scrapes so that rates see them happen."""
    await clients.call()
    await backend_guard.call(f"{clients.tool}_backend", handler, 0.0, "ok")
    await wait_for_series(prometheus, clients.tool)
    await clients.call(5.0)  # past its deadline
    for _ in range(5):
        await clients.call()
    for answer in ("error", "error", "raise", "raise"):
        await clients.call(answer=answer)
    await clients.concurrently(3, 0.05)  # one waits in the queue, then runs
    await clients.concurrently(12, 0.3)  # 2 run, 2 queue and time out, the rest find it full
    await clients.cancelled_call()
    await anyio.sleep(1.1)  # let the token bucket fill up again, then burst past it
    for _ in range(70):
        await clients.call()
    for _ in range(3):
        await backend_guard.call(f"{clients.tool}_backend", handler, 0.0, "ok")


async def wait_for_series(prometheus: Prometheus, tool: str) -> None:
    expr = f'fusion_guard_calls_total{{tool="{tool}"}}'
    assert await anyio.to_thread.run_sync(prometheus.poll, expr, bool), "never scraped"


def prepared(expr: str, tool: str) -> str:
    return expr.replace("$tool", tool).replace("$__rate_interval", "1m")


def as_bool(expr: str) -> str:
    """The alert's condition as 0/1 per series (``> bool``): data whether it fires or not."""
    out, depth, quoted, i = [], 0, False, 0
    while i < len(expr):
        char = expr[i]
        if char == '"':
            quoted = not quoted
        elif not quoted and char in "{([":
            depth += char == "{"
        elif not quoted and char in "})]":
            depth -= char == "}"
        operator = re.match(r"(==|!=|>=|<=|>|<)\s", expr[i:])
        if operator and not quoted and depth == 0:
            out.append(f"{operator.group(1)} bool ")
            i += operator.end()
            continue
        out.append(char)
        i += 1
    return "".join(out)


def finite(result: list[dict[str, Any]]) -> bool:
    return any(not math.isnan(float(series["value"][1])) for series in result)


def by(result: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {series["metric"][label]: float(series["value"][1]) for series in result}


# A real Prometheus on its own clock: the point is the queries, not the event loop; one loop.
@pytest.mark.slow
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_every_dashboard_and_alert_query_returns_data_for_the_tool(
    anyio_backend: str, prometheus: Prometheus, metrics_registry: CollectorRegistry
) -> None:
    tool = f"e2e_{anyio_backend}"
    guard = Guard(
        registry=metrics_registry,
        max_active=2,
        max_queue=2,
        queue_timeout=QUEUE_TIMEOUT,
        timeout=HANDLER_TIMEOUT,
        rate=100,
        burst=50,
    )
    backend_guard = Guard(registry=metrics_registry, rate=1, rate_backend=RedisOutageBackend())
    clients = Clients(guard, tool)
    await drive(clients, prometheus, backend_guard)
    seen = clients.outcomes
    assert set(seen) == {
        "ok", "error", "internal_error", "timeout", "shed", "rate_limited", "cancelled",
    }, seen  # fmt: skip
    assert set(clients.shed_reasons) == {"queue_full", "queue_timeout"}, clients.shed_reasons

    def settled(result: list[dict[str, Any]]) -> bool:
        return {o: n for o, n in by(result, "outcome").items() if n} == dict(seen)

    calls = f'fusion_guard_calls_total{{tool="{tool}"}}'
    result = await anyio.to_thread.run_sync(prometheus.poll, calls, settled)
    assert {o: n for o, n in by(result, "outcome").items() if n} == dict(seen)
    sheds = f'fusion_guard_shed_total{{tool="{tool}"}}'
    result = await anyio.to_thread.run_sync(prometheus.query, sheds)
    assert {r: n for r, n in by(result, "reason").items() if n} == dict(clients.shed_reasons)

    admitted = sum(n for o, n in seen.items() if o not in ("shed", "rate_limited"))
    for histogram, expected in (
        ("queue_wait_seconds", {"": admitted}),
        ("call_duration_seconds", {"": admitted}),
        (
            "retry_after_seconds",
            {"SERVER_BUSY": seen["shed"], "RATE_LIMITED": seen["rate_limited"]},
        ),
    ):
        query = f'fusion_guard_{histogram}_count{{tool="{tool}"}}'
        counts = {
            s["metric"].get("code", ""): float(s["value"][1])
            for s in await anyio.to_thread.run_sync(prometheus.query, query)
        }
        assert counts == expected, histogram
    for expr in dashboard_exprs():
        query = prepared(expr, tool)
        result = await anyio.to_thread.run_sync(prometheus.poll, query, finite)
        assert finite(result), f"no data for the dashboard query {query}"
    for rule in alert_rules():
        query = as_bool(rule["expr"])
        result = await anyio.to_thread.run_sync(prometheus.poll, query, finite)
        label = "backend" if "backend_errors" in query else "tool"
        wanted = "redis" if label == "backend" else tool
        assert wanted in by(result, label), f"{rule['alert']}: no data for {wanted} in {query}"


def test_as_bool_turns_every_top_level_comparison_into_a_bool_one() -> None:
    expr = 'sum(rate(x{reason="a>b"}[5m])) / sum(y) > 0.05 and z < 2 * w'
    assert as_bool(expr) == 'sum(rate(x{reason="a>b"}[5m])) / sum(y) > bool 0.05 and z < bool 2 * w'
