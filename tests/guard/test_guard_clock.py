"""``Guard(clock=)``: the guard on the event loop's clock, so a test runs its waits, deadlines
and rate advice in virtual time (tests/virtual_time.py), exactly and in no real time; and a
clock that is no function refused in one line."""

from __future__ import annotations

import anyio
import pytest

from fusion_guard import ConfigurationError, ErrorCode, Guard
from fusion_guard._clock import FakeClock
from virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

anyio_backend = virtual_time_backends()


async def _ok() -> str:
    return "ok"


async def test_queueing_and_the_deadline_run_in_virtual_time() -> None:
    guard = Guard(
        metrics=False,
        max_active=1,
        max_queue=1,
        queue_timeout=5,
        timeout=50,
        clock=anyio.current_time,
    )
    start = anyio.current_time()
    ended: dict[str, tuple[str | None, float]] = {}

    async def call(name: str) -> None:
        response = await guard.call("t", anyio.sleep_forever)
        ended[name] = (response.code, anyio.current_time() - start)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "held")
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(call, "queued")
    # The hour-long handler is cut at its 50 s deadline, to the (virtual) microsecond.
    assert ended["held"] == (ErrorCode.TIMEOUT, 50.0)
    # The queued call is shed once waiting is no use, within its queue_timeout, never after.
    code, waited = ended["queued"]
    assert code == ErrorCode.SERVER_BUSY
    assert 0.0 < waited <= 5.0


async def test_rate_advice_counts_down_with_the_loops_clock() -> None:
    guard = Guard(metrics=False, rate=1, rate_per=60, clock=anyio.current_time)
    assert (await guard.call("t", _ok)).code is None
    refused = await guard.call("t", _ok)
    assert refused.code == ErrorCode.RATE_LIMITED
    assert refused.facts is not None
    assert refused.facts["retry_after"] == 60.0
    await anyio.sleep(60)
    assert (await guard.call("t", _ok)).code is None  # the promised opening, on time


def test_the_guard_keeps_the_clock_it_is_given_for_its_adapters() -> None:
    clock = FakeClock()
    assert Guard(metrics=False, clock=clock).clock is clock
    assert Guard.from_env(metrics=False, clock=clock).clock is clock


@pytest.mark.parametrize("clock", [5, "monotonic", None])
def test_a_clock_that_is_no_function_is_refused_in_one_line(clock: object) -> None:
    with pytest.raises(ConfigurationError, match=r"^clock=.* is invalid: expected a function"):
        Guard(metrics=False, clock=clock)  # type: ignore[arg-type]
