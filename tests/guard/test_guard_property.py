"""Property: whatever mix of handler behaviours and limits, every call is reported to the
observer exactly once, with the outcome its envelope shows, and the guard ends empty."""

from __future__ import annotations

from collections import Counter

import anyio
import anyio.lowlevel
from guard_recorder import RecordingObserver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_guard import ErrorCode, Guard, ToolResponse, tool_error

BEHAVIOURS = ("return", "return_error", "raise_error", "crash", "hang")
EXPECTED_OUTCOME = {
    "return": "ok",
    "return_error": "error",
    "raise_error": "error",
    "crash": "internal_error",
    "hang": "timeout",
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
    if behaviour == "hang":
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
        timeout=0.01,
        observer=observer,
        metrics=False,
    )
    results: dict[int, ToolResponse] = {}

    async def one(index: int, behaviour: str) -> None:
        results[index] = await guard.call("tool", handler, behaviour)

    async with anyio.create_task_group() as tg:
        for index, behaviour in enumerate(plan):
            tg.start_soon(one, index, behaviour)

    ends = observer.ends("tool")
    assert len(ends) == len(plan)  # exactly one end per call
    assert Counter(ends) == Counter(reported_end(response) for response in results.values())
    for index, behaviour in enumerate(plan):  # an admitted call ends as its handler did
        end = reported_end(results[index])
        assert end in ("rate_limited", "shed", EXPECTED_OUTCOME[behaviour])
    admitted = sum(1 for event in observer.events["tool"] if event[0] == "admitted")
    assert admitted == sum(1 for end in ends if end not in ("rate_limited", "shed"))
    assert sum(end == "rate_limited" for end in ends) == max(0, len(plan) - burst)
    slots = guard.concurrency("tool")
    assert slots is not None
    assert (slots.active, slots.queued) == (0, 0)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
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
    anyio.run(scenario, plan, max_active, max_queue, burst, backend=anyio_backend)
