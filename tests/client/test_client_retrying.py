"""``Retrying`` against a scripted tool in virtual time, on asyncio and trio: what is retried and
when, why a refusal goes back, cancellation, the observer and the log events, and the one-line
errors for bad inputs."""

from __future__ import annotations

import contextlib
import logging
import random
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry
from scripted_server import Script, refusal, retrying, success

from fusion_guard import ToolResponse, tool_error
from fusion_guard.client import (
    AdaptiveThrottle,
    ClientObserver,
    PrometheusClientObserver,
    RetryBudget,
    Retrying,
    StopReason,
    ThrottledLocally,
    TokenBucket,
    shared_budget,
    shared_throttle,
)
from virtual_time import virtual_time_backends

anyio_backend = virtual_time_backends()


# -- what is retried, and when ----------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("code", ["SERVER_BUSY", "RATE_LIMITED"])
@pytest.mark.parametrize("via", ["meta", "text"])
async def test_a_refusal_is_retried_after_its_advice_and_never_before(code: str, via: str) -> None:
    script = Script(refusal(code, 0.5, via=via), refusal(code, 0.25, via=via), success())
    start = anyio.current_time()
    outcome = await retrying(jitter=0.2).run(script)
    assert (outcome.stopped, outcome.attempts, outcome.error) == ("ok", 3, None)
    first, second, third = (t - start for t in script.times)
    assert first == 0
    assert 0.5 <= second - first <= 0.5 * 1.2
    # A SERVER_BUSY advice followed and refused again: the second retry waits twice as long.
    stretch = 2.0 if code == "SERVER_BUSY" else 1.0
    assert 0.25 * stretch <= third - second <= 0.25 * 1.2 * stretch
    assert outcome.waited == pytest.approx(third)


@pytest.mark.anyio
async def test_a_doubled_wait_that_leaves_too_little_time_falls_back_to_the_advice() -> None:
    script = Script(refusal(retry_after=0.5), refusal(retry_after=0.6), success())
    outcome = await retrying(jitter=0.0).run(script, deadline=2.0)
    # 0.5 s, then 0.6 s: doubled (1.2 s), it would leave the retry 0.3 s of the 1.5 s left,
    # less than the 0.6 s the plain wait leaves it.
    assert (outcome.stopped, outcome.attempts, outcome.waited) == ("ok", 3, pytest.approx(1.1))


@pytest.mark.anyio
async def test_a_rate_limited_retry_lands_within_one_emission_interval_of_its_opening() -> None:
    # 10 calls per second: openings 0.1 s apart, so the jitter stays under 0.1 s (not 20 % of 2 s).
    details = {"limit": "10", "period_seconds": "1", "scope": "tool"}
    script = Script(refusal("RATE_LIMITED", 2.0, details=details), success())
    outcome = await retrying(jitter=0.2, rng=random.Random(0)).run(script)
    assert 2.0 <= outcome.waited <= 2.1


@pytest.mark.anyio
@pytest.mark.parametrize(
    "details",
    [{"limit": "0", "period_seconds": "1"}, {"limit": "ten", "period_seconds": "1"}, {}],
    ids=["zero", "not-a-number", "none"],
)
async def test_rate_limited_details_that_say_nothing_leave_the_proportional_jitter(
    details: dict[str, str],
) -> None:
    class Highest(random.Random):
        def random(self) -> float:
            return 1.0  # the far end of the jitter

    script = Script(refusal("RATE_LIMITED", 1.0, details=details), success())
    outcome = await retrying(jitter=0.2, rng=Highest()).run(script)
    assert outcome.waited == pytest.approx(1.2)


@pytest.mark.anyio
async def test_a_refusal_without_advice_backs_off_with_full_jitter() -> None:
    script = Script(*[refusal(retry_after=None)] * 3, success())
    outcome = await retrying(backoff=0.1, max_backoff=0.15).run(script)
    gaps = [b - a for a, b in zip(script.times, script.times[1:], strict=False)]
    assert outcome.stopped == "ok"
    assert 0 <= gaps[0] <= 0.1
    assert 0 <= gaps[1] <= 0.15  # 0.2, capped
    assert 0 <= gaps[2] <= 0.15


@pytest.mark.anyio
@pytest.mark.parametrize(
    "result",
    [
        tool_error("CONFLICT", "Invoice already paid").to_dict(),
        tool_error("TIMEOUT", "too long").to_dict(),
        {"content": [{"type": "text", "text": "plain failure"}], "isError": True},
        refusal("QUOTA_EXCEEDED", 0.5),  # advice, but not a code this client retries
    ],
    ids=["conflict", "timeout", "plain", "other-code"],
)
async def test_other_errors_are_never_retried(result: dict[str, Any]) -> None:
    script = Script(result, success())
    outcome = await retrying().run(script)
    assert (script.calls, outcome.stopped) == (1, "error")
    assert outcome.result is result


@pytest.mark.anyio
async def test_a_dtd_from_the_server_is_an_error_not_a_refusal() -> None:
    hostile = {"content": [{"type": "text", "text": "<!DOCTYPE x><tool_error/>"}], "isError": True}
    outcome = await retrying().run(Script(hostile, success()))
    assert (outcome.stopped, outcome.attempts) == ("error", 1)
    assert outcome.error is not None
    assert outcome.error.code == "UNKNOWN"


@pytest.mark.anyio
async def test_a_warning_and_a_success_come_back_at_once() -> None:
    warning = tool_error("DEPRECATED", "old", severity="warning")
    for result in (warning, success()):
        outcome = await retrying().run(Script(result))
        assert (outcome.stopped, outcome.attempts, outcome.error) == ("ok", 1, None)


@pytest.mark.anyio
async def test_what_the_call_raises_propagates_and_is_not_retried() -> None:
    calls = 0

    async def broken() -> Any:
        nonlocal calls
        calls += 1
        raise ConnectionError("gone")

    with pytest.raises(ConnectionError):
        await retrying().call(broken)
    assert calls == 1


@pytest.mark.anyio
async def test_call_returns_the_result_and_passes_the_arguments() -> None:
    async def echo(text: str, *, suffix: str) -> dict[str, Any]:
        return success(text + suffix)

    result = await retrying().call(echo, "a", suffix="b")
    assert result["content"][0]["text"] == "ab"


# -- why a refusal goes back ------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_last_allowed_attempt_returns_its_refusal() -> None:
    script = Script(refusal(retry_after=0.1))
    outcome = await retrying(max_attempts=3).run(script)
    assert (outcome.stopped, outcome.attempts, script.calls) == ("attempts", 3, 3)
    assert outcome.error is not None
    assert outcome.error.code == "SERVER_BUSY"


@pytest.mark.anyio
async def test_a_wait_past_the_callers_deadline_is_not_started() -> None:
    script = Script(refusal(retry_after=2.0), success())
    start = anyio.current_time()
    with anyio.fail_after(1.0):  # the caller's deadline, shorter than the advice
        outcome = await retrying().run(script)
    assert (outcome.stopped, script.calls) == ("deadline", 1)
    assert anyio.current_time() == start  # returned at once, without sleeping


@pytest.mark.anyio
async def test_timeout_and_a_calls_deadline_bound_the_whole_call() -> None:
    script = Script(refusal(retry_after=0.4), refusal(retry_after=0.4), success())
    start = anyio.current_time()
    outcome = await retrying(timeout=1.0, jitter=0).run(script)
    assert (outcome.stopped, outcome.attempts) == ("ok", 3)
    outcome = await retrying(timeout=0.5, jitter=0).run(Script(refusal(retry_after=0.4)))
    assert (outcome.stopped, outcome.attempts) == ("deadline", 2)
    outcome = await retrying(timeout=10).run(Script(refusal(retry_after=0.4)), deadline=0.3)
    assert (outcome.stopped, outcome.attempts) == ("deadline", 1)  # the call's own wins
    outcome = await retrying().run(Script(refusal(retry_after=0.4)), deadline=0.3)
    assert (outcome.stopped, outcome.attempts) == ("deadline", 1)
    assert anyio.current_time() - start == pytest.approx(0.8 + 0.4)


@pytest.mark.anyio
async def test_the_read_timeout_bounds_the_waits_and_is_named() -> None:
    calls: list[float | None] = []

    async def send(attempt: int, remaining: float | None) -> Any:
        calls.append(remaining)
        return refusal(retry_after=0.4)

    outcome = await retrying(jitter=0).attempts(send, tool="search", read_timeout=1.0)
    assert (outcome.stopped, outcome.attempts) == ("read_timeout", 3)
    assert calls == pytest.approx([1.0, 0.6, 0.2])  # what is left, for the SDK's own timeout


@pytest.mark.anyio
async def test_advice_longer_than_max_wait_goes_back() -> None:
    outcome = await retrying(max_wait=10).run(Script(refusal(retry_after=60)))
    assert (outcome.stopped, outcome.attempts) == ("advice_too_long", 1)


@pytest.mark.anyio
async def test_a_spent_budget_sends_the_refusal_back_at_once() -> None:
    budget = TokenBucket(max_tokens=2, token_ratio=0.1)  # 2 tokens, retries above 1
    start = anyio.current_time()
    outcome = await retrying(budget=budget).run(Script(refusal(retry_after=0.5)))
    # The first refusal leaves 1 token: not above half, so no retry.
    assert (outcome.stopped, outcome.attempts, budget.balance) == ("budget", 1, 1.0)
    assert anyio.current_time() == start


@pytest.mark.anyio
async def test_the_shared_budget_is_one_per_server() -> None:
    first, second, other = (
        Retrying(server="billing"),
        Retrying(server="billing"),
        Retrying(server="search"),
    )
    assert first.budget is second.budget is shared_budget("billing")
    assert other.budget is not first.budget
    assert Retrying(server="billing", budget=None).budget is None


@pytest.mark.anyio
async def test_the_throttle_and_the_servers_pushback_are_shared_per_server_too() -> None:
    class Always(random.Random):
        def random(self) -> float:
            return 0.0

    shared_throttle("billing", lambda: AdaptiveThrottle(clock=anyio.current_time, rng=Always()))
    shared_budget("billing", lambda: RetryBudget(clock=anyio.current_time))
    first = Retrying(server="billing", max_attempts=1)
    second = Retrying(server="billing", jitter=0.0)
    assert first.throttle is second.throttle is shared_throttle("billing")
    # One session is told "not now" for 1 s: the other's retry waits for it.
    await first.run(Script(refusal("SERVER_BUSY", 1.0, details={"retry_now": "false"})))
    start = anyio.current_time()
    script = Script(refusal("SERVER_BUSY", 0.1), success())
    assert (await second.run(script)).stopped == "ok"
    assert script.times[1] - start >= 1.0
    # One session's refusals hold back the other's calls (11 so far: more than 10 and more
    # than k - 1 = 0.8 per acceptance, of which there was 1).
    for _ in range(9):
        await first.run(Script(refusal("SERVER_BUSY", 0.1)))
    with pytest.raises(ThrottledLocally):
        await second.run(Script(success()))
    assert Retrying(server="billing", throttle=None).throttle is None


@pytest.mark.anyio
async def test_adaptive_throttling_refuses_locally_once_the_server_refuses_most() -> None:
    now = anyio.current_time

    class Always(random.Random):
        def random(self) -> float:
            return 0.0  # reject whenever the probability is above 0

    throttle = AdaptiveThrottle(2.0, window=1.0, clock=now, rng=Always())
    policy = retrying(throttle=throttle, max_attempts=1)
    script = Script(refusal(retry_after=0.1))
    for _ in range(11):  # ten refusals more than its share are no evidence yet: all sent
        outcome = await policy.run(script)
        assert outcome.stopped == "attempts"
    with pytest.raises(ThrottledLocally, match="THROTTLED_LOCALLY"):
        await policy.run(script)
    assert script.calls == 11
    await anyio.sleep(1.2)  # the window forgets
    assert throttle.rejection_probability() == 0
    policy = retrying(throttle=throttle, max_attempts=2)
    for _ in range(11):
        await policy.run(Script(refusal(retry_after=0.1), success()))  # accepted on retry
    # 11 refusals, 11 acceptances: within k - 1 per acceptance, nothing is held back.
    assert throttle.rejection_probability() == 0


@pytest.mark.anyio
async def test_the_throttle_trusts_a_server_that_stops_refusing_at_once() -> None:
    class Always(random.Random):
        def random(self) -> float:
            return 0.0

    throttle = AdaptiveThrottle(1.8, window=5.0, clock=anyio.current_time, rng=Always())
    policy = retrying(throttle=throttle, max_attempts=1)
    refused = Script(refusal(retry_after=0.1))
    for _ in range(30):
        with contextlib.suppress(ThrottledLocally):
            await policy.run(refused)
    assert throttle.rejection_probability() > 0.5
    # The server accepts again, and the calls keep coming, 10 a second: while the refusals are
    # in the window every call is held back (this rng rejects whenever it may); once they have
    # left it, every call goes, though the window still holds some 50 calls held back and no
    # acceptance (the SRE book's probability alone would be 50 / 51, and stay there).
    ok = Script(success())
    for _ in range(50):  # 5 s
        with pytest.raises(ThrottledLocally):
            await policy.run(ok)
        await anyio.sleep(0.1)
    await anyio.sleep(0.5)  # the last slice of refusals leaves the window
    for _ in range(10):
        await policy.run(ok)
        await anyio.sleep(0.1)
    assert ok.calls == 10
    assert throttle.rejection_probability() == 0


class _Draws(random.Random):
    """A random source that returns the given draws in turn."""

    def __init__(self, *draws: float) -> None:
        super().__init__()
        self.draws = list(draws)

    def random(self) -> float:
        return self.draws.pop(0)


def test_the_gate_shuts_past_the_full_share_and_then_holds_to_half_of_it() -> None:
    t = [0.0]
    throttle = AdaptiveThrottle(1.8, window=4.0, clock=lambda: t[0], rng=_Draws(*[0.0] * 99))

    def answered(accepted: int = 0, refused: int = 0) -> None:
        for _ in range(accepted):
            throttle.accepted()
        for _ in range(refused):
            throttle.refused()

    # 20 acceptances, 16 refusals: at k - 1 = 0.8 per acceptance, not past it: nothing is held
    # back (a 1 s blip's refusals stay within this share).
    for _ in range(36):
        assert throttle.admit()
    answered(accepted=20, refused=16)
    assert throttle.admit()
    assert throttle.rejection_probability() == 0
    answered(refused=1)  # 17 > 16: shut, and the SRE book's probability applies
    assert not throttle.admit()
    for _ in range(50):  # calls held back: demand the server is not trusted with
        assert not throttle.admit()
    # Shut, the gate opens again only at half the share: 17 refusals for 42 acceptances
    # (0.40) are still too many, for 43 (0.395) they are not, whatever the held-back demand.
    answered(accepted=22)
    assert not throttle.admit()
    answered(accepted=1)
    assert throttle.admit()
    assert throttle.rejection_probability() == 0
    # Within the window of a shut, it shuts again at half the share, not at the full one.
    answered(refused=1)
    assert not throttle.admit()
    # A window later, with nothing shut meanwhile, the full share and the floor apply again.
    t[0] += 8.5
    for _ in range(20):
        assert throttle.admit()
    answered(accepted=10, refused=10)
    assert throttle.admit()  # 10 refusals: no evidence yet, though 1 per acceptance


@pytest.mark.anyio
async def test_a_retry_the_throttle_holds_back_does_not_spend_the_budget() -> None:
    now = anyio.current_time
    budget = RetryBudget(0.0, min_per_second=0.1, window=10, clock=now)  # 1 retry
    throttle = AdaptiveThrottle(clock=now, rng=_Draws(0.99, 0.0))
    for _ in range(11):
        throttle.refused()  # shut: past the 10 refusals that are no evidence
    assert throttle.admit()  # no demand counted yet: sent without a draw
    # The first attempt passes its draw (0.99), the retry does not (0.0): held back, and the
    # budget's one retry is still there for the next call.
    outcome = await retrying(budget=budget, throttle=throttle).run(
        Script(refusal(retry_after=0.1), success())
    )
    assert (outcome.stopped, outcome.attempts) == ("throttled", 1)
    assert budget.balance == 1


@pytest.mark.anyio
async def test_cancellation_ends_a_wait_at_once() -> None:
    script = Script(refusal(retry_after=5.0), success())
    start = anyio.current_time()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(retrying().call, script)
        await anyio.sleep(1.0)
        tasks.cancel_scope.cancel()
    assert anyio.current_time() - start == pytest.approx(1.0)
    assert script.calls == 1


# -- what is reported -------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def attempted(self, server: str, tool: str, attempt: int) -> None:
        self.events.append(("attempted", server, tool, attempt))

    def retrying(self, server: str, tool: str, code: str, wait: float) -> None:
        self.events.append(("retrying", code, round(wait, 3)))

    def gave_up(self, server: str, tool: str, reason: StopReason, attempts: int) -> None:
        self.events.append(("gave_up", reason, attempts))


@pytest.mark.anyio
async def test_the_observer_and_the_logs_hear_of_each_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = Recorder()
    observer: ClientObserver = recorder
    script = Script(refusal("RATE_LIMITED", 0.5))
    with caplog.at_level(logging.DEBUG, logger="fusion_guard"):
        await retrying(server="billing", observer=observer, max_attempts=2, jitter=0).run(script)
    assert recorder.events == [
        ("attempted", "billing", "search", 1),
        ("retrying", "RATE_LIMITED", 0.5),
        ("attempted", "billing", "search", 2),
        ("gave_up", "attempts", 2),
    ]
    events = [(r.event, r.fields) for r in caplog.records]  # type: ignore[attr-defined]
    assert events == [
        ("client_retry", {"server": "billing", "tool": "search", "attempt": 1,
                          "code": "RATE_LIMITED", "wait": 0.5}),
        ("client_gave_up", {"server": "billing", "tool": "search", "reason": "attempts",
                            "attempts": 2, "code": "RATE_LIMITED"}),
    ]  # fmt: skip


@pytest.mark.anyio
async def test_a_failing_observer_changes_nothing() -> None:
    class Broken(Recorder):
        def retrying(self, server: str, tool: str, code: str, wait: float) -> None:
            raise RuntimeError("observer bug")

    outcome = await retrying(observer=Broken()).run(Script(refusal(retry_after=0.1), success()))
    assert outcome.stopped == "ok"


@pytest.mark.anyio
async def test_prometheus_counters() -> None:
    registry = CollectorRegistry()
    observer = PrometheusClientObserver(registry)
    budget = RetryBudget(0, min_per_second=1, window=1, clock=anyio.current_time)  # 1 retry
    script = Script(refusal("SERVER_BUSY", 0.25))
    await retrying(server="s", observer=observer, budget=budget, jitter=0).run(script)
    labels = {"server": "s", "tool": "search"}
    sample = registry.get_sample_value
    assert sample("fusion_guard_client_attempts_total", labels) == 2
    assert sample("fusion_guard_client_retries_total", {**labels, "code": "SERVER_BUSY"}) == 1
    assert sample("fusion_guard_client_gave_up_total", {**labels, "reason": "budget"}) == 1
    assert sample("fusion_guard_client_wait_seconds_total", labels) == 0.25


# -- bad inputs: one clear line each -------------------------------------------------------


@pytest.mark.anyio
async def test_a_result_that_is_no_mcp_result_is_a_type_error() -> None:
    async def wrong() -> str:
        return "just text"

    with pytest.raises(TypeError, match=r"^expected an MCP tool result .*got str$"):
        await retrying().call(wrong)


@pytest.mark.anyio
@pytest.mark.parametrize("deadline", [0, -1.5, float("nan")])
async def test_a_deadline_in_the_past_is_refused(deadline: float) -> None:
    script = Script(success())
    with pytest.raises(ValueError, match=r"^deadline \(seconds from now\) must be") as raised:
        await retrying().call(script, deadline=deadline)
    assert "\n" not in str(raised.value)
    assert script.calls == 0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Retrying(max_attempts=0), "max_attempts must be an int >= 1"),
        (lambda: Retrying(timeout=-1), "timeout must be > 0 seconds"),
        (lambda: Retrying(timeout=0), "timeout must be > 0 seconds"),
        (lambda: Retrying(max_wait=float("nan")), "max_wait must be a number"),
        (lambda: Retrying(server=""), "server must be a non-empty str"),
        (lambda: TokenBucket(max_tokens=-1), "max_tokens must be > 0"),
        (lambda: TokenBucket(token_ratio=0), "token_ratio must be > 0"),
        (lambda: RetryBudget(-0.1), "ratio must be >= 0"),
        (lambda: RetryBudget(min_per_second=-5), "min_per_second must be >= 0"),
        (lambda: AdaptiveThrottle(0.5), "k must be >= 1"),
        (lambda: AdaptiveThrottle(window=0), "window must be > 0"),
    ],
)
def test_bad_settings_fail_with_one_line(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        make()
    assert "\n" not in str(raised.value)


@pytest.mark.anyio
async def test_a_tool_response_is_an_mcp_result() -> None:
    response: ToolResponse = tool_error("RATE_LIMITED", "slow down", retry_after=0.1)
    outcome = await retrying(max_attempts=2).run(Script(response, success()))
    assert (outcome.stopped, outcome.attempts) == ("ok", 2)


# -- the server's "do not retry now" -------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("via", ["meta", "text"])
async def test_a_refusal_saying_retry_now_false_goes_back_at_once(via: str) -> None:
    # The guard's pushback when retries are most of a tool's arrivals: retrying would feed it.
    later = refusal("SERVER_BUSY", 0.5, via=via, details={"retry_now": "false"})
    script = Script(refusal("SERVER_BUSY", 0.5, via=via), later, success())
    start = anyio.current_time()
    outcome = await retrying().run(script)
    assert (outcome.stopped, outcome.attempts, script.calls) == ("server_said_later", 2, 2)
    assert outcome.error is not None
    assert outcome.error.details["retry_now"] == "false"
    assert anyio.current_time() - start == pytest.approx(script.times[1] - start)  # no wait after


@pytest.mark.anyio
async def test_retry_now_false_holds_the_retries_of_every_call_sharing_the_budget() -> None:
    # Three calls on one Retrying (one budget): the first is told "not now" for 2 s at 0.1 s;
    # the second, refused at 0 s with 0.3 s of advice, was already waiting; the third is refused
    # at 0.5 s with 0.3 s of advice. Both hold their retries until the 2 s have passed.
    policy = retrying(jitter=0.0)
    told = Script(
        refusal("SERVER_BUSY", 0.1), refusal("SERVER_BUSY", 2.0, details={"retry_now": "false"})
    )
    waiting = Script(refusal("SERVER_BUSY", 0.3), success())
    later = Script(refusal("SERVER_BUSY", 0.3), success())
    start = anyio.current_time()
    outcomes: dict[str, Any] = {}

    async def run(name: str, script: Script, after: float) -> None:
        await anyio.sleep(after)
        outcomes[name] = await policy.run(script, deadline=5.0)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run, "told", told, 0.0)
        tasks.start_soon(run, "waiting", waiting, 0.0)
        tasks.start_soon(run, "later", later, 0.5)
    assert outcomes["told"].stopped == "server_said_later"
    assert told.times[1] - start == pytest.approx(0.1)
    for name, script in (("waiting", waiting), ("later", later)):
        assert outcomes[name].stopped == "ok", name
        assert script.times[1] - start == pytest.approx(2.1), name  # the hold's end, not before


@pytest.mark.anyio
async def test_a_hold_that_ends_past_the_deadline_sends_the_refusal_back_at_once() -> None:
    policy = retrying(jitter=0.0)
    told = Script(refusal("SERVER_BUSY", 3.0, details={"retry_now": "false"}))
    await policy.run(told)
    start = anyio.current_time()
    script = Script(refusal("SERVER_BUSY", 0.1), success())
    outcome = await policy.run(script, deadline=1.0)
    assert (outcome.stopped, outcome.attempts, outcome.waited) == ("server_said_later", 1, 0.0)
    assert anyio.current_time() == start
    # Another Retrying has a budget (and a hold) of its own: not held.
    assert (await retrying().run(Script(refusal("SERVER_BUSY", 0.1), success()))).stopped == "ok"


@pytest.mark.anyio
async def test_a_processs_rate_limited_retries_come_one_emission_interval_apart() -> None:
    # An anonymous crowd is told one opening (the server cannot tell its callers apart): the
    # calls of one process told the same time take successive openings of the limit (10 a
    # second: 0.1 s each) from the advised one, never before it.
    details = {"limit": "10", "period_seconds": "1", "scope": "tool"}
    policy = retrying()
    scripts = [Script(refusal("RATE_LIMITED", 0.5, details=details), success()) for _ in range(5)]
    start = anyio.current_time()
    async with anyio.create_task_group() as tasks:
        for script in scripts:
            tasks.start_soon(policy.run, script)
    retries = sorted(script.times[1] - start for script in scripts)
    for place, at in enumerate(retries):  # each within an opening of its own
        assert 0.5 + 0.1 * place <= at < 0.5 + 0.1 * (place + 1) + 1e-9, retries


@pytest.mark.anyio
async def test_only_false_stops_the_retries() -> None:
    # Another value (a newer server's, or garbage) leaves the usual rules in force.
    script = Script(refusal("RATE_LIMITED", 0.5, details={"retry_now": "soon"}), success())
    outcome = await retrying().run(script)
    assert (outcome.stopped, outcome.attempts) == ("ok", 2)
