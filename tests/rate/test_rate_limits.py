"""Several limits composed: all must admit, a refusal spends nothing, the envelope is private."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from fusion_guard import (
    CallContext,
    ConfigurationError,
    MemoryBackend,
    RateLimited,
    RateLimiter,
    RateLimits,
    parse_tool_error,
)
from fusion_guard.testing import FakeClock

if TYPE_CHECKING:
    from conftest import AsyncOnlyBackend


def _server_and_client(clock: FakeClock) -> RateLimits:
    backend = MemoryBackend(clock)
    return RateLimits(
        [
            RateLimiter(3, burst=3, backend=backend),  # the whole server
            RateLimiter(1, burst=1, scope="client", backend=backend),  # each client
        ]
    )


def test_a_call_passes_only_when_every_limit_admits_it() -> None:
    limits = _server_and_client(FakeClock())
    assert limits.check(CallContext("t", client="alice")) is None
    refused = limits.check(CallContext("t", client="alice"))
    assert isinstance(refused, RateLimited)
    assert refused.scope == "client"
    assert refused.retry_after == pytest.approx(1.0)


def test_a_refusal_by_a_later_limit_spends_no_earlier_budget() -> None:
    limits = _server_and_client(FakeClock())
    assert limits.check(CallContext("t", client="alice")) is None
    for _ in range(10):  # refused by the per-client limit: the server budget must stay intact
        assert limits.check(CallContext("t", client="alice")) is not None
    assert limits.check(CallContext("t", client="bob")) is None
    assert limits.check(CallContext("t", client="carol")) is None
    server_full = limits.check(CallContext("t", client="dave"))
    assert server_full is not None
    assert server_full.scope == "global"


def test_retry_after_is_the_longest_wait_and_then_the_call_passes() -> None:
    clock = FakeClock()
    backend = MemoryBackend(clock)
    limits = RateLimits(
        [
            RateLimiter(2, burst=1, backend=backend),  # global: every 0.5 s
            RateLimiter(1, per=2.0, burst=1, scope="tool", backend=backend),  # per tool: every 2 s
        ]
    )
    assert limits.check(CallContext("a")) is None
    refused = limits.check(CallContext("a"))
    assert refused is not None
    assert refused.scope == "tool"
    assert refused.retry_after == pytest.approx(2.0)
    clock.advance(refused.retry_after)
    assert limits.check(CallContext("a")) is None


def test_the_envelope_is_rate_limited_for_the_tool_and_limit() -> None:
    limits = RateLimits([RateLimiter(10, per=1.0, burst=1, scope="tool", clock=FakeClock())])
    limits.check(CallContext("billing.pay"))
    refused = limits.check(CallContext("billing.pay"))
    assert refused is not None
    response = refused.response
    assert response.is_error
    assert response.code == "RATE_LIMITED"
    info = parse_tool_error(response.text)
    assert info is not None
    assert info.code == "RATE_LIMITED"
    assert info.severity == "error"
    assert info.retry_after == pytest.approx(0.1)
    assert "billing.pay" in info.message
    assert "10 calls per 1 second" in info.message
    assert info.details == {"limit": "10", "period_seconds": "1", "scope": "tool"}


def test_each_refusal_carries_its_own_retry_after() -> None:
    clock = FakeClock()
    limits = RateLimits([RateLimiter(1, per=10.0, clock=clock)])
    limits.check(CallContext("t"))
    first = limits.check(CallContext("t"))
    clock.advance(2.5)
    second = limits.check(CallContext("t"))
    assert first is not None
    assert second is not None
    assert "<retry_after>10 seconds</retry_after>" in first.response.text
    # The opening at 10 s is promised to the first caller: the second is told the next one.
    assert "<retry_after>17.5 seconds</retry_after>" in second.response.text
    assert first.response is not second.response


SECRET = "tenant-7f3a<&>secret@example.com"


@pytest.mark.parametrize("scope", ["client", "tenant"])
def test_the_key_never_appears_in_the_refusal(scope: str) -> None:
    limiter = RateLimiter(1, scope=scope, key=lambda ctx: f"{ctx.client}", clock=FakeClock())
    limits = RateLimits([limiter])
    ctx = CallContext("reports.run", client=SECRET)
    limits.check(ctx)
    refused = limits.check(ctx)
    assert refused is not None
    for text in (refused.response.text, str(refused), repr(refused), repr(limits)):
        for fragment in (SECRET, "tenant-7f3a", "secret@example.com"):
            assert fragment not in text


def test_calls_without_a_client_share_one_anonymous_budget() -> None:
    limits = RateLimits([RateLimiter(1, scope="client", clock=FakeClock())])
    assert limits.check(CallContext("t")) is None
    assert limits.check(CallContext("u")) is not None
    assert limits.check(CallContext("t", client="alice")) is None


def test_per_client_per_tool_with_a_key_function() -> None:
    per_client_tool = RateLimiter(
        1, scope="client", key=lambda ctx: f"{ctx.client}/{ctx.tool}", clock=FakeClock()
    )
    limits = RateLimits([per_client_tool])
    assert limits.check(CallContext("a", client="c1")) is None
    assert limits.check(CallContext("b", client="c1")) is None
    assert limits.check(CallContext("a", client="c2")) is None
    assert limits.check(CallContext("a", client="c1")) is not None


def test_no_limits_admit_everything() -> None:
    limits = RateLimits([])
    assert all(limits.check(CallContext("t")) is None for _ in range(100))


@pytest.mark.anyio
async def test_acheck_decides_like_check() -> None:
    limits = _server_and_client(FakeClock())
    assert await limits.acheck(CallContext("t", client="alice")) is None
    refused = await limits.acheck(CallContext("t", client="alice"))
    assert refused is not None
    assert refused.scope == "client"


@pytest.mark.anyio
async def test_acheck_asks_an_async_backend_once_per_call(
    async_only_backend: AsyncOnlyBackend,
) -> None:
    backend = async_only_backend
    limits = RateLimits([RateLimiter(5, burst=5), RateLimiter(1, scope="client")], backend=backend)
    assert not limits.is_sync
    assert await limits.acheck(CallContext("t", client="a")) is None
    refused = await limits.acheck(CallContext("t", client="a"))
    assert refused is not None
    assert refused.scope == "client"
    assert backend.calls == 2
    with pytest.raises(ConfigurationError, match="acheck"):
        limits.check(CallContext("t"))


def test_the_limiters_backend_is_used_when_they_were_given_one() -> None:
    backend = MemoryBackend(FakeClock())
    limiter = RateLimiter(1, backend=backend)
    limits = RateLimits([limiter])
    assert limits.backend is backend
    assert limiter.try_acquire().allowed  # the same state: the limit is now spent for both
    assert limits.check(CallContext("t")) is not None


def test_the_limiters_common_clock_is_used_by_default() -> None:
    clock = FakeClock()
    limits = RateLimits([RateLimiter(1, clock=clock), RateLimiter(2, scope="tool", clock=clock)])
    limits.check(CallContext("t"))
    assert limits.check(CallContext("t")) is not None
    clock.advance(1.0)
    assert limits.check(CallContext("t")) is None


@pytest.mark.parametrize(
    "make",
    [
        lambda: RateLimits([RateLimiter(1), RateLimiter(1)]),
        lambda: RateLimits(
            [RateLimiter(1, backend=MemoryBackend()), RateLimiter(2, backend=MemoryBackend())]
        ),
        lambda: RateLimits([RateLimiter(1, backend=MemoryBackend())], backend=MemoryBackend()),
        lambda: RateLimits([RateLimiter(1, clock=FakeClock()), RateLimiter(2, clock=FakeClock())]),
        lambda: RateLimits(["10/s"]),  # type: ignore[list-item]
    ],
    ids=["same-name", "two-backends", "backend-mismatch", "two-clocks", "not-a-limiter"],
)
def test_inconsistent_compositions_are_configuration_errors(make: object) -> None:
    with pytest.raises(ConfigurationError):
        make()  # type: ignore[operator]
