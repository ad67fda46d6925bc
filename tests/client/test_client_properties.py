"""Properties of the retrying call over any sequence of answers (hypothesis), each run in virtual
time on trio: the budget never goes negative, the waits never pass the deadline, no retry comes
before its advice, and nothing after a non-refusal is sent."""

from __future__ import annotations

import random
from typing import Any

import anyio
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scripted_server import refusal, success

from fusion_guard import tool_error
from fusion_guard.client import Budget, RetryBudget, Retrying, TokenBucket
from virtual_time import run_virtual

RETRYABLE = st.builds(
    refusal,
    st.sampled_from(["SERVER_BUSY", "RATE_LIMITED"]),
    st.one_of(st.none(), st.floats(0.001, 5.0)),
    via=st.sampled_from(["meta", "text"]),
)
FINAL = st.one_of(
    st.just(success()),
    st.sampled_from(["CONFLICT", "TIMEOUT", "INTERNAL_ERROR", "VALIDATION_ERROR"]).map(
        lambda code: tool_error(code, "no").to_dict()
    ),
    st.just({"content": [{"type": "text", "text": "plain"}], "isError": True}),
)
ANSWERS = st.lists(st.one_of(RETRYABLE, FINAL), min_size=1, max_size=8)


def budgets() -> st.SearchStrategy[str]:
    return st.sampled_from(["none", "token", "ratio"])


def make_budget(kind: str, size: float) -> Budget | None:
    if kind == "token":
        return TokenBucket(max_tokens=size, token_ratio=0.1)
    if kind == "ratio":
        return RetryBudget(0.2, min_per_second=size / 10, window=10, clock=anyio.current_time)
    return None


@settings(max_examples=150, deadline=None)
@given(
    answers=ANSWERS,
    timeout=st.floats(0.01, 10.0),
    max_attempts=st.integers(1, 6),
    kind=budgets(),
    size=st.floats(1.0, 20.0),
    seed=st.integers(0, 2**16),
)
def test_any_sequence_of_answers(
    answers: list[dict[str, Any]],
    timeout: float,
    max_attempts: int,
    kind: str,
    size: float,
    seed: int,
) -> None:
    async def scenario() -> None:
        budget = make_budget(kind, size)
        policy = Retrying(
            max_attempts=max_attempts,
            budget=budget,
            throttle=None,  # shared by every example: the budget is what is under test
            timeout=timeout,
            rng=random.Random(seed),
        )
        sent: list[float] = []

        async def send() -> dict[str, Any]:
            sent.append(anyio.current_time())
            if budget is not None:
                assert budget.balance >= 0
            return answers[min(len(sent), len(answers)) - 1]

        start = anyio.current_time()
        outcome = await policy.run(send)
        assert anyio.current_time() - start < timeout  # never waited past the deadline
        assert outcome.waited < timeout
        if budget is not None:
            assert budget.balance >= 0
        assert outcome.attempts == len(sent) <= max_attempts
        # Nothing is sent after an answer that is no refusal.
        for index, answer in enumerate(answers[: len(sent) - 1]):
            assert answer["isError"], index
            assert _code(answer) in ("SERVER_BUSY", "RATE_LIMITED"), index
        # No retry before its advice.
        for index in range(1, len(sent)):
            advice = _advice(answers[min(index, len(answers)) - 1])
            if advice is not None:
                assert sent[index] - sent[index - 1] >= advice
        if outcome.stopped == "error":
            assert _code(answers[min(len(sent), len(answers)) - 1]) not in (
                "SERVER_BUSY",
                "RATE_LIMITED",
            )

    run_virtual(scenario, "trio")


def _code(answer: dict[str, Any]) -> str | None:
    from fusion_guard import FusionClientError, raise_for_tool_error

    try:
        raise_for_tool_error(answer)
    except FusionClientError as error:
        return error.code
    return None


def _advice(answer: dict[str, Any]) -> float | None:
    from fusion_guard import FusionClientError, raise_for_tool_error

    try:
        raise_for_tool_error(answer)
    except FusionClientError as error:
        return error.retry_after
    return None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), max_size=200), st.floats(0.5, 1000.0), st.floats(0.01, 1.0))
def test_a_token_bucket_stays_within_zero_and_its_size(
    refusals: list[bool], size: float, ratio: float
) -> None:
    bucket = TokenBucket(size, ratio)
    for refused in refusals:
        bucket.answered(refused=refused)
        bucket.withdraw()
        assert 0 <= bucket.balance <= size


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 3), st.booleans()), max_size=100))
# 2.0 // 0.2 is 9.0 while 10 * 0.2 is 2.0: a window must not end its newest slice at the very
# reading that made it (the budget's balance and its withdrawal would read two totals)
@example([(0.0, True), (2.0, True)])
def test_a_ratio_budget_never_grants_more_than_it_holds(steps: list[tuple[float, bool]]) -> None:
    now = [0.0]
    budget = RetryBudget(0.2, min_per_second=0.5, window=2.0, clock=lambda: now[0])
    for gap, retry in steps:
        now[0] += gap
        budget.sent(retry=False)
        balance = budget.balance
        assert balance >= 0
        if retry:
            assert budget.withdraw() == (balance >= 1)


@settings(max_examples=60, deadline=None)
@given(
    answers=ANSWERS,
    timeout=st.floats(0.01, 10.0),
    max_attempts=st.integers(1, 6),
    seed=st.integers(0, 2**16),
    backend=st.sampled_from(["asyncio", "trio"]),
)
def test_the_steps_send_and_answer_as_run_does(
    answers: list[dict[str, Any]], timeout: float, max_attempts: int, seed: int, backend: str
) -> None:
    # Retrying.begin driven by hand (the async iterator) against Retrying.run, on the same
    # answers and seed: the same attempts at the same times, the same outcome.
    def policy() -> Retrying:
        return Retrying(
            max_attempts=max_attempts,
            budget=RetryBudget(0.2, min_per_second=0.3, window=10, clock=anyio.current_time),
            throttle=None,
            timeout=timeout,
            rng=random.Random(seed),
        )

    async def by_run() -> tuple[list[float], tuple[Any, ...]]:
        start, sent = anyio.current_time(), []

        async def send() -> dict[str, Any]:
            sent.append(anyio.current_time() - start)
            return answers[min(len(sent), len(answers)) - 1]

        outcome = await policy().run(send)
        return sent, (outcome.stopped, outcome.attempts, outcome.waited, outcome.result)

    async def by_steps() -> tuple[list[float], tuple[Any, ...]]:
        start, sent = anyio.current_time(), []
        call = policy().begin("search")
        async for attempt in call:
            assert attempt.number == len(sent) + 1
            assert attempt.remaining is not None
            assert 0 < attempt.remaining <= timeout
            sent.append(anyio.current_time() - start)
            attempt.settle(answers[min(len(sent), len(answers)) - 1])
        outcome = call.outcome
        return sent, (outcome.stopped, outcome.attempts, outcome.waited, outcome.result)

    assert run_virtual(by_steps, backend) == run_virtual(by_run, backend)
