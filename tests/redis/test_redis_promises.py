"""Staggered RATE_LIMITED promises on Redis, decided in the Lua script on the server's clock:
successive refusals are told successive openings, spend no budget, and lapse (the cursor key
expires); composed limits advise the latest opening. Times are the server's, so the figures are
checked within a few milliseconds of the exact ones."""

from __future__ import annotations

import anyio
import pytest

from fusion_guard import (
    CallContext,
    ConfigurationError,
    RateLimited,
    RateLimiter,
    RateLimits,
    RedisRateLimitBackend,
)
from redis_testserver import RedisServer

pytestmark = pytest.mark.anyio

MS = 0.001  # the scripts keep times in microseconds and state them rounded: a millisecond


class Told:
    """Advice judged within the time the calls took: the server's clock moves on while a loaded
    machine keeps this process waiting, so an opening ``at`` seconds after the clock started is
    told as ``at`` less up to the time passed since then, never more."""

    def __init__(self) -> None:
        self.start = anyio.current_time()

    def __call__(self, told: float, at: float) -> bool:
        passed = anyio.current_time() - self.start
        return at - passed - MS <= told <= at + MS


async def _refusals(limits: RateLimits, ctx: CallContext, count: int) -> list[RateLimited]:
    refusals = []
    for _ in range(count):
        refusal = await limits.acheck(ctx)
        assert isinstance(refusal, RateLimited)
        refusals.append(refusal)
    return refusals


async def _known(limits: RateLimits, tool: str, callers: range) -> list[RateLimited]:
    """One refusal for each known caller (client keys ``caller-n``)."""
    return [
        refusal
        for n in callers
        for refusal in await _refusals(limits, CallContext(tool, client=f"caller-{n}"), 1)
    ]


async def test_successive_refusals_are_told_successive_openings(redis_url: str) -> None:
    backend = RedisRateLimitBackend(redis_url, timeout=1.0)
    limits = RateLimits([RateLimiter(1, 10.0, 2)], backend=backend)  # one call every 10 s
    ctx = CallContext("t")
    told = Told()
    assert [await limits.acheck(ctx) for _ in range(2)] == [None, None]
    waits = [refusal.retry_after for refusal in await _known(limits, "t", range(4))]
    assert all(map(told, waits, [10.0, 20.0, 30.0, 40.0])), waits
    # Anonymous: at most `burst` (2) openings past the frontier (the known callers' last + 10).
    waits = [refusal.retry_after for refusal in await _refusals(limits, ctx, 4)]
    assert all(map(told, waits, [50.0, 60.0, 70.0, 70.0])), waits
    await backend.aclose()


async def test_a_promise_kept_is_admitted_and_refusals_spent_nothing(redis_url: str) -> None:
    backend = RedisRateLimitBackend(redis_url, timeout=1.0)
    limits = RateLimits([RateLimiter(5, 1.0, 1)], backend=backend)  # every 0.2 s
    ctx = CallContext("t")
    told = Told()
    assert await limits.acheck(ctx) is None
    first, second = await _refusals(limits, ctx, 2)
    assert told(first.retry_after, 0.2)
    assert told(second.retry_after, 0.4)  # the opening after
    await anyio.sleep(first.retry_after)  # the behaviour under test: coming back when told
    assert await limits.acheck(ctx) is None
    await backend.aclose()


async def test_promises_lapse_with_their_cursor_key(
    redis_url: str, redis_server: RedisServer
) -> None:
    backend = RedisRateLimitBackend(redis_url, timeout=1.0, prefix="promises")
    # Every 250 ms: long enough that the first call's budget is still spent when the refusals
    # come on a loaded machine, short enough that the promises lapse within a second or two.
    limits = RateLimits([RateLimiter(4, 1.0, 1)], backend=backend)
    ctx = CallContext("t")
    assert await limits.acheck(ctx) is None
    with redis_server.client() as client:
        assert not [key for key in client.keys("*") if key.endswith(b":p")]  # admission: no cursor
        last = (await _refusals(limits, ctx, 4))[-1]
        (cursor,) = [key for key in client.keys("*") if key.endswith(b":p")]
        assert 0 < client.pttl(cursor) <= round((last.retry_after + 0.25) * 1000) + 1
        await anyio.sleep(last.retry_after + 0.26)  # nobody comes back: every promise passes
        assert client.keys("*") == []
    told = Told()
    assert await limits.acheck(ctx) is None
    (fresh,) = await _refusals(limits, ctx, 1)
    assert told(fresh.retry_after, 0.25)  # the budget's own opening
    await backend.aclose()


async def test_composed_limits_advise_the_latest_opening(redis_url: str) -> None:
    backend = RedisRateLimitBackend(redis_url, timeout=1.0)
    server = RateLimiter(2, 1.0, 1, name="server")  # every 0.5 s
    tool = RateLimiter(1, 2.0, 1, scope="tool", name="tool")  # every 2 s
    limits = RateLimits([server, tool], backend=backend)
    told = Told()
    assert await limits.acheck(CallContext("a")) is None
    (both,) = await _refusals(limits, CallContext("a", client="x"), 1)
    assert both.scope == "tool"
    assert told(both.retry_after, 2.0)
    (tool_only,) = await _refusals(limits, CallContext("a", client="y"), 1)
    assert told(tool_only.retry_after, 4.0)
    (other_tool,) = await _refusals(limits, CallContext("b", client="z"), 1)
    assert other_tool.scope == "global"
    assert told(other_tool.retry_after, 4.5)
    await backend.aclose()


async def test_a_fleet_shares_the_promises(redis_url: str) -> None:
    """Two replicas (two backends, as two processes would have): their known callers'
    refusals interleave on one cursor, so no two callers are told the same opening."""
    replicas = [RedisRateLimitBackend(redis_url, timeout=1.0) for _ in range(2)]
    fleet = [RateLimits([RateLimiter(1, 10.0, 1)], backend=backend) for backend in replicas]
    ctx = CallContext("t")
    told = Told()
    assert await fleet[0].acheck(ctx) is None
    for i in range(6):
        (refusal,) = await _known(fleet[i % 2], "t", range(i, i + 1))
        assert told(refusal.retry_after, 10.0 * (i + 1)), (i, refusal.retry_after)
    for backend in replicas:
        await backend.aclose()


async def test_at_most_31_limits_in_one_decision(redis_url: str) -> None:
    backend = RedisRateLimitBackend(redis_url, timeout=1.0)
    limiters = [RateLimiter(1, 10.0, 1, name=f"l{i}") for i in range(32)]
    assert await RateLimits(limiters[:31], backend=backend).acheck(CallContext("t")) is None
    with pytest.raises(ConfigurationError, match="at most 31"):
        await RateLimits(limiters, backend=backend).acheck(CallContext("t"))
    await backend.aclose()
