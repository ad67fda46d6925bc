"""Guard admission end to end, with the real ConcurrencyGuard and rate limits: the order of the
checks, shedding, deadlines, cancellation, and what the observer is told."""

from __future__ import annotations

import anyio
import pytest

from fusion_guard import (
    ErrorCode,
    Guard,
    HandlerTimeout,
    RateLimited,
    ServerBusy,
    parse_tool_error,
    tool_error,
)
from fusion_guard._policy import PolicyTable
from fusion_guard.testing import FailingBackend, RecordingObserver
from holding_gate import Gate

pytestmark = pytest.mark.anyio


def code_of(text: str) -> str | None:
    parsed = parse_tool_error(text)
    return None if parsed is None else parsed.code


async def test_a_rate_limited_call_never_takes_a_slot_or_queue_place(
    observer: RecordingObserver,
) -> None:
    guard = Guard(
        metrics=False, max_active=1, max_queue=1, rate=1, rate_per=60, burst=2, observer=observer
    )
    gate = Gate()
    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.call, "t", gate.hold)  # burst 1 of 2: takes the slot
        tg.start_soon(guard.call, "t", gate.hold)  # burst 2 of 2: queues
        await anyio.wait_all_tasks_blocked()
        slots = guard.concurrency("t")
        assert slots is not None
        assert (slots.active, slots.queued) == (1, 1)
        # The queue is full, so a slot-first guard would answer SERVER_BUSY here.
        third = await guard.call("t", gate.hold)
        assert third.code == ErrorCode.RATE_LIMITED
        assert (slots.active, slots.queued) == (1, 1)
        stats = slots.statistics()
        assert (stats.shed_queue_full, stats.shed_queue_timeout) == (0, 0)
        gate.release.set()
    assert gate.finished == 2
    assert sorted(observer.ends("t")) == ["ok", "ok", "rate_limited"]


async def test_beyond_capacity_calls_get_server_busy_with_retry_after(
    observer: RecordingObserver,
) -> None:
    guard = Guard(metrics=False, max_active=2, max_queue=1, observer=observer)
    gate = Gate()
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(guard.call, "billing.pay", gate.hold)
        await anyio.wait_all_tasks_blocked()
        busy = await guard.call("billing.pay", gate.hold)
        gate.release.set()
    parsed = parse_tool_error(busy.text)
    assert parsed is not None
    assert parsed.code == "SERVER_BUSY"
    assert parsed.retry_after is not None
    assert parsed.retry_after > 0
    assert parsed.details["reason"] == "queue_full"
    assert sorted(observer.ends("billing.pay")) == ["ok", "ok", "ok", "shed"]


async def test_cancelling_a_running_call_frees_its_slot(observer: RecordingObserver) -> None:
    guard = Guard(metrics=False, max_active=1, max_queue=0, observer=observer)
    gate = Gate()
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(guard.call, "t", gate.hold)
            await anyio.wait_all_tasks_blocked()
            scope.cancel()
    slots = guard.concurrency("t")
    assert slots is not None
    assert slots.active == 0
    gate.release.set()
    assert (await guard.call("t", gate.hold)).text == "slow done"
    assert observer.ends("t") == ["cancelled", "ok"]


async def test_cancellation_propagates_out_of_call(observer: RecordingObserver) -> None:
    guard = Guard(metrics=False, observer=observer)
    with anyio.move_on_after(0) as scope:
        await guard.call("t", anyio.sleep_forever)
    assert scope.cancelled_caught
    assert observer.ends("t") == ["cancelled"]


async def test_cancelling_a_queued_call_frees_its_queue_place(observer: RecordingObserver) -> None:
    guard = Guard(metrics=False, max_active=1, max_queue=1, observer=observer)
    gate = Gate()
    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.call, "t", gate.hold)
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as waiting:
            tg.start_soon(_cancel_when_queued, guard, waiting)
            await guard.call("t", gate.hold)
        slots = guard.concurrency("t")
        assert slots is not None
        assert (slots.active, slots.queued) == (1, 0)
        gate.release.set()
    assert observer.events["t"][1] == ("finished", "cancelled", None)
    assert observer.ends("t") == ["cancelled", "ok"]


async def _cancel_when_queued(guard: Guard, scope: anyio.CancelScope) -> None:
    await anyio.wait_all_tasks_blocked()
    slots = guard.concurrency("t")
    assert slots is not None
    assert slots.queued == 1
    scope.cancel()


@pytest.mark.parametrize("max_active", [1, "off"])
async def test_deadline_gives_timeout_and_frees_the_slot(
    observer: RecordingObserver, max_active: object
) -> None:
    guard = Guard(
        metrics=False, max_active=max_active, tools={"slow.*": {"timeout": 0.02}}, observer=observer
    )
    result = await guard.call("slow.report", anyio.sleep_forever)
    assert (result.code, result.is_error) == (ErrorCode.TIMEOUT, True)
    assert "0.02 seconds" in result.text
    slots = guard.concurrency("slow.report")
    assert slots is None or slots.active == 0
    assert observer.ends("slow.report") == ["timeout"]


# -- the admit API the SDK adapters use ------------------------------------------------------


async def test_admit_reports_the_ticket_outcome(observer: RecordingObserver) -> None:
    guard = Guard(metrics=False, max_active=1, observer=observer)
    async with guard.admit("t") as ticket:
        assert (ticket.tool, ticket.outcome, ticket.queue_wait) == ("t", "ok", 0.0)
        ticket.outcome = "error"
    assert observer.events["t"][0] == ("admitted", 0.0)
    assert observer.ends("t") == ["error"]


async def test_admit_completion_is_idempotent(observer: RecordingObserver) -> None:
    guard = Guard(metrics=False, observer=observer)
    async with guard.admit("t") as ticket:
        ticket.complete("internal_error")
        ticket.complete("ok")
        ticket.outcome = "ok"
    assert observer.ends("t") == ["internal_error"]


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (RuntimeError("boom"), "internal_error"),
        (tool_error("CONFLICT", "no"), "error"),
        (tool_error("PARTIAL", "ok-ish", severity="warning"), "ok"),
    ],
)
async def test_admit_lets_exceptions_through_and_classifies_them(
    observer: RecordingObserver, exc: Exception, outcome: str
) -> None:
    guard = Guard(metrics=False, max_active=1, observer=observer)
    with pytest.raises(type(exc)):
        async with guard.admit("t"):
            raise exc
    assert observer.ends("t") == [outcome]
    slots = guard.concurrency("t")
    assert slots is not None
    assert slots.active == 0


async def test_admit_raises_the_refusals(observer: RecordingObserver) -> None:
    guard = Guard(
        metrics=False, max_active=1, max_queue=0, rate=2, rate_per=60, burst=2, observer=observer
    )
    async with guard.admit("t"):
        with pytest.raises(ServerBusy) as busy:
            async with guard.admit("t"):
                pytest.fail("admitted beyond capacity")  # pragma: no cover
    assert busy.value.reason == "queue_full"
    with pytest.raises(RateLimited) as limited:
        async with guard.admit("t"):
            pytest.fail("admitted beyond the rate")  # pragma: no cover
    assert limited.value.scope == "tool"
    assert limited.value.response.code == ErrorCode.RATE_LIMITED
    timed = Guard(metrics=False, timeout=0.01, observer=observer)
    with pytest.raises(HandlerTimeout):
        async with timed.admit("slow"):
            await anyio.sleep_forever()
    assert observer.ends("t") == ["shed", "ok", "rate_limited"]
    assert observer.ends("slow") == ["timeout"]


async def test_a_queued_ticket_knows_its_wait(observer: RecordingObserver) -> None:
    guard = Guard(metrics=False, max_active=1, max_queue=1, observer=observer)
    waits: list[float] = []

    async def queued() -> None:
        async with guard.admit("t") as ticket:
            waits.append(ticket.queue_wait)

    async with anyio.create_task_group() as tg, guard.admit("t"):
        tg.start_soon(queued)
        await anyio.wait_all_tasks_blocked()
    assert len(waits) == 1
    assert waits[0] >= 0.0
    assert [event[0] for event in observer.events["t"]] == [
        "admitted",
        "finished",
        "admitted",
        "finished",
    ]


# -- rate-limit scopes -----------------------------------------------------------------------


async def test_rate_scopes(observer: RecordingObserver) -> None:
    per_tool = Guard(metrics=False, rate=1, rate_per=60, burst=1, observer=observer)
    assert (await per_tool.call("a", _ok)).text == "ok"
    assert (await per_tool.call("b", _ok)).text == "ok"  # its own budget
    assert (await per_tool.call("a", _ok)).code == ErrorCode.RATE_LIMITED

    shared = Guard(metrics=False, rate=1, rate_per=60, burst=1, rate_scope="global")
    assert (await shared.call("a", _ok)).text == "ok"
    refused = await shared.call("b", _ok)  # one budget for every tool
    assert refused.code == ErrorCode.RATE_LIMITED
    assert '<detail key="scope">global</detail>' in refused.text


async def test_client_scope_keys_on_the_client_and_never_shows_it() -> None:
    guard = Guard(metrics=False, rate=1, rate_per=60, burst=1, rate_scope="client")
    async with guard.admit("a", client="tenant-42"):
        pass
    async with guard.admit("b", client="tenant-7"):
        pass
    with pytest.raises(RateLimited) as refused:
        async with guard.admit("a", client="tenant-42"):
            pass  # pragma: no cover
    assert "tenant-42" not in refused.value.response.text


async def test_a_failing_backend_fails_open_and_is_reported(observer: RecordingObserver) -> None:
    guard = Guard(metrics=False, rate=1, rate_backend=FailingBackend(), observer=observer)
    assert (await guard.call("t", _ok)).text == "ok"
    kind, _backend, allowed = observer.events["t"][0]
    assert (kind, allowed) == ("backend_error", True)
    assert observer.ends("t") == ["ok"]


async def _ok() -> str:
    return "ok"


# -- per-tool state --------------------------------------------------------------------------


async def test_per_tool_state_is_made_once(
    observer: RecordingObserver, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolved: list[str] = []
    original = PolicyTable.resolve

    def counting(self: PolicyTable, tool: str) -> object:
        resolved.append(tool)
        return original(self, tool)

    monkeypatch.setattr(PolicyTable, "resolve", counting)
    guard = Guard(metrics=False, observer=observer, tools={"billing.*": {"max_active": 2}})
    for _ in range(3):
        await guard.call("billing.pay", _ok)
        await guard.call("search", _ok)
    assert resolved == ["billing.pay", "search"]
    # "search" has the default, an automatic limit, bound at its initial value.
    assert observer.bound == [("billing.pay", 2), ("search", 4)]
    assert guard.concurrency("billing.pay") is guard.concurrency("billing.pay")


async def test_a_tool_without_limits_has_no_machinery(observer: RecordingObserver) -> None:
    guard = Guard(
        metrics=False, observer=observer, tools={"health": {"max_active": "off", "timeout": "off"}}
    )
    assert (await guard.call("health", _ok)).text == "ok"
    assert guard.limits("health").unlimited
    assert guard.concurrency("health") is None
    assert observer.ends("health") == ["ok"]


async def test_glob_precedence_reaches_the_guard() -> None:
    guard = Guard(
        metrics=False,
        tools={"billing.*": {"max_active": 2}, "billing.pay": {"max_active": 1}, "*": {"rate": 9}},
    )
    assert guard.limits("billing.pay").max_active == 1
    assert guard.limits("billing.list").max_active == 2
    assert guard.limits("billing.list").rate == 9.0
    assert guard.limits("search").max_active == "auto"


async def test_from_env_reads_variables_and_overrides_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSION_GUARD_MAX_ACTIVE", "3")
    monkeypatch.setenv("FUSION_GUARD_TOOLS", '{"billing.*": {"timeout": 2}}')
    guard = Guard.from_env(timeout=7)
    assert guard.limits("billing.pay").timeout == 2.0
    assert guard.limits("search").timeout == 7.0
    assert guard.limits("search").max_active == 3
    assert guard.settings.origin("timeout") == "argument"


async def test_invented_tool_names_cannot_grow_the_state_forever(
    observer: RecordingObserver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fusion_guard import _guard

    monkeypatch.setattr(_guard, "MAX_TOOLS", 2)
    guard = Guard(metrics=False, observer=observer)
    for name in ("a", "b", "invented-1", "invented-2"):
        assert (await guard.call(name, _ok)).text == "ok"
    assert guard.limits("a").tool == "a"
    assert guard.limits("invented-3").tool == _guard.OVERFLOW_TOOL
    assert [tool for tool, _ in observer.bound] == ["a", "b", _guard.OVERFLOW_TOOL]
    assert observer.ends(_guard.OVERFLOW_TOOL) == ["ok", "ok"]


@pytest.mark.parametrize("max_active", [1, "off"])
async def test_a_handlers_own_timeout_error_is_not_the_deadline(
    observer: RecordingObserver, max_active: object
) -> None:
    async def gives_up() -> str:
        raise TimeoutError("upstream API timed out")

    guard = Guard(metrics=False, max_active=max_active, timeout=30, observer=observer)
    result = await guard.call("fetch", gives_up)
    assert result.code == ErrorCode.INTERNAL_ERROR
    assert observer.ends("fetch") == ["internal_error"]


async def test_default_metrics_count_every_call_on_the_given_registry() -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    guard = Guard(registry=registry, max_active=1, max_queue=0, rate=2, rate_per=60, burst=2)
    gate = Gate()
    async with anyio.create_task_group() as tg:
        tg.start_soon(guard.call, "billing.pay", gate.hold)
        await anyio.wait_all_tasks_blocked()
        assert registry.get_sample_value("fusion_guard_inflight", {"tool": "billing.pay"}) == 1
        assert (await guard.call("billing.pay", gate.hold)).code == ErrorCode.SERVER_BUSY
        gate.release.set()
    assert (await guard.call("billing.pay", gate.hold)).code == ErrorCode.RATE_LIMITED

    def calls(outcome: str) -> float | None:
        labels = {"tool": "billing.pay", "outcome": outcome}
        return registry.get_sample_value("fusion_guard_calls_total", labels)

    assert (calls("ok"), calls("shed"), calls("rate_limited")) == (1, 1, 1)
    quiet = CollectorRegistry()
    await Guard(registry=quiet, metrics=False).call("t", _ok)
    labels = {"tool": "t", "outcome": "ok"}
    assert quiet.get_sample_value("fusion_guard_calls_total", labels) is None
