"""A Guard's lifecycle: ``async with Guard(...)`` and ``await guard.aclose()`` close what it
opened, once; a closed guard refuses every call with ``GuardClosed``; ``guard.lifespan()`` (what
the SDK adapters put around their server's lifespan) closes it when the last server stops and
lets it open again. With Redis, a small program under ``python -X dev -W
error::ResourceWarning`` leaves nothing open, through the Guard alone and through each adapter.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from fusion_guard import (
    Guard,
    GuardClosed,
    RedisRateLimitBackend,
    success,
)
from fusion_guard._gates import GateAssembly

PROGRAM = Path(__file__).with_name("redis_lifecycle_program.py")
STRICT = ("-X", "dev", "-W", "error::ResourceWarning")  # Python's development mode


async def work() -> str:
    return "ok"


@pytest.mark.anyio
async def test_async_with_closes_once_and_then_refuses_every_call() -> None:
    async with Guard(max_active=2, metrics=False) as guard:
        assert await guard.call("search", work) == success("ok")
        assert not guard.closed
    assert guard.closed
    await guard.aclose()  # idempotent
    protected = guard.protect("search")(work)
    with pytest.raises(GuardClosed, match="closed"):
        await guard.call("search", work)
    with pytest.raises(GuardClosed):
        await protected()
    with pytest.raises(GuardClosed):
        async with guard.admit("search"):
            pass
    with pytest.raises(GuardClosed):
        async with guard:
            pass
    with pytest.raises(GuardClosed):
        async with guard.lifespan():
            pass
    assert guard.concurrency("search") is not None  # its figures stay readable


@pytest.mark.anyio
async def test_a_lifespan_closes_when_the_last_server_stops_and_the_guard_stays_open() -> None:
    guard = Guard(max_active=2, metrics=False)
    async with guard.lifespan():
        async with guard.lifespan():  # two servers on one guard
            assert await guard.call("search", work) == success("ok")
        assert await guard.call("search", work) == success("ok")
    async with guard.lifespan():  # started again
        assert await guard.call("search", work) == success("ok")
    assert not guard.closed


@pytest.mark.anyio
async def test_closing_logs_the_summaries_still_owed(caplog: pytest.LogCaptureFixture) -> None:
    # The default log events sample refusals: what a window swallowed is told when it ends, or
    # when the guard closes (so no count is lost at shutdown).
    guard = Guard(max_active=1, max_queue=0, metrics=False)
    slots = guard.concurrency("search")
    assert slots is not None
    slots.acquire_nowait()  # the one slot, held: every call is refused
    caplog.set_level(logging.INFO, logger="fusion_guard")
    for _ in range(3):
        await guard.call("search", work)
    assert [r.getMessage().split()[0] for r in caplog.records] == ["call_shed"]
    await guard.aclose()
    summary = caplog.records[-1]
    assert summary.getMessage().startswith("call_events_suppressed")
    assert summary.fields["count"] == 2  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_a_connection_failing_to_close_is_logged_not_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # At a server's stop an error here would replace the stop's own: it is logged instead.
    async def failing(self: GateAssembly, gates: object) -> None:
        raise ConnectionResetError("reset by peer")

    monkeypatch.setattr(GateAssembly, "aclose", failing)
    guard = Guard(metrics=False)
    caplog.set_level(logging.WARNING, logger="fusion_guard")
    async with guard.lifespan():
        pass
    await guard.aclose()
    assert [r.getMessage().split()[0] for r in caplog.records] == ["guard_close_failed"] * 2
    assert guard.closed


@pytest.mark.parametrize("mode", ["guard", "mcp", "fastmcp"])
def test_a_redis_backed_program_leaves_nothing_open(redis_url: str, mode: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-X",
            "dev",
            "-W",
            "error::ResourceWarning",
            str(PROGRAM),
            redis_url,
            mode,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    # -X dev also reports slow callbacks ("Executing ... took"): timing, not a leak.
    leaks = ("ResourceWarning", "nclosed", "Exception ignored", "never awaited", "destroyed")
    reported = [line for line in done.stderr.splitlines() if any(w in line for w in leaks)]
    assert not reported, done.stderr


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # redis-py is asyncio-only
@pytest.mark.anyio
async def test_a_rate_backend_given_to_the_guard_stays_open(redis_url: str) -> None:
    # On database 8, so that CLIENT LIST tells this test's connections apart.
    url = redis_url.rsplit("/", 1)[0] + "/8"
    backend = RedisRateLimitBackend(url)
    guard = Guard(backend="redis", redis_url=url, rate_backend=backend, max_active=2, rate=100)
    assert await guard.call("search", work) == success("ok")
    opened = _connected(redis_url, "8")
    assert opened > 0
    await guard.aclose()
    # The fleet slots ran on the given backend's connection: both are the caller's to close.
    assert _connected(redis_url, "8") == opened
    await backend.aclose()
    assert _connected(redis_url, "8") == 0


def _connected(url: str, database: str) -> int:
    import redis

    with redis.Redis.from_url(url) as checker:
        return sum(client.get("db") == database for client in checker.client_list())
