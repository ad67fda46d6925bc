"""``wrap`` end to end through both SDKs' real clients, in memory, against servers guarded by
fusion_guard (a rate limit of 2 calls a second, burst 1), in virtual time: the second call of a
pair is refused with RATE_LIMITED, waits for its advice and passes.

The MCP SDK's ``Client`` and its ``ClientSession`` run on asyncio and trio; FastMCP's client needs
asyncio (it calls ``asyncio.create_task``).
"""

from __future__ import annotations

import copy
import datetime
import random
from typing import Any

import anyio
import pytest
from fastmcp import Client as FastMCPClient
from fastmcp import Context as FastMCPContext
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer

from fusion_guard import Guard, MemoryBackend, tool_error
from fusion_guard._clock import FakeClock
from fusion_guard.client import (
    ATTEMPT_META_KEY,
    AdaptiveThrottle,
    RetryBudget,
    RetryingFastMCPClient,
    RetryingSession,
    ThrottledLocally,
    TokenBucket,
    wrap,
)
from fusion_guard.integrations._common import RETRY_STORM_ARRIVALS, RetryWindows
from fusion_guard.integrations.fastmcp import GuardMiddleware
from fusion_guard.integrations.mcp import install
from virtual_time import VirtualTimeLoop, virtual_time_backends

anyio_backend = virtual_time_backends()


def guard() -> Guard:
    """2 calls a second for the tool, in the event loop's (virtual) time."""
    return Guard(
        max_active=None,
        timeout=None,
        rate=2,
        burst=1,
        metrics=False,
        rate_backend=MemoryBackend(clock=anyio.current_time),
    )


def mcp_app() -> MCPServer[Any]:
    app: MCPServer[Any] = MCPServer("billing", log_level="CRITICAL")

    @app.tool()
    async def attempt(ctx: Context) -> str:
        """Answers with the attempt number the client sent in the request's _meta."""
        meta = ctx.request_context.meta or {}
        return str(meta.get(ATTEMPT_META_KEY))

    @app.tool()
    async def conflict() -> str:
        raise tool_error("CONFLICT", "Invoice already paid")

    install(app, guard())
    return app


def text(result: Any) -> str:
    return str(result.content[0].text)


@pytest.mark.anyio
@pytest.mark.parametrize("target", ["Client", "ClientSession"])
async def test_the_mcp_sdk_client_retries_a_refusal_after_its_advice(target: str) -> None:
    async with Client(mcp_app()) as client:
        session = wrap(client if target == "Client" else client.session)
        assert isinstance(session, RetryingSession)
        assert session.retrying.server == "billing"  # keyed by the server's own name
        start = anyio.current_time()
        first = await session.call_tool("attempt", {})
        outcome = await session.call_tool_outcome("attempt", {})
        assert (text(first), text(outcome.result)) == ("None", "2")  # a first attempt: no number
        assert (outcome.stopped, outcome.attempts) == ("ok", 2)
        assert 0.5 <= anyio.current_time() - start <= 0.5 * 1.2
        assert await session.list_tools()  # everything else is the session's own


@pytest.mark.anyio
async def test_the_mcp_sdk_client_does_not_retry_other_errors() -> None:
    async with Client(mcp_app()) as client:
        outcome = await wrap(client).call_tool_outcome("conflict", {})
    assert (outcome.stopped, outcome.attempts) == ("error", 1)
    assert outcome.error is not None
    assert outcome.error.code == "CONFLICT"


@pytest.mark.anyio
@pytest.mark.parametrize("target", ["Client", "ClientSession"])
async def test_the_sessions_read_timeout_bounds_the_wait(target: str) -> None:
    async with Client(mcp_app(), read_timeout_seconds=0.3) as client:
        session = wrap(client if target == "Client" else client.session)
        await session.call_tool("attempt", {})
        start = anyio.current_time()
        outcome = await session.call_tool_outcome("attempt", {})
    # The advice (0.5 s) is longer than the read timeout: the refusal comes back at once.
    assert (outcome.stopped, outcome.attempts) == ("read_timeout", 1)
    assert outcome.error is not None
    assert outcome.error.code == "RATE_LIMITED"
    assert anyio.current_time() == start


def fastmcp_app() -> FastMCP:
    app = FastMCP("billing")

    @app.tool
    async def attempt(ctx: FastMCPContext) -> str:
        meta = ctx.request_context.meta if ctx.request_context is not None else None
        return str((meta or {}).get(ATTEMPT_META_KEY))

    @app.tool
    async def conflict() -> str:
        raise tool_error("CONFLICT", "Invoice already paid")

    app.add_middleware(GuardMiddleware(guard()))
    return app


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("asyncio", {"loop_factory": VirtualTimeLoop})])
async def test_the_fastmcp_client_retries_a_refusal_and_raises_as_fastmcp_does() -> None:
    async with FastMCPClient(fastmcp_app()) as client:
        session = wrap(client)
        assert isinstance(session, RetryingFastMCPClient)
        assert session.retrying.server == "billing"
        first = await session.call_tool("attempt", {})
        second = await session.call_tool("attempt", {})
        assert (first.data, second.data) == ("None", "2")
        with pytest.raises(ToolError, match="CONFLICT"):
            await session.call_tool("conflict", {})
        outcome = await session.call_tool_outcome("conflict", {})
        # Refused by the tool's rate limit first (the call above spent it), then the tool's own
        # error: never retried.
        assert (outcome.stopped, outcome.attempts) == ("error", 2)
        assert outcome.error is not None
        assert outcome.error.code == "CONFLICT"
        once = wrap(client, max_attempts=1)
        await once.call_tool("attempt", {})
        refused = await once.call_tool("attempt", {}, raise_on_error=False)
        assert refused.is_error
        assert "RATE_LIMITED" in text(refused)
        with pytest.raises(ToolError, match="RATE_LIMITED"):
            await once.call_tool("attempt", {})


def test_wrap_refuses_what_has_no_call_tool() -> None:
    with pytest.raises(TypeError, match=r"^wrap expects an MCP ClientSession or Client"):
        wrap(object())


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("asyncio", {"loop_factory": VirtualTimeLoop})])
async def test_the_fastmcp_clients_timeout_bounds_the_wait() -> None:
    async with FastMCPClient(fastmcp_app(), timeout=0.3) as client:
        session = wrap(client)
        await session.call_tool("attempt", {})
        outcome = await session.call_tool_outcome("attempt", {})
        assert (outcome.stopped, outcome.attempts) == ("read_timeout", 1)
        bounded = await session.call_tool_outcome("attempt", {}, timeout=datetime.timedelta(0.0, 2))
    assert (bounded.stopped, bounded.attempts) == ("ok", 2)  # a per-call timeout wins


@pytest.mark.anyio
async def test_a_timeout_and_an_observer_through_the_sdk() -> None:
    heard: list[tuple[str, float]] = []

    class Observer:
        def attempted(self, server: str, tool: str, attempt: int) -> None:
            heard.append(("attempted", attempt))

        def retrying(self, server: str, tool: str, code: str, wait: float) -> None:
            heard.append((code, wait))

        def gave_up(self, server: str, tool: str, reason: str, attempts: int) -> None:
            heard.append((reason, attempts))

    async with Client(mcp_app()) as client:
        session = wrap(client, timeout=2.0, observer=Observer())
        first = await session.call_tool("attempt", {})
        second = await session.call_tool("attempt", {})
    assert (text(first), text(second)) == ("None", "2")
    assert heard[:2] == [("attempted", 1), ("attempted", 1)]
    (code, wait), last = heard[2], heard[3]
    assert code == "RATE_LIMITED"
    assert 0.5 <= wait <= 0.5 * 1.2  # the advice, plus at most 20 % of it
    assert last == ("attempted", 2)
    assert len(heard) == 4


@pytest.mark.anyio
async def test_a_calls_deadline_is_not_passed_to_the_sdk_and_bounds_the_wait() -> None:
    async with Client(mcp_app()) as client:
        session = wrap(client)
        await session.call_tool("attempt", {}, deadline=5.0)
        start = anyio.current_time()
        refused = await session.call_tool("attempt", {}, deadline=0.3)  # the advice is 0.5 s
        assert refused.is_error
        assert anyio.current_time() == start
        passed = await session.call_tool("attempt", {}, deadline=5.0)
    assert text(passed) == "2"


def test_a_wrapper_stands_in_for_its_session_and_copies() -> None:
    class Session:
        server_info = None
        note = "the session's own"

        async def call_tool(self, name: str, arguments: Any = None, *rest: Any, **kw: Any) -> Any:
            raise AssertionError("not called")

    session = wrap(Session(), server="billing")
    assert session.note == "the session's own"
    assert copy.copy(session).note == "the session's own"
    with pytest.raises(AttributeError):
        _ = session.missing


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("asyncio", {"loop_factory": VirtualTimeLoop})])
async def test_the_helper_stops_when_the_server_says_retries_are_most_of_the_load() -> None:
    app = FastMCP("billing")
    inside, release = anyio.Event(), anyio.Event()

    @app.tool
    async def hold() -> str:
        inside.set()
        await release.wait()
        return "held"

    limits = {"max_active": 1, "max_queue": 0}
    middleware = GuardMiddleware(Guard(metrics=False, tools={"hold": limits}))
    middleware._retries = RetryWindows(FakeClock())  # the window frozen: one storm, no sliding
    app.add_middleware(middleware)
    retry = {ATTEMPT_META_KEY: 2}
    async with FastMCPClient(app) as client, anyio.create_task_group() as tg:
        tg.start_soon(client.call_tool, "hold", {})
        await inside.wait()  # the only slot is taken
        for _ in range(RETRY_STORM_ARRIVALS):  # other agents' retries, all refused
            await client.call_tool("hold", {}, meta=retry, raise_on_error=False)
        outcome = await wrap(client, budget=None).call_tool_outcome("hold", {})
        release.set()
    # The first attempt is refused with the usual advice, followed; the retry is told not to
    # retry now, and goes back at once.
    assert (outcome.stopped, outcome.attempts) == ("server_said_later", 2)
    assert outcome.error is not None
    assert outcome.error.details["retry_now"] == "false"
    assert outcome.error.code == "SERVER_BUSY"


class _Answers:
    """A stand-in session whose calls all succeed (the SDK's own result class)."""

    def __init__(self) -> None:
        self.metas: list[Any] = []

    async def call_tool(self, name: str, arguments: Any = None, *args: Any, **kwargs: Any) -> Any:
        from mcp_types import CallToolResult, TextContent

        self.metas.append(kwargs.get("meta"))
        return CallToolResult(content=[TextContent(type="text", text="ok")])


@pytest.mark.anyio
@pytest.mark.parametrize("one_clock", [True, False])
async def test_a_call_that_succeeds_at_once_is_counted_by_the_budget_and_the_throttle(
    one_clock: bool,
) -> None:
    # The wrappers' success path counts first attempts without a RetryCall; with the default
    # pair on one clock, the throttle counts the budget's too (one clock read).
    clock = FakeClock()
    other = FakeClock()
    budget = RetryBudget(0.5, min_per_second=0, window=10, clock=clock)
    throttle = AdaptiveThrottle(1.0, clock=clock if one_clock else other)
    session = _Answers()
    wrapped = wrap(session, server="counted", budget=budget, throttle=throttle)
    for _ in range(4):
        await wrapped.call_tool("search", {})
    await wrapped.call_tool("search", {}, meta={"trace": "t"})
    assert budget.balance == 2.5  # 0.5 x 5 first attempts
    assert throttle.rejection_probability() == 0
    assert session.metas[0] is None  # a first attempt carries no number (the server reads 1)
    assert session.metas[-1] == {"trace": "t"}
    # 11 refusals shut the gate (k = 1: past 10, the floor); the SRE book's probability then
    # sees 5 requests and 5 acceptances (5 / 6 had the acceptances not been counted), and one
    # request more tips it.
    for _ in range(11):
        throttle.refused()
    assert throttle.rejection_probability() == 0
    throttle.admit()
    assert throttle.rejection_probability() == pytest.approx(1 / 7)


class _FastMCPAnswers(_Answers):
    """The same, taken for FastMCP's ``Client`` by its module: ``wrap`` gives it FastMCP's
    wrapper."""


_FastMCPAnswers.__module__ = "fastmcp.client.client"


@pytest.mark.anyio
@pytest.mark.parametrize("session_class", [_Answers, _FastMCPAnswers])
@pytest.mark.parametrize(
    ("budget", "throttle"),
    [("none", "none"), ("bucket", "none"), ("none", "throttle"), ("bucket", "throttle")],
)
async def test_each_pair_of_options_counts_a_call_that_succeeds_at_once(
    budget: str, throttle: str, session_class: type[_Answers]
) -> None:
    # Each pair gets its own shortest form of the counting (``Retrying.first_attempt_counting``,
    # which both wrappers call themselves): a token bucket is told of each answer, a throttle
    # of each request and acceptance, and a throttle that holds a call back sends nothing.
    clock = FakeClock()
    bucket = TokenBucket(max_tokens=10, token_ratio=0.5) if budget == "bucket" else None
    gate = (
        AdaptiveThrottle(1.0, clock=clock, rng=random.Random(0)) if throttle == "throttle" else None
    )
    if bucket is not None:
        bucket.tokens = 5.0
    session = session_class()
    wrapped = wrap(session, server=f"pair-{budget}-{throttle}", budget=bucket, throttle=gate)
    expected = RetryingSession if session_class is _Answers else RetryingFastMCPClient
    assert type(wrapped) is expected
    for _ in range(4):
        await wrapped.call_tool("search", {})
    assert len(session.metas) == 4
    if bucket is not None:
        assert bucket.balance == 7.0  # 5 + 0.5 x 4 answers
    if gate is not None:
        for _ in range(11):  # shut the gate: 4 acceptances, 4 requests counted
            gate.refused()
        assert gate.rejection_probability() == 0
        gate.admit()
        assert gate.rejection_probability() == pytest.approx(1 / 6)
        held = 0
        for _ in range(200):
            try:
                await wrapped.call_tool("search", {})
            except ThrottledLocally:
                held += 1
        assert held > 0
        assert len(session.metas) == 4 + 200 - held


def test_a_first_attempt_sends_the_callers_meta_as_it_is() -> None:
    # No attempt number on a first attempt: the caller's _meta (or none) goes out untouched.
    session = _Answers()
    wrapped = wrap(session, server="own-meta", budget=None, throttle=None)
    given = {"trace": "t"}

    async def twice() -> None:
        await wrapped.call_tool("search", {})
        await wrapped.call_tool("search", {}, meta=given)

    anyio.run(twice)
    first, second = session.metas
    assert first is None
    assert second is given
    assert given == {"trace": "t"}


@pytest.mark.anyio
@pytest.mark.parametrize("target", ["Client", "ClientSession"])
async def test_through_the_mcp_sdk_only_retries_carry_their_number(target: str) -> None:
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with Client(mcp_app()) as client:
        session = wrap(client if target == "Client" else client.session)
        first = await session.call_tool("attempt", {}, progress_callback=on_progress)
        second = await session.call_tool("attempt", {})  # refused once, then attempt 2
        third = await session.call_tool("attempt", {}, meta={"trace": "t"})
    assert (text(first), text(second), text(third)) == ("None", "2", "2")


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", [("asyncio", {"loop_factory": VirtualTimeLoop})])
async def test_through_fastmcp_only_retries_carry_their_number() -> None:
    async with FastMCPClient(fastmcp_app()) as client:
        session = wrap(client)
        first = await session.call_tool("attempt", {})
        second = await session.call_tool("attempt", {})
    assert (first.data, second.data) == ("None", "2")
