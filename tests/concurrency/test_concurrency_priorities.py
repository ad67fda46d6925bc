"""Priorities in the queue: highest first, fair inside one, the lowest gives way, a share of the
slots for the calls below ``interactive``, and the admission level a refusal says."""

from __future__ import annotations

import anyio
import pytest
from concurrency_support import envelope_details

from fusion_guard import ConcurrencyGuard, ConfigurationError, Priority, ServerBusy
from fusion_guard.testing import FakeClock

pytestmark = pytest.mark.anyio


async def _hold(guard: ConcurrencyGuard, order: list[str], name: str, **kw: object) -> None:
    async with guard.slot(**kw):  # type: ignore[arg-type]
        order.append(name)


async def test_waiting_calls_are_served_highest_priority_first() -> None:
    guard = ConcurrencyGuard(max_active=1, max_queue=10, priority_share=1.0)
    order: list[str] = []
    holder = guard.acquire_nowait()
    async with anyio.create_task_group() as tasks:
        for name, priority in [
            ("s", "sheddable"),
            ("b", Priority.BACKGROUND),
            ("i", None),
            ("c", "critical"),
            ("i2", "interactive"),
        ]:
            tasks.start_soon(lambda n=name, p=priority: _hold(guard, order, n, priority=p))
            await anyio.wait_all_tasks_blocked()
        holder.release()
    assert order == ["c", "i", "i2", "b", "s"]


async def test_clients_take_turns_inside_one_priority() -> None:
    guard = ConcurrencyGuard(max_active=1, max_queue=10, priority_share=1.0)
    order: list[str] = []
    holder = guard.acquire_nowait()
    async with anyio.create_task_group() as tasks:
        for name, client in [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b")]:
            tasks.start_soon(
                lambda n=name, c=client: _hold(guard, order, n, client=c, priority="background")
            )
            await anyio.wait_all_tasks_blocked()
        holder.release()
    assert order[0] == "b1"  # a newcomer lighter than a: its first call does not wait behind them


async def test_interactive_clients_near_even_are_served_oldest_first() -> None:
    """Above ``background`` the oldest call goes first while its client weighs at most twice the
    client next in turn (and a call): turns put a call behind later ones, whose own service may
    be long (the interactive p99, docs/priorities-measured.md). A greedy client still waits."""
    guard = ConcurrencyGuard(max_active=1, max_queue=20, priority_share=1.0)
    order: list[str] = []
    holder = guard.acquire_nowait()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: _hold(guard, order, "bg", client="x", priority="background"))
        await anyio.wait_all_tasks_blocked()
        calls = [("a1", "a"), ("b1", "b"), ("a2", "a"), ("b2", "b"), ("c1", "c")]
        calls += [(f"g{n}", "g") for n in range(1, 5)] + [("d1", "d")]
        for name, client in calls:
            tasks.start_soon(lambda n=name, c=client: _hold(guard, order, n, client=c))
            await anyio.wait_all_tasks_blocked()
        holder.release()
    # Taking turns, c1 (a newcomer lighter than a, at the head) would have gone first.
    assert order[:5] == ["a1", "b1", "a2", "b2", "c1"]
    # Then g, four calls waiting, is next in turn, d behind it: once g is served, it weighs
    # more than twice d, and d1 is not left behind all of g's calls.
    assert order[5:8] == ["g1", "d1", "g2"]
    assert order[-1] == "bg"


async def test_a_higher_priority_arrival_displaces_the_lowest_newest_waiter() -> None:
    guard = ConcurrencyGuard(max_active=1, max_queue=2, priority_share=1.0)
    answers: dict[str, str] = {}

    async def call(name: str, priority: str) -> None:
        try:
            async with guard.slot(priority=priority):
                answers[name] = "ok"
        except ServerBusy as busy:
            answers[name] = busy.response.text

    holder = guard.acquire_nowait()
    async with anyio.create_task_group() as tasks:
        for name, priority in [("b1", "background"), ("b2", "background"), ("i", "interactive")]:
            tasks.start_soon(call, name, priority)
            await anyio.wait_all_tasks_blocked()
        details = envelope_details(answers["b2"])
        assert details["reason"] == "queue_full"
        assert list(details)[-2:] == ["priority", "admitting"]  # after the standard ones
        assert (details["priority"], details["admitting"]) == ("background", "critical,interactive")
        holder.release()
    assert answers["i"] == answers["b1"] == "ok"


async def test_critical_calls_are_never_displaced() -> None:
    guard = ConcurrencyGuard(max_active=1, max_queue=1, priority_share=1.0)
    refused: list[str] = []
    admitting: list[str] = []

    async def call(name: str, priority: str) -> None:
        try:
            async with guard.slot(priority=priority):
                pass
        except ServerBusy as busy:
            refused.append(name)
            admitting.append(envelope_details(busy.response.text)["admitting"])

    holder = guard.acquire_nowait()
    async with anyio.create_task_group() as tasks:
        for name in ("c1", "c2"):
            tasks.start_soon(call, name, "critical")
            await anyio.wait_all_tasks_blocked()
        assert refused == ["c2"]  # refused at arrival; c1 kept its place
        holder.release()
    assert (refused, admitting) == (["c2"], ["none"])


async def test_calls_below_interactive_hold_a_share_while_interactive_ones_come() -> None:
    clock = FakeClock()
    guard = ConcurrencyGuard(max_active=4, max_queue=10, clock=clock, priority_share=0.5)
    release = anyio.Event()
    running: list[str] = []

    async def call(name: str, priority: str) -> None:
        async with guard.slot(priority=priority):
            running.append(name)
            await release.wait()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(call, "i", "interactive")
        await anyio.wait_all_tasks_blocked()
        for n in range(4):
            tasks.start_soon(call, f"b{n}", "background")
            await anyio.wait_all_tasks_blocked()
        # Half of the 4 slots for background while an interactive call arrived lately: one slot
        # stays free for the next interactive call.
        assert running == ["i", "b0", "b1"]
        assert (guard.active, guard.queued) == (3, 2)
        tasks.start_soon(call, "i2", "interactive")
        await anyio.wait_all_tasks_blocked()
        assert running[-1] == "i2"
        release.set()
    assert sorted(running) == ["b0", "b1", "b2", "b3", "i", "i2"]


class _Estimating:
    """An adaptive limit of 3 slots whose estimate of the tool's parallelism is 2 calls."""

    limit = 3
    parallelism = 2.0

    def on_sample(self, start: float, duration: float, inflight: int, dropped: bool) -> None:
        pass


async def _estimated(clock: FakeClock) -> ConcurrencyGuard:
    """A guard under ``_Estimating``, its estimate put in force by a first finished call of
    0.1 s (the mean hold: what "arrived lately" means)."""
    guard = ConcurrencyGuard(limit=_Estimating(), max_queue=10, clock=clock)
    async with guard.slot():
        clock.advance(0.1)
    return guard


async def test_below_interactive_no_call_waits_inside_the_tool_while_calls_above_come() -> None:
    # The slots the limit keeps above the tool's parallelism stay for the calls above: a
    # background call holding one waits inside the tool, and an interactive call handed a slot
    # behind it waits there too (docs/priorities.md, "No waiting inside the tool").
    clock = FakeClock()
    guard = await _estimated(clock)
    release = {name: anyio.Event() for name in ("i", "b0", "b1", "i2", "b2")}
    running: list[str] = []

    async def call(name: str, priority: str) -> None:
        async with guard.slot(priority=priority):
            running.append(name)
            await release[name].wait()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(call, "i", "interactive")
        await anyio.wait_all_tasks_blocked()
        for name in ("b0", "b1"):
            tasks.start_soon(call, name, "background")
            await anyio.wait_all_tasks_blocked()
        # Two calls hold a slot, as many as the tool serves at once: b1 waits in the guard,
        # and the third slot stays free for the next interactive call.
        assert running == ["i", "b0"]
        assert (guard.active, guard.queued) == (2, 1)
        tasks.start_soon(call, "i2", "interactive")
        await anyio.wait_all_tasks_blocked()
        assert running[-1] == "i2"
        release["i"].set()  # two still hold one: the slot freed is kept
        await anyio.wait_all_tasks_blocked()
        assert (guard.active, guard.queued) == (2, 1)
        release["b0"].set()  # one holds one: b1 is handed the slot freed
        await anyio.wait_all_tasks_blocked()
        assert running[-1] == "b1"
        clock.advance(1.0)  # no call above came lately: background may use every slot
        tasks.start_soon(call, "b2", "background")
        await anyio.wait_all_tasks_blocked()
        assert running[-1] == "b2"
        assert guard.active == 3  # i2, b1, b2
        for event in release.values():
            event.set()


async def test_a_kept_slot_free_again_goes_to_the_calls_waiting_not_to_a_newcomer() -> None:
    # Taken by whoever arrives next, a slot kept for the calls above went mostly to the client
    # that sends most: the one whose call waits must have it first, in turn.
    clock = FakeClock()
    guard = await _estimated(clock)
    release = anyio.Event()
    running: list[str] = []

    async def call(name: str, priority: str, client: str) -> None:
        async with guard.slot(priority=priority, client=client):
            running.append(name)
            await release.wait()

    async with anyio.create_task_group() as tasks:
        for name, priority, client in [
            ("i", "interactive", "chat"),
            ("big", "background", "big"),
            ("small", "background", "small"),
        ]:
            tasks.start_soon(call, name, priority, client)
            await anyio.wait_all_tasks_blocked()
        assert (running, guard.queued) == (["i", "big"], 1)  # the third slot kept
        clock.advance(1.0)  # no call above came lately: the kept slot may go to background
        tasks.start_soon(call, "big2", "background", "big")
        await anyio.wait_all_tasks_blocked()
        assert running == ["i", "big", "small"]  # the waiting call's, not the newcomer's
        assert (guard.active, guard.queued) == (3, 1)
        release.set()
    assert running[-1] == "big2"


async def test_by_default_calls_below_interactive_may_take_every_free_slot() -> None:
    # Strict priority alone (priority_share 1): a share of the limit idled workers at a limit
    # near the tool's parallelism and held nothing back at twice it (docs/priorities.md).
    clock = FakeClock()
    guard = ConcurrencyGuard(max_active=3, max_queue=10, clock=clock)
    done = {name: anyio.Event() for name in ("i", "b0", "b1", "b2", "i2")}
    running: list[str] = []

    async def call(name: str, priority: str) -> None:
        async with guard.slot(priority=priority):
            running.append(name)
            await done[name].wait()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(call, "i", "interactive")
        await anyio.wait_all_tasks_blocked()
        for n in range(3):  # an interactive call arrived just now: the free slots go all the same
            tasks.start_soon(call, f"b{n}", "background")
            await anyio.wait_all_tasks_blocked()
        assert running == ["i", "b0", "b1"]
        assert (guard.active, guard.queued) == (3, 1)
        tasks.start_soon(call, "i2", "interactive")
        await anyio.wait_all_tasks_blocked()
        done["b0"].set()  # the slot freed goes to the interactive call, ahead of b2
        await anyio.wait_all_tasks_blocked()
        assert running == ["i", "b0", "b1", "i2"]
        for event in done.values():
            event.set()
    assert running[-1] == "b2"


async def test_alone_calls_below_interactive_use_every_slot() -> None:
    clock = FakeClock()
    guard = ConcurrencyGuard(max_active=2, max_queue=10, clock=clock, priority_share=0.5)
    async with guard.slot(priority="background"), guard.slot(priority="background"):
        assert guard.active == 2  # no call above them came: the share does not hold them


async def test_retry_after_is_for_the_refused_calls_own_priority() -> None:
    clock = FakeClock()
    guard = ConcurrencyGuard(max_active=1, max_queue=10, queue_timeout=3.0, clock=clock)
    async with guard.slot():
        clock.advance(1.0)  # a measured hold of 1 s: one opening a second
    holder = guard.acquire_nowait()
    advice: dict[str, float] = {}

    async def call(name: str, priority: str) -> None:
        try:
            async with guard.slot(priority=priority):
                pass
        except ServerBusy as busy:
            advice[name] = busy.retry_after

    async with anyio.create_task_group() as tasks:
        for name, priority in [("s0", "sheddable"), ("s1", "sheddable"), ("s2", "sheddable")]:
            tasks.start_soon(call, name, priority)
            await anyio.wait_all_tasks_blocked()
        assert set(advice) == {"s2"}  # predicted to miss its 3 s behind two more
        for name in ("i0", "i1", "i2"):
            tasks.start_soon(call, name, "interactive")
            await anyio.wait_all_tasks_blocked()
        # Served before the sheddable ones, which the interactive arrivals made late (re-judged
        # by the wait they now face); i2 itself late behind i0 and i1.
        assert set(advice) == {"s0", "s1", "s2", "i2"}
        # The interactive call waits out the two interactive calls ahead, not the sheddable
        # ones behind them nor the sheddable refusal's promise.
        assert advice["i2"] == pytest.approx(3.0)
        assert advice["s2"] == pytest.approx(3.0)
        tasks.cancel_scope.cancel()
    holder.release()


def test_a_bad_priority_is_one_line() -> None:
    guard = ConcurrencyGuard(max_active=1)
    with pytest.raises(ConfigurationError, match=r"^priority='urgent' is invalid: expected one"):
        guard.slot(priority="urgent")
    with pytest.raises(ConfigurationError, match=r"^priority_share=0 is invalid"):
        ConcurrencyGuard(max_active=1, priority_share=0)
    with pytest.raises(ConfigurationError, match=r"^priority_share=2 is invalid"):
        ConcurrencyGuard(max_active=1, priority_share=2)


async def test_no_priority_anywhere_keeps_no_levels() -> None:
    guard = ConcurrencyGuard(max_active=1)
    async with guard.slot(priority="interactive"):  # the default: a plain slot
        assert type(guard.slot()).__name__ == "Slot"
