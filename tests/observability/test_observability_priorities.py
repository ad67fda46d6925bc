"""Observability by priority: real calls at mixed priorities, counted and logged by priority.

One scenario, through a bare ``ConcurrencyGuard`` and through the ``Guard`` (its default metrics
and log events, and an application's own observer): one slot, a queue of two. A ``background``
call holds the slot; a ``background`` and an ``interactive`` call wait; a ``critical`` arrival
finds the queue full and takes the waiting ``background`` call's place (that one is refused
``queue_full``); a ``sheddable`` arrival is refused at once. Released, the slot goes to the
``critical`` call, then to the ``interactive`` one. Every step waits for the tasks to block, not
for time to pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from observability_support import panels, require_binary, samples, value
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from structlog.testing import capture_logs

from fusion_guard import (
    ConcurrencyGuard,
    Guard,
    LogEventObserver,
    Outcome,
    Priority,
    PrometheusObserver,
    ServerBusy,
    ShedReason,
    ToolObserver,
)
from fusion_guard.testing import FakeClock

pytestmark = pytest.mark.anyio

Enter = Callable[[str], AbstractAsyncContextManager[Any]]

#: What the scenario admits and refuses, by priority.
ADMITTED = {"critical": 1, "interactive": 1, "background": 1, "sheddable": 0}
SHED = {"critical": 0, "interactive": 0, "background": 1, "sheddable": 1}


async def scenario(enter: Enter, queued: Callable[[], int]) -> list[str]:
    """Run the scenario (``enter(priority)``: one call's admission); the priorities of the
    refused calls, in the order they were refused."""
    refused: list[str] = []
    release = anyio.Event()

    async def call(priority: str, hold: bool = False) -> None:
        try:
            async with enter(priority):
                if hold:
                    await release.wait()
        except ServerBusy:
            refused.append(priority)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(call, "background", True)
        await anyio.wait_all_tasks_blocked()
        for priority in ("background", "interactive"):
            tasks.start_soon(call, priority)
            await anyio.wait_all_tasks_blocked()
        assert queued() == 2
        tasks.start_soon(call, "critical")  # takes the waiting background call's place
        await anyio.wait_all_tasks_blocked()
        await call("sheddable")  # the lowest priority, at a full queue: refused at once
        assert queued() == 2
        release.set()
    return refused


def queued_at(guard: Guard, tool: str) -> Callable[[], int]:
    """The calls waiting for ``tool``'s slots, read live."""
    slots = guard.concurrency(tool)
    assert slots is not None
    return lambda: slots.queued


def by_priority(registry: CollectorRegistry, tool: str) -> tuple[dict[str, float], ...]:
    """(admitted, shed ``queue_full``) per priority, as scraped."""
    found = samples(generate_latest(registry).decode())
    admitted = {
        p: value(found, "fusion_guard_queue_wait_seconds_count", tool=tool, priority=p)
        for p in ADMITTED
    }
    shed = {
        p: value(found, "fusion_guard_shed_total", tool=tool, reason="queue_full", priority=p)
        for p in SHED
    }
    return admitted, shed


async def test_a_concurrency_guard_counts_admitted_shed_and_waits_by_priority() -> None:
    registry = CollectorRegistry()
    bound = PrometheusObserver(registry).for_tool("index", max_active=1)
    guard = ConcurrencyGuard(
        max_active=1, max_queue=2, queue_timeout=60, name="index", observer=bound
    )
    bound.watch(guard)
    refused = await scenario(lambda p: guard.slot(priority=p), lambda: guard.queued)
    assert refused == ["background", "sheddable"]
    assert by_priority(registry, "index") == (ADMITTED, SHED)
    found = samples(generate_latest(registry).decode())
    # The calls that waited waited a while; the one that found the slot free did not.
    for priority in ("critical", "interactive"):
        wait = value(found, "fusion_guard_queue_wait_seconds_sum", tool="index", priority=priority)
        assert wait > 0.0
    assert (
        value(found, "fusion_guard_queue_wait_seconds_sum", tool="index", priority="background")
        == 0.0
    )
    # Metrics without a priority label still count every call once.
    assert value(found, "fusion_guard_calls_total", tool="index", outcome="ok") == 3
    assert value(found, "fusion_guard_calls_total", tool="index", outcome="shed") == 2
    assert value(found, "fusion_guard_inflight", tool="index") == 0


async def test_without_priorities_only_the_default_priority_is_shown() -> None:
    registry = CollectorRegistry()
    bound = PrometheusObserver(registry).for_tool("plain", max_active=1)
    guard = ConcurrencyGuard(max_active=1, max_queue=0, name="plain", observer=bound)
    async with guard.slot():
        with pytest.raises(ServerBusy):
            async with guard.slot():
                pass  # pragma: no cover
    found = samples(generate_latest(registry).decode())
    shown = {
        dict(labels).get("priority")
        for (name, labels) in found
        if name.startswith(("fusion_guard_shed_total", "fusion_guard_queue_wait_seconds"))
    }
    assert shown == {"interactive"}  # the same series as before, each labelled interactive
    assert by_priority_row(found, "plain", "interactive") == (1.0, 1.0)


def by_priority_row(found: Any, tool: str, priority: str) -> tuple[float, float]:
    return (
        value(found, "fusion_guard_queue_wait_seconds_count", tool=tool, priority=priority),
        value(found, "fusion_guard_shed_total", tool=tool, reason="queue_full", priority=priority),
    )


class Heard:
    """An application's observer whose tool observers tell priorities apart: what it heard, as
    (the priority of the observer that heard it, None for the tool's own; the event)."""

    def __init__(self) -> None:
        self.heard: list[tuple[str | None, str]] = []

    def for_tool(self, tool: str, *, max_active: int | None) -> ToolObserver:
        return HeardTool(self.heard, None)


class HeardTool:
    def __init__(self, heard: list[tuple[str | None, str]], priority: str | None) -> None:
        self.heard, self.priority = heard, priority

    def for_priority(self, priority: Priority) -> HeardTool:
        return HeardTool(self.heard, priority.value)

    def admitted(self, queue_wait: float) -> None:
        self.heard.append((self.priority, "admitted"))

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        self.heard.append((self.priority, f"shed {reason}"))

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        pass  # pragma: no cover

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        self.heard.append((self.priority, outcome))

    def backend_error(self, backend: str, allowed: bool) -> None:
        pass  # pragma: no cover


class PlainTool:
    """A ``ToolObserver`` written before priorities: no ``for_priority``."""

    def __init__(self) -> None:
        self.heard: list[str] = []

    def admitted(self, queue_wait: float) -> None:
        self.heard.append("admitted")

    def shed(self, reason: ShedReason, active: int, queued: int, retry_after: float) -> None:
        self.heard.append(f"shed {reason}")

    def rate_limited(self, scope: str, retry_after: float, key: str | None = None) -> None:
        pass  # pragma: no cover

    def finished(self, outcome: Outcome, duration: float | None) -> None:
        self.heard.append(outcome)

    def backend_error(self, backend: str, allowed: bool) -> None:
        pass  # pragma: no cover


class Plain:
    def __init__(self) -> None:
        self.tool = PlainTool()

    def for_tool(self, tool: str, *, max_active: int | None) -> PlainTool:
        return self.tool


@pytest.fixture
def structlog_configured() -> Iterator[None]:
    """structlog configured for one test only (see ``test_observability_events``)."""
    try:
        yield
    finally:
        structlog.reset_defaults()


async def test_the_guards_metrics_logs_and_own_observers_hear_each_call_at_its_priority(
    structlog_configured: None,
) -> None:
    registry = CollectorRegistry()
    heard = Heard()
    guard = Guard(registry=registry, max_active=1, max_queue=2, queue_timeout=60, observer=heard)
    with capture_logs() as logged:
        refused = await scenario(
            lambda p: guard.admit("index", priority=p), queued_at(guard, "index")
        )
    assert refused == ["background", "sheddable"]
    assert by_priority(registry, "index") == (ADMITTED, SHED)
    # The log events say the refused call's priority, each priority sampled apart.
    sheds = [(e["priority"], e["reason"]) for e in logged if e["event"] == "call_shed"]
    assert sheds == [("background", "queue_full"), ("sheddable", "queue_full")]
    # An observer with for_priority hears admissions and refusals at their priority, the ends
    # as the tool's; its interactive calls are the tool's own (no priority of their own).
    assert sorted(heard.heard, key=str) == sorted(
        [
            ("background", "admitted"),
            ("background", "shed queue_full"),
            ("sheddable", "shed queue_full"),
            ("critical", "admitted"),
            (None, "admitted"),
            (None, "ok"),
            (None, "ok"),
            (None, "ok"),
        ],
        key=str,
    )
    # One written before priorities hears the same calls, as it always did.
    tool = Plain()
    own = Guard(
        registry=CollectorRegistry(), max_active=1, max_queue=2, queue_timeout=60, observer=tool
    )
    refused = await scenario(lambda p: own.admit("index", priority=p), queued_at(own, "index"))
    assert refused == ["background", "sheddable"]
    assert sorted(tool.tool.heard) == sorted(
        ["admitted"] * 3 + ["shed queue_full"] * 2 + ["ok"] * 3
    )


async def test_a_tool_without_a_concurrency_limit_counts_its_calls_by_priority() -> None:
    registry = CollectorRegistry()
    guard = Guard(registry=registry, max_active=None)
    for priority in ("background", "critical", None):
        async with guard.admit("free", priority=priority):
            pass
    found = samples(generate_latest(registry).decode())
    for priority in ("background", "critical", "interactive"):
        count = value(
            found, "fusion_guard_queue_wait_seconds_count", tool="free", priority=priority
        )
        assert count == 1, priority


@pytest.mark.parametrize("multiprocess", [False, True], ids=["lean", "client-objects"])
def test_each_prioritys_children_are_bound_once_not_per_call(
    multiprocess: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = CollectorRegistry()
    bound = PrometheusObserver(registry, multiprocess=multiprocess).for_tool("t", max_active=1)
    background = bound.for_priority(Priority.BACKGROUND)
    assert bound.for_priority(Priority.BACKGROUND) is background

    def no_lookup(*args: object, **kwargs: object) -> None:
        raise AssertionError(".labels() called on the hot path")

    monkeypatch.setattr(MetricWrapperBase, "labels", no_lookup)
    background.admitted(0.5)
    background.shed("queue_full", 1, 0, 0.1)
    bound.finished("ok", 0.01)  # a call's end is the tool's
    monkeypatch.undo()
    found = samples(generate_latest(registry).decode())
    assert by_priority_row(found, "t", "background") == (1.0, 1.0)
    assert by_priority_row(found, "t", "interactive") == (0.0, 0.0)
    assert value(found, "fusion_guard_calls_total", tool="t", outcome="shed") == 1
    assert value(found, "fusion_guard_calls_total", tool="t", outcome="ok") == 1


def test_refusals_are_sampled_per_priority(structlog_configured: None) -> None:
    # A storm of background refusals does not hide the first interactive one, and its summary
    # says whose refusals it counted.
    clock = FakeClock()
    bound = LogEventObserver(interval=1.0, clock=clock).for_tool("a", max_active=1)
    background = bound.for_priority(Priority.BACKGROUND)
    with capture_logs() as logged:
        for _ in range(3):
            background.shed("queue_full", 1, 4, 0.1)
        bound.shed("queue_full", 1, 4, 0.1)
        clock.now = 1.5
        bound.finished("ok", 0.01)  # settles the summaries that are due
    assert [(e["event"], e["priority"], e.get("count")) for e in logged] == [
        ("call_shed", "background", None),
        ("call_shed", "interactive", None),
        ("call_events_suppressed", "background", 2),
    ]


async def test_the_dashboards_shed_ratio_by_priority_reads_each_prioritys_own(
    tmp_path: Path,
) -> None:
    # The scenario's calls as Prometheus series (each sample growing by its value every minute,
    # so rates keep its proportions), and the dashboard's query evaluated by promtool.
    registry = CollectorRegistry()
    bound = PrometheusObserver(registry).for_tool("index", max_active=1)
    guard = ConcurrencyGuard(
        max_active=1, max_queue=2, queue_timeout=60, name="index", observer=bound
    )
    await scenario(lambda p: guard.slot(priority=p), lambda: guard.queued)
    series = [
        {
            "series": name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels)) + "}",
            "values": f"0+{count:g}x10",
        }
        for (name, labels), count in samples(generate_latest(registry).decode()).items()
        if name in ("fusion_guard_shed_total", "fusion_guard_queue_wait_seconds_count")
    ]
    (panel,) = [p for p in panels() if p["title"] == "Shed ratio by priority"]
    query = panel["targets"][0]["expr"].replace("$tool", ".*").replace("$__rate_interval", "5m")
    ratio = {"critical": 0, "interactive": 0, "background": 0.5, "sheddable": 1}
    expected = [
        {"labels": f'{{priority="{p}", tool="index"}}', "value": v} for p, v in ratio.items()
    ]
    case = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [{"expr": query, "eval_time": "10m", "exp_samples": expected}],
    }
    (tmp_path / "ratio.test.yml").write_text(json.dumps({"tests": [case]}))
    done = await anyio.run_process(
        [require_binary("promtool"), "test", "rules", "ratio.test.yml"], cwd=tmp_path, check=False
    )
    assert done.returncode == 0, (done.stdout + done.stderr).decode()
