"""Every extreme the settings accept works on both backends: the limit holds (a refusal where one
is due), never an INTERNAL_ERROR nor a Redis script failure (``closed``: a failure would shed).

On Redis, ``RATE_PER >= 1e15``, ``RATE=1e-300`` or a lease of 1e16 once made the Lua scripts fail
(and the limit open); the settings now refuse them (tests/config/test_config_bounds.py).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import anyio
import hypothesis
import pytest
from hypothesis import strategies as st

from fusion_guard import ConfigurationError, Guard
from fusion_guard._bounds import (
    MAX_CALLS_PER_SECOND,
    MAX_LEASE,
    MAX_SPAN,
    lease_floor,
    rate_problem,
)
from fusion_guard._setting_names import DEFAULT_TIMEOUT

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

BACKENDS = ["memory", "redis"]


def _guard(request: pytest.FixtureRequest, backend: str, **limits: Any) -> Guard:
    if backend == "redis":
        url = request.getfixturevalue("redis_url")
        limits |= {"backend": "redis", "redis_url": url, "redis_failure_policy": "closed"}
    return Guard(metrics=False, redis_timeout=DEFAULT_TIMEOUT, **limits)


async def _ok() -> str:
    return "ok"


RATES = {
    "slowest interval": {"rate": 1, "rate_per": MAX_SPAN, "burst": 1},
    "fastest rate": {"rate": MAX_CALLS_PER_SECOND, "burst": 1},
    "fastest rate, widest burst": {
        "rate": MAX_CALLS_PER_SECOND,
        "burst": int(MAX_SPAN * MAX_CALLS_PER_SECOND) + 1,
    },
    "longest period, automatic burst": {
        "rate": MAX_SPAN * MAX_CALLS_PER_SECOND,
        "rate_per": MAX_SPAN,
    },
    "widest burst": {"rate": 1, "burst": int(MAX_SPAN) + 1},
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", RATES)
async def test_every_accepted_rate_admits_then_holds(
    request: pytest.FixtureRequest, backend: str, case: str
) -> None:
    guard = _guard(request, backend, max_active="off", **RATES[case])
    first = await guard.call("tool", _ok)
    assert (first.is_error, first.text) == (False, "ok")
    if RATES[case].get("burst") == 1:  # the next call is due a year (or 10 us) later
        second = await guard.call("tool", _ok)
        if case == "slowest interval":
            assert second.code == "RATE_LIMITED"
        else:  # 10 us: refused, or admitted once they passed; never a failure
            assert second.code in {"RATE_LIMITED", None}


@pytest.mark.parametrize("lease", [lease_floor(DEFAULT_TIMEOUT), MAX_LEASE])
async def test_every_accepted_lease_keeps_the_fleet_limit(
    request: pytest.FixtureRequest, lease: float
) -> None:
    # Two replicas, a fleet limit of one: the second is refused while the first's call runs
    # past the shortest lease (its lease refreshed, not lapsed: a lapse let it in).
    one, other = (
        _guard(request, "redis", max_active=1, max_queue=0, queue_timeout=0.2, redis_lease=lease)
        for _ in range(2)
    )
    entered, leave = anyio.Event(), anyio.Event()

    async def held() -> str:
        entered.set()
        await leave.wait()
        return "ok"

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(one.call, "tool", held)
        await entered.wait()
        await anyio.sleep(lease_floor(DEFAULT_TIMEOUT) * 1.5)
        assert (await other.call("tool", _ok)).code == "SERVER_BUSY"
        leave.set()
    assert (await other.call("tool", _ok)).text == "ok"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_huge_number_of_slots_works(request: pytest.FixtureRequest, backend: str) -> None:
    guard = _guard(request, backend, max_active=10**18, max_queue=10**18, timeout=1e300)
    assert (await guard.call("tool", _ok)).text == "ok"


_tools = itertools.count()


async def _works_on_both_backends(url: str, limits: dict[str, Any]) -> None:
    tool = f"t{next(_tools)}"
    redis = {"backend": "redis", "redis_url": url, "redis_failure_policy": "closed"}
    for backend in ({}, redis):  # closed: a script failure would be SERVER_BUSY
        guard = Guard(metrics=False, max_active="off", **backend, **limits)
        codes = [(await guard.call(tool, _ok)).code for _ in range(3)]
        assert codes[0] is None
        assert set(codes) <= {None, "RATE_LIMITED"}
        if limits["rate_per"] / limits["rate"] >= 1:  # no opening between the calls
            admitted = min(3, limits["burst"] or max(1, math.ceil(limits["rate"])))
            assert codes == [None] * admitted + ["RATE_LIMITED"] * (3 - admitted)


@hypothesis.settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture],
)
@hypothesis.given(
    calls_per_second=st.floats(-9, 7).map(lambda exponent: 10**exponent),
    per=st.floats(-4, 9).map(lambda exponent: 10**exponent),
    burst=st.none() | st.integers(1, 10**15),
)
def test_any_rate_is_refused_at_start_up_or_works_on_both_backends(
    redis_url: str, calls_per_second: float, per: float, burst: int | None
) -> None:
    limits = {"rate": calls_per_second * per, "rate_per": per, "burst": burst}
    if per > MAX_SPAN or rate_problem(calls_per_second * per, per, burst) is not None:
        with pytest.raises(ConfigurationError) as caught:
            Guard(metrics=False, **limits)  # type: ignore[arg-type]
        assert "\n" not in str(caught.value)
        return
    anyio.run(_works_on_both_backends, redis_url, limits, backend="asyncio")
