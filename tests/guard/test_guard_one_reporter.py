"""One reporter of a call's end, one owner of its deadline: the call's slot (the tool's, or an
always free one for a tool without a concurrency limit), which reports the outcome its leaver
hands it. A bare guard's caller and the Guard's tickets end their calls the same way."""

from __future__ import annotations

import warnings

import anyio
import pytest

from fusion_guard import ConcurrencyGuard, ErrorCode, Guard, HandlerTimeout, ServerBusy
from fusion_guard.admission._unbounded import Unbounded
from fusion_guard.testing import RecordingObserver

pytestmark = pytest.mark.anyio


def _bare(observer: RecordingObserver, **kwargs: object) -> ConcurrencyGuard:
    return ConcurrencyGuard(1, name="t", observer=observer.for_tool("t", max_active=1), **kwargs)  # type: ignore[arg-type]


async def test_a_bare_slot_reports_the_outcome_its_leaver_hands_it(
    observer: RecordingObserver,
) -> None:
    guard = _bare(observer)
    slot = guard.slot()
    await slot.__aenter__()
    assert not slot.leave(None, None, None, "error")  # an error envelope answered: no exception
    async with guard.slot():
        pass
    with pytest.raises(RuntimeError):
        async with guard.slot():
            raise RuntimeError("boom")
    assert observer.ends("t") == ["error", "ok", "internal_error"]
    assert guard.active == 0


async def test_the_guard_reports_each_end_once_through_the_slot(
    observer: RecordingObserver,
) -> None:
    guard = Guard(
        metrics=False, max_active="off", tools={"slots": {"max_active": 1}}, observer=observer
    )
    for tool in ("slots", "none"):  # a tool with slots and one without: the same reports
        async with guard.admit(tool) as ticket:
            ticket.outcome = "error"
        async with guard.admit(tool) as ticket:
            ticket.complete("internal_error")
            ticket.complete("ok")  # reported once: the first word stands
        with pytest.raises(ValueError, match="bad"):
            async with guard.admit(tool):
                raise ValueError("bad")
        assert observer.ends(tool) == ["error", "internal_error", "internal_error"]
        finished = [event for event in observer.events[tool] if event[0] == "finished"]
        assert all(event[2] is not None and event[2] >= 0 for event in finished)
    assert guard.concurrency("none") is None


async def test_a_tool_without_slots_keeps_its_deadline_in_an_unbounded_slot(
    observer: RecordingObserver,
) -> None:
    unbounded = Unbounded("t", observer.for_tool("t", max_active=None))
    with pytest.raises(HandlerTimeout) as raised:
        async with unbounded.slot(0.01):
            await anyio.sleep_forever()
    assert raised.value.response.code == ErrorCode.TIMEOUT
    async with unbounded.slot(None) as slot:  # no deadline: nothing to tell apart
        assert slot.queue_wait == 0.0
    assert observer.ends("t") == ["timeout", "ok"]
    assert [event[0] for event in observer.events["t"]].count("admitted") == 2


async def test_reports_finished_false_is_deprecated_and_keeps_its_meaning(
    observer: RecordingObserver,
) -> None:
    with pytest.warns(DeprecationWarning, match="reports_finished"):
        guard = _bare(observer, reports_finished=False)
    assert not guard.reports_finished
    async with guard.slot():
        pass
    assert observer.ends("t") == []  # the caller reports the ends itself
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not given: no warning
        assert _bare(RecordingObserver()).reports_finished


async def test_completing_a_refused_ticket_reports_nothing_more(
    observer: RecordingObserver,
) -> None:
    guard = Guard(metrics=False, max_active=2, max_active_per_client=1, observer=observer)
    async with guard.admit("t", client="a"):
        ticket = guard.admit("t", client="a")
        with pytest.raises(ServerBusy):  # over its client's cap: refused as it takes its slot
            await ticket.__aenter__()
        ticket.complete("ok")  # its slot was never held: nothing to report
    assert observer.ends("t") == ["shed", "ok"]
