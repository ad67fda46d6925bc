"""The server's side of the client's attempt number (request ``_meta`` ``fusion-guard/attempt``):
read by both adapters whatever a client sends, counted per tool, and, when retries are most of
a refusing tool's arrivals, answered with advice that says so (``retry_now`` = ``false``)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from integrations_support import Harness, envelope, texts
from prometheus_client import CollectorRegistry

from fusion_guard import Guard
from fusion_guard._clock import FakeClock
from fusion_guard.integrations._common import (
    MAX_ATTEMPT,
    RETRY_STORM_ARRIVALS,
    RETRY_WINDOW,
    RetryWindows,
    admit_call,
    attempt_of,
)
from fusion_guard.wire._meta import ATTEMPT_META_KEY, META_KEY
from holding_gate import Gate

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("sent", "attempt"),
    [
        (2, 2),
        (MAX_ATTEMPT, MAX_ATTEMPT),
        (1, 1),
        (None, 1),
        (MAX_ATTEMPT + 1, 1),  # absurd
        (10**100, 1),
        (0, 1),
        (-3, 1),
        ("2", 1),
        (2.0, 1),
        (True, 1),
        (float("nan"), 1),
        ([2], 1),
        ({"n": 2}, 1),
    ],
)
def test_only_a_believable_integer_is_an_attempt_number(sent: object, attempt: int) -> None:
    assert attempt_of(sent) == attempt


def test_a_storm_is_more_than_half_retries_over_enough_arrivals() -> None:
    clock = FakeClock()
    windows = RetryWindows(clock)
    gate = "t"
    for _ in range(RETRY_STORM_ARRIVALS // 2):
        windows.arrived(gate, 1)
        windows.arrived(gate, 2)
    assert not windows.storming("t")  # half is not most
    windows.arrived(gate, 3)
    assert windows.storming("t")
    assert not windows.storming("other")  # per tool


def test_a_few_retries_are_no_storm() -> None:
    windows = RetryWindows(FakeClock())
    for _ in range(RETRY_STORM_ARRIVALS - 1):
        windows.arrived("t", 2)
    assert not windows.storming("t")


def test_the_window_slides_and_forgets() -> None:
    clock = FakeClock()
    windows = RetryWindows(clock)
    gate = "t"
    for _ in range(2 * RETRY_STORM_ARRIVALS):
        windows.arrived(gate, 2)
    clock.advance(RETRY_WINDOW * 1.5)  # half the last window still counts: 10 retries
    assert windows.storming("t")
    for _ in range(RETRY_STORM_ARRIVALS + 1):  # first attempts now outnumber them
        windows.arrived(gate, 1)
    assert not windows.storming("t")
    clock.advance(RETRY_WINDOW * 0.1)
    for _ in range(2 * RETRY_STORM_ARRIVALS):
        windows.arrived(gate, 2)
    assert windows.storming("t")
    clock.advance(RETRY_WINDOW * 2)  # a quiet window: nothing carried over
    assert not windows.storming("t")


def test_memory_is_per_tool_not_per_call() -> None:
    clock = FakeClock()
    windows = RetryWindows(clock)
    gate = "t"
    for step in range(5000):
        clock.advance(0.001)
        windows.arrived(gate, 1 + step % 3)
    assert len(windows._tools) == 1


async def test_a_failing_observer_does_not_fail_the_call(caplog: pytest.LogCaptureFixture) -> None:
    class FailingRetries:
        """An observer whose ``retried`` raises (a class of each run's own: its failure is
        logged once per class), and which hears every other event quietly."""

        def for_tool(self, tool: str, *, max_active: int | None) -> FailingRetries:
            return self

        def __getattr__(self, event: str) -> Any:
            return lambda *args, **kwargs: None

        def retried(self) -> None:
            raise RuntimeError("observer bug")

    guard = Guard(metrics=False, observer=FailingRetries())  # type: ignore[arg-type]
    async with guard.admit("t") as ticket:
        ticket.retried()
    assert "observer_failed" in caplog.text
    assert "retried" in caplog.text


async def _refused(guard: Guard, windows: RetryWindows, attempt: int) -> Any:
    async def never() -> str:
        raise AssertionError("a refused call never runs")

    return await admit_call(
        guard,
        "t",
        never,
        request=None,
        client_key=None,
        failed=lambda _: False,
        attempt=attempt,
        retries=windows,
    )


@pytest.mark.parametrize("limits", [{"max_active": 1, "max_queue": 0}, {"rate": 1, "rate_per": 60}])
async def test_a_refused_retry_during_a_storm_says_not_to_retry_now(limits: dict[str, Any]) -> None:
    # One stopped clock for the guard's advice and the retry count: no time passes between the
    # refusals, so the storm's advice is judged against the plain one exactly.
    guard = Guard(metrics=False, tools={"t": limits}, clock=FakeClock())
    windows = RetryWindows(guard.clock)
    async with guard.admit("t"):  # holds the slot, or spends the rate
        first = await _refused(guard, windows, 1)
        plain = await _refused(guard, windows, 2)  # one retry among two calls: no storm
        for _ in range(RETRY_STORM_ARRIVALS):
            stormed = await _refused(guard, windows, 2)
        fresh = await _refused(guard, windows, 1)  # a first attempt is never told so
    assert "retry_now" not in first.facts["details"]
    assert "retry_now" not in plain.facts["details"]
    assert "retry_now" not in fresh.facts["details"]
    facts = stormed.facts
    assert facts["code"] == plain.facts["code"]
    assert facts["details"] == {**plain.facts["details"], "retry_now": "false"}
    assert facts["retry_after"] >= 2 * plain.facts["retry_after"]
    assert facts["recovery"].startswith("Most calls to this tool are retries right now.")
    assert "Do not call again before the retry_after time" in facts["recovery"]
    parsed = envelope(_Result(stormed.text))
    assert parsed.details == facts["details"]
    assert parsed.retry_after == facts["retry_after"]


class _Result:
    def __init__(self, text: str) -> None:
        self.is_error = True
        self.content = [type("Block", (), {"text": text})()]


async def test_both_adapters_count_retries_per_tool(harness: Harness) -> None:
    registry = CollectorRegistry()
    guard = Guard(registry=registry, tools={"slow": {"max_active": 1, "max_queue": 0}})
    gate = Gate()
    async with harness.session(harness.build(gate, guard)) as client:
        raw: Any = client._client  # type: ignore[attr-defined]
        # FastMCP's client raises an error result unless told not to; the MCP SDK's returns it.
        extra = {"raise_on_error": False} if type(client).__name__ == "_FastMCPClient" else {}
        for attempt in [2, 3, 1, "2", -1, 10**9, True, [2], None]:
            meta = None if attempt is None else {ATTEMPT_META_KEY: attempt}
            result = await raw.call_tool("fast", {}, meta=meta, **extra)
            assert texts(result) == "fast done"
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call, "slow")
            await gate.wait_inside(1)
            busy = await raw.call_tool("slow", {}, meta={ATTEMPT_META_KEY: 2}, **extra)
            gate.release.set()
    assert busy.meta[META_KEY]["code"] == "SERVER_BUSY"
    assert registry.get_sample_value("fusion_guard_retries_total", {"tool": "fast"}) == 2
    assert registry.get_sample_value("fusion_guard_retries_total", {"tool": "slow"}) == 1
