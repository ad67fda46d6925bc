"""Property: whatever mix of handler behaviours, cancellations and limits, every call is reported
to the observer exactly once, with the outcome its envelope shows, and the guard ends empty."""

from __future__ import annotations

import functools
from collections import Counter

import anyio
import anyio.lowlevel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_guard import ErrorCode, Guard, ToolResponse, tool_error
from fusion_guard.testing import RecordingObserver
from virtual_time import run_virtual

BEHAVIOURS = ("return", "return_error", "raise_error", "crash", "hang", "cancelled")
EXPECTED_OUTCOME = {
    "return": "ok",
    "return_error": "error",
    "raise_error": "error",
    "crash": "internal_error",
    "hang": "timeout",
    "cancelled": "timeout",  # cancelled by the caller, unless its deadline came first
}
REFUSALS = {ErrorCode.RATE_LIMITED: "rate_limited", ErrorCode.SERVER_BUSY: "shed"}


async def handler(behaviour: str) -> object:
    await anyio.lowlevel.checkpoint()  # let the other calls interleave
    if behaviour == "return_error":
        return tool_error("NOT_FOUND", "missing")
    if behaviour == "raise_error":
        raise tool_error("CONFLICT", "taken")
    if behaviour == "crash":
        raise RuntimeError("secret detail")
    if behaviour in ("hang", "cancelled"):
        await anyio.sleep_forever()
    return {"ok": True}


def reported_end(response: ToolResponse) -> str:
    if response.code in REFUSALS:
        return REFUSALS[ErrorCode(response.code)]
    if response.code == ErrorCode.TIMEOUT:
        return "timeout"
    if response.code == ErrorCode.INTERNAL_ERROR:
        return "internal_error"
    return "error" if response.is_error else "ok"


async def scenario(plan: list[str], max_active: int, max_queue: int, burst: int) -> None:
    observer = RecordingObserver()
    guard = Guard(
        max_active=max_active,
        max_queue=max_queue,
        rate=1,
        rate_per=3600,
        burst=burst,
        timeout=0.05,  # in virtual time: only a hanging handler reaches it
        observer=observer,
        metrics=False,
        clock=anyio.current_time,
    )
    results: dict[int, ToolResponse] = {}
    callers: list[anyio.CancelScope] = []

    async def one(index: int, behaviour: str) -> None:
        with anyio.CancelScope() as caller:
            if behaviour == "cancelled":
                callers.append(caller)
            results[index] = await guard.call("tool", handler, behaviour)

    async with anyio.create_task_group() as tg:
        for index, behaviour in enumerate(plan):
            tg.start_soon(one, index, behaviour)
        # A few scheduling rounds let every call reach its slot, queue or handler. (Not
        # wait_all_tasks_blocked: on asyncio it polls every 0.1 s, past the 50 ms deadlines.)
        for _ in range(5):
            await anyio.lowlevel.checkpoint()
        for caller in callers:  # running or queued: both must be freed and reported
            caller.cancel()

    ends = observer.ends("tool")
    assert len(ends) == len(plan)  # exactly one end per call
    unanswered = [index for index in range(len(plan)) if index not in results]
    assert all(plan[index] == "cancelled" for index in unanswered)
    answered = Counter(reported_end(response) for response in results.values())
    assert Counter(ends) == answered + Counter({"cancelled": len(unanswered)})
    for index, response in results.items():  # an admitted call ends as its handler did
        assert reported_end(response) in ("rate_limited", "shed", EXPECTED_OUTCOME[plan[index]])
    events = observer.events["tool"]
    admitted = sum(1 for event in events if event[0] == "admitted")
    # every admitted call finishes with a duration; a call cancelled in the queue, with None
    assert admitted == sum(1 for event in events if event[0] == "finished" and event[2] is not None)
    assert sum(end == "rate_limited" for end in ends) == max(0, len(plan) - burst)
    slots = guard.concurrency("tool")
    assert slots is not None
    assert (slots.active, slots.queued) == (0, 0)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plan=st.lists(st.sampled_from(BEHAVIOURS), min_size=1, max_size=10),
    max_active=st.integers(1, 3),
    max_queue=st.integers(0, 3),
    burst=st.integers(1, 10),
)
def test_every_call_is_reported_exactly_once(
    anyio_backend: str, plan: list[str], max_active: int, max_queue: int, burst: int
) -> None:
    # In virtual time: the 50 ms deadline is reached by a hanging handler only, never by a
    # loaded machine's delay between the calls.
    run_virtual(functools.partial(scenario, plan, max_active, max_queue, burst), anyio_backend)
