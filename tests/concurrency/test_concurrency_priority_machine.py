"""A Hypothesis state machine of mixed priorities and clients, on asyncio and on trio.

The guard runs in an event loop of its own (anyio's blocking portal, in a thread), and every
rule is one step of it, settled (``wait_all_tasks_blocked``) before the invariants are checked:
never more than the limit running, no slot leaked, no lower priority served while a higher one
waited from before the step, no critical call ever displaced from the queue. Virtual time: the
guard's clock moves only when a rule moves it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio
import anyio.abc
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from concurrency_support import Call
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fusion_guard import ConcurrencyGuard, Priority, ServerBusy
from fusion_guard.testing import FakeClock
from virtual_time import virtual_time_options

T = TypeVar("T")

LIMIT = 3
RANKS = {p.value: p.rank for p in Priority}


class EstimatingLimit:
    """An adaptive limit of ``LIMIT`` slots whose estimate of the tool's parallelism is one
    less: once a call has finished, a call below interactive takes a slot only while fewer than
    that hold one, when calls above it are about (``Levels.may_take``)."""

    limit = LIMIT
    parallelism = LIMIT - 1.0

    def on_sample(self, start: float, duration: float, inflight: int, dropped: bool) -> None:
        pass


class PriorityMachine(RuleBasedStateMachine):
    backend = "asyncio"
    adaptive = False
    _group: anyio.abc.TaskGroup

    def __init__(self) -> None:
        super().__init__()
        # asyncio's loop in virtual time: anyio's wait_all_tasks_blocked polls there with 0.1 s
        # sleeps (on the real clock most of the run). trio's is exact, and its autojumping
        # clock slowed the portal's steps twentyfold: trio stays on the real clock.
        options = virtual_time_options("asyncio") if self.backend == "asyncio" else {}
        self._portal_cm = start_blocking_portal(self.backend, options)
        self.portal: BlockingPortal = self._portal_cm.__enter__()
        self.clock = FakeClock()
        slots: dict[str, Any] = (
            {"limit": EstimatingLimit()} if self.adaptive else {"max_active": LIMIT}
        )
        self.guard = ConcurrencyGuard(
            **slots,
            max_queue=5,
            queue_timeout=math.inf,  # calls leave the queue by hand-off, displacement, cancel
            clock=self.clock,
            priority_share=0.34,  # one slot of three below interactive while others come
        )
        self.calls: list[Call] = []
        self.priority: dict[int, str] = {}
        self.running: set[int] = set()
        self.waiting: set[int] = set()  # in the queue at the last settle
        self.outcome: dict[int, str] = {}
        self.admitted_now: list[int] = []
        self.most_running = 0

    def run(self, fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        async def bounded() -> T:
            with anyio.fail_after(10):  # a step that cannot settle is a stuck call: a failure
                return await fn()

        return self.portal.call(bounded)

    async def _settle(self) -> None:
        await anyio.wait_all_tasks_blocked()

    async def _call(self, call: Call, client: str | None, priority: str) -> None:
        with call.scope:
            try:
                async with self.guard.slot(client=client, priority=priority):
                    self.running.add(call.index)
                    self.admitted_now.append(call.index)
                    self.most_running = max(self.most_running, len(self.running))
                    await call.done.wait()
                self.outcome[call.index] = "ok"
            except ServerBusy:
                self.outcome[call.index] = "shed"
            finally:
                self.running.discard(call.index)
        self.outcome.setdefault(call.index, "cancelled")

    def _step(self, action: Callable[[], None]) -> None:
        """Run ``action`` in the loop, settle, then judge who was admitted in this step."""
        waited_before = {i for i in self.waiting if i not in self.outcome}

        async def step() -> None:
            action()
            await self._settle()

        self.admitted_now.clear()
        self.run(step)
        for index in self.admitted_now:
            rank = RANKS[self.priority[index]]
            overtaken = [
                other
                for other in waited_before
                if RANKS[self.priority[other]] < rank
                and other not in self.running
                and other not in self.outcome
            ]
            assert not overtaken, f"{self.priority[index]} call served before {overtaken}"
        for index in waited_before:
            if self.priority[index] == "critical" and self.outcome.get(index) == "shed":
                raise AssertionError("a queued critical call was displaced")
        self.waiting = {
            call.index
            for call in self.calls
            if call.index not in self.running and call.index not in self.outcome
        }

    @rule(
        priority=st.sampled_from([p.value for p in Priority]),
        client=st.sampled_from([None, "a", "b", "c"]),
    )
    def arrive(self, priority: str, client: str | None) -> None:
        call = self.run(self._new_call)  # its scope and event belong to the loop
        self.calls.append(call)
        self.priority[call.index] = priority
        self._step(lambda: self.portal_task(call, client, priority))

    async def _new_call(self) -> Call:
        return Call(len(self.calls))

    def portal_task(self, call: Call, client: str | None, priority: str) -> None:
        self._group.start_soon(self._call, call, client, priority)

    @precondition(lambda self: bool(self.running))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        index = data.draw(st.sampled_from(sorted(self.running)))
        self._step(self.calls[index].done.set)

    @precondition(lambda self: bool(self.waiting))
    @rule(data=st.data())
    def cancel_a_waiter(self, data: st.DataObject) -> None:
        index = data.draw(st.sampled_from(sorted(self.waiting)))
        self._step(self.calls[index].scope.cancel)

    @rule()
    def time_passes(self) -> None:
        self.clock.advance(1.0)  # interactive arrivals are no longer recent

    @invariant()
    def never_more_than_the_limit(self) -> None:
        assert self.most_running <= LIMIT
        assert self.guard.active == len(self.running) or self.waiting
        assert self.guard.active <= LIMIT

    def teardown(self) -> None:
        try:

            async def drain() -> None:
                for call in self.calls:
                    call.done.set()
                    call.scope.cancel() if call.index in self.waiting else None
                await self._settle()
                await self._settle()

            self.run(drain)
            assert (self.guard.active, self.guard.queued) == (0, 0), "a slot leaked"

            async def all_slots_for_background() -> None:
                # No count of a priority's calls left behind: once nothing above them came
                # lately, calls below interactive take every slot.
                self.clock.advance(1e6)
                async with (
                    self.guard.slot(priority="background"),
                    self.guard.slot(priority="background"),
                    self.guard.slot(priority="background"),
                ):
                    assert self.guard.active == LIMIT

            self.run(all_slots_for_background)
            assert set(self.outcome) == {call.index for call in self.calls}
        finally:
            self.run(self._close_group)
            self._hosting.result()
            self._portal_cm.__exit__(None, None, None)

    async def _host(self, *, task_status: anyio.abc.TaskStatus[anyio.abc.TaskGroup]) -> None:
        """The task group the calls run in, open across the steps, until ``_stop``."""
        self._stop = anyio.Event()
        async with anyio.create_task_group() as group:
            task_status.started(group)
            await self._stop.wait()
            group.cancel_scope.cancel()

    async def _close_group(self) -> None:
        self._stop.set()


def _machine(backend: str, adaptive: bool) -> type[PriorityMachine]:
    class Machine(PriorityMachine):
        def __init__(self) -> None:
            self.backend = backend
            self.adaptive = adaptive
            super().__init__()
            self._hosting, self._group = self.portal.start_task(self._host)

    return Machine


@pytest.mark.parametrize("adaptive", [False, True], ids=["fixed", "parallelism"])
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_mixed_priorities_and_clients(backend: str, adaptive: bool) -> None:
    machine = _machine(backend, adaptive)
    machine.TestCase.settings = settings(
        max_examples=50,
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    machine.TestCase().runTest()
