"""``Retrying.begin``: one call driven step by step (``RetryCall``), on asyncio and trio in
virtual time: the async iterator and the explicit ``settle`` / ``retry`` steps give what
``Retrying.run`` gives, the attempt numbers and the time left travel with each attempt, and a
step out of order is one clear error."""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from scripted_server import Script, refusal, retrying, success

from fusion_guard import Guard, MemoryBackend, tool_error
from fusion_guard.client import (
    ATTEMPT_META_KEY,
    AdaptiveThrottle,
    RetryBudget,
    RetryCall,
    Retrying,
    ThrottledLocally,
)
from fusion_guard.integrations.mcp import install
from virtual_time import virtual_time_backends

anyio_backend = virtual_time_backends()


@pytest.mark.anyio
async def test_the_iterator_yields_one_attempt_per_send_and_ends_with_the_answer() -> None:
    script = Script(refusal(retry_after=0.5), refusal(retry_after=0.25), success("third"))
    call = retrying(jitter=0.0).begin("search", deadline=10.0)
    sent: list[tuple[int, float | None]] = []
    start = anyio.current_time()
    async for attempt in call:
        assert attempt is call
        sent.append((attempt.number, attempt.remaining))
        attempt.settle(await script())
    outcome = call.outcome
    assert (outcome.stopped, outcome.attempts, outcome.error) == ("ok", 3, None)
    assert outcome.result == success("third")
    # The time left shrinks by each wait (0.5 s, then the doubled 0.25 s).
    assert [number for number, _ in sent] == [1, 2, 3]
    assert [remaining for _, remaining in sent] == pytest.approx([10.0, 9.5, 9.0])
    assert outcome.waited == pytest.approx(anyio.current_time() - start) == pytest.approx(1.0)


@pytest.mark.anyio
@pytest.mark.parametrize("style", ["iterator", "steps"])
async def test_the_steps_give_what_run_gives(style: str) -> None:
    answers = [refusal("RATE_LIMITED", 0.3), refusal(retry_after=0.2), success()]
    reference = Script(*answers)
    expected = await retrying().run(reference)
    script = Script(*answers)
    call: RetryCall[Any] = retrying().begin("search")
    if style == "iterator":
        async for attempt in call:
            attempt.settle(await script())
    else:
        while True:
            if call.settle(await script()) or not await call.retry():
                break
    outcome = call.outcome
    assert (outcome.stopped, outcome.attempts, outcome.waited) == (
        expected.stopped,
        expected.attempts,
        pytest.approx(expected.waited),
    )
    # The same seeded waits: each attempt at the same time after the first.
    assert [t - script.times[0] for t in script.times] == pytest.approx(
        [t - reference.times[0] for t in reference.times]
    )


@pytest.mark.anyio
async def test_settle_says_whether_the_answer_is_the_calls() -> None:
    assert retrying().begin("search").settle(success()) is True
    error = tool_error("CONFLICT", "Invoice already paid").to_dict()
    call = retrying().begin("search")
    assert call.settle(error) is True
    assert (call.outcome.stopped, call.outcome.error and call.outcome.error.code) == (
        "error",
        "CONFLICT",
    )
    call = retrying().begin("search")
    assert call.settle(refusal()) is False  # a refusal: retry() decides


@pytest.mark.anyio
async def test_a_refusal_the_deadline_cannot_wait_for_ends_the_loop_with_its_reason() -> None:
    call = retrying().begin("search", deadline=0.2)
    attempts = 0
    async for attempt in call:
        attempts += 1
        attempt.settle(refusal(retry_after=0.5))
    assert attempts == 1
    assert (call.outcome.stopped, call.outcome.attempts, call.outcome.waited) == (
        "deadline",
        1,
        0.0,
    )
    assert call.outcome.error is not None
    assert call.outcome.error.code == "SERVER_BUSY"


@pytest.mark.anyio
async def test_the_read_timeout_bounds_the_call_and_is_named() -> None:
    call = retrying().begin("search", read_timeout=0.3)
    assert call.remaining == pytest.approx(0.3)
    assert call.settle(refusal(retry_after=0.5)) is False
    assert await call.retry() is False
    assert call.outcome.stopped == "read_timeout"


@pytest.mark.anyio
async def test_a_spent_budget_and_the_throttle_act_on_steps_as_on_run() -> None:
    budget = RetryBudget(0.0, min_per_second=0.0, window=10, clock=anyio.current_time)
    call = retrying(budget=budget).begin("search")
    call.settle(refusal(retry_after=0.1))
    assert await call.retry() is False
    assert call.outcome.stopped == "budget"

    throttle = AdaptiveThrottle(1.0, window=10, clock=anyio.current_time, rng=random.Random(1))
    for _ in range(50):
        throttle.admit()
        throttle.refused()
    policy = retrying(throttle=throttle)

    def twenty_calls() -> None:
        for _ in range(20):  # nearly every call is held back before it is sent
            policy.begin("search")

    with pytest.raises(ThrottledLocally):
        twenty_calls()


@pytest.mark.anyio
async def test_cancellation_ends_a_retrys_wait_at_once() -> None:
    call = retrying().begin("search")
    call.settle(refusal(retry_after=5.0))
    start = anyio.current_time()
    async with anyio.create_task_group() as tasks:  # (a cancel scope's deadline would bound it)
        tasks.start_soon(call.retry)
        await anyio.sleep(1.0)
        tasks.cancel_scope.cancel()
    assert anyio.current_time() - start == pytest.approx(1.0)


@pytest.mark.anyio
async def test_an_enclosing_deadline_bounds_the_waits() -> None:
    call = retrying().begin("search")
    call.settle(refusal(retry_after=0.5))
    with anyio.fail_after(0.3):
        assert await call.retry() is False
    assert call.outcome.stopped == "deadline"


@pytest.mark.anyio
async def test_what_a_send_raises_is_the_callers_and_nothing_is_retried() -> None:
    call = retrying().begin("search")

    async def lose_the_connection() -> None:
        async for _attempt in call:
            raise ConnectionError("lost")

    with pytest.raises(ConnectionError):
        await lose_the_connection()
    with pytest.raises(RuntimeError, match="no answer yet"):
        _ = call.outcome


@pytest.mark.anyio
async def test_steps_out_of_order_are_one_clear_error() -> None:
    call = retrying().begin("search")
    with pytest.raises(RuntimeError, match="no refusal to retry"):
        await call.retry()
    with pytest.raises(RuntimeError, match="no answer yet"):
        _ = call.outcome
    call.settle(success())
    with pytest.raises(RuntimeError, match="settled already"):
        call.settle(success())
    with pytest.raises(RuntimeError, match="no refusal to retry"):
        await call.retry()

    async def forget_to_settle() -> None:
        async for _attempt in retrying().begin("search"):
            pass

    with pytest.raises(RuntimeError, match="settle each attempt"):
        await forget_to_settle()
    with pytest.raises(TypeError, match="expected an MCP tool result"):
        retrying().begin("search").settle("not a result")
    with pytest.raises(ValueError, match="deadline"):
        retrying().begin("search", deadline=-1.0)


@pytest.mark.anyio
async def test_a_session_of_ones_own_driven_through_the_steps() -> None:
    # docs/client.md's example: the attempt number in _meta, the time left as the read timeout.
    app: MCPServer[Any] = MCPServer("billing", log_level="CRITICAL")

    @app.tool()
    async def attempt(ctx: Context) -> str:
        return str((ctx.request_context.meta or {}).get(ATTEMPT_META_KEY))

    install(
        app,
        Guard(
            max_active=None,
            timeout=None,
            rate=2,
            burst=1,
            metrics=False,
            rate_backend=MemoryBackend(clock=anyio.current_time),
        ),
    )
    policy = Retrying(server="billing")
    async with Client(app) as client:
        await client.call_tool("attempt", {})  # takes the burst: the next is refused once
        call = policy.begin("attempt", deadline=5.0)
        async for step in call:
            step.settle(
                await client.call_tool(
                    "attempt",
                    {},
                    read_timeout_seconds=step.remaining,
                    meta={ATTEMPT_META_KEY: step.number},
                )
            )
    assert (call.outcome.stopped, call.outcome.attempts) == ("ok", 2)
    assert call.outcome.result.content[0].text == "2"


@pytest.mark.anyio
@pytest.mark.parametrize("refund", [False, True])
async def test_a_refunding_budget_gives_back_the_retries_the_server_accepted(refund: bool) -> None:
    # One retry in the budget (0.1 a second over 10 s, no ratio).
    budget = RetryBudget(
        0.0, min_per_second=0.1, window=10, refund=refund, clock=anyio.current_time
    )
    policy = retrying(budget=budget)
    first = await policy.run(Script(refusal(retry_after=0.1), success()))
    assert (first.stopped, first.attempts) == ("ok", 2)
    # Accepted, the retry's withdrawal came back: the next call may retry too.
    second = await policy.run(Script(refusal(retry_after=0.1), success()))
    assert second.stopped == ("ok" if refund else "budget")
    # A retry refused again keeps its withdrawal: the budget is spent either way.
    third = await policy.run(Script(refusal(retry_after=0.1), refusal(retry_after=0.1)))
    assert third.stopped == "budget"


@pytest.mark.anyio
async def test_a_throttle_shut_lately_keeps_a_refunding_budgets_withdrawals() -> None:
    budget = RetryBudget(0.0, min_per_second=0.1, window=10, refund=True, clock=anyio.current_time)
    throttle = AdaptiveThrottle(window=4, clock=anyio.current_time, rng=random.Random(1))
    for _ in range(20):  # refusals past the share: the gate shuts (and is shut for a window)
        throttle.admit()
        throttle.refused()
    assert throttle.rejection_probability() > 0
    assert throttle.shut_lately()
    for _ in range(40):  # accepted again: the gate opens, but was shut within the window
        throttle.admit()
        throttle.accepted()
    assert throttle.rejection_probability() == 0
    policy = retrying(budget=budget, throttle=throttle)
    first = await policy.run(Script(refusal(retry_after=0.1), success()))
    assert (first.stopped, first.attempts) == ("ok", 2)
    assert budget.balance < 1  # an overload's retry accepted: no evidence of a passing burst


def test_a_patient_throttle_sends_a_burst_and_shuts_once_it_lasts() -> None:
    t = [0.0]

    def throttle(patience: float) -> AdaptiveThrottle:
        made = AdaptiveThrottle(1.8, window=4, patience=patience, clock=lambda: t[0])
        t[0] = 0.0
        for _ in range(60):
            made.admit()
        for _ in range(20):
            made.accepted()
        t[0] = 0.1
        for _ in range(30):  # past the full share (0.8 x 20) and the floor (10)
            made.refused()
        return made

    impatient = throttle(0.0)
    t[0] = 0.2
    assert impatient.rejection_probability() > 0
    patient = throttle(1.0)
    for at in (0.2, 0.6, 1.05):  # the refusals are past the share since 0.2 s
        t[0] = at
        assert patient.rejection_probability() == 0.0
    t[0] = 1.2
    assert patient.rejection_probability() > 0
    # Past the patience once, the gate shuts again at once while it was shut within a window.
    t[0] = 1.3
    for _ in range(60):
        patient.accepted()
    assert patient.rejection_probability() == 0.0  # 30 refusals, 80 acceptances: open
    for _ in range(200):
        patient.admit()
    for _ in range(10):  # past half the share: shut, with no patience
        patient.refused()
    assert patient.rejection_probability() > 0


def test_a_negative_patience_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="patience must be >= 0, got -1"):
        AdaptiveThrottle(patience=-1)
