"""Property test: thousands of random arrivals, completions, failures, cancellations and timeouts.

Each example runs a random program against one guard. Calls are real tasks; after every step the
test lets the scheduler settle (``wait_all_tasks_blocked``) and checks the invariants. At the end
every call must be accounted for exactly once, by the test and by the guard's statistics alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
import pytest
from concurrency_support import Call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_guard import ConcurrencyGuard, HandlerTimeout, ServerBusy
from virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

# Virtual time, the guard on the loop's clock: a tick is exactly 3 ms, so an example replays
# exactly (on the real clock, how many deadlines and queue timeouts a tick let expire depended
# on the machine's load, and a failure hypothesis found could not be shrunk reliably).
anyio_backend = virtual_time_backends()

ARRIVE, FINISH, FAIL, CANCEL, TICK = "arrive", "finish", "fail", "cancel", "tick"

steps = st.lists(
    st.tuples(
        st.sampled_from([ARRIVE] * 4 + [FINISH] * 2 + [FAIL, CANCEL, TICK]),
        st.integers(0, 1000),  # which call (modulo the candidates)
        st.booleans(),  # for an arrival: does the handler have a short deadline?
    ),
    min_size=50,
    max_size=250,
)


@dataclass
class World:
    guard: ConcurrencyGuard
    fifo: bool
    calls: list[Call] = field(default_factory=list)
    waiting: set[int] = field(default_factory=set)
    outcomes: dict[int, str] = field(default_factory=dict)
    just_admitted: list[int] = field(default_factory=list)

    def settle_outcome(self, call: Call, outcome: str) -> None:
        assert call.index not in self.outcomes, "a call ended twice"
        self.outcomes[call.index] = outcome
        self.waiting.discard(call.index)

    async def run_call(self, call: Call, deadline: float | None) -> None:
        self.waiting.add(call.index)
        outcome = "cancelled"
        with call.scope:
            try:
                async with self.guard.slot(deadline) as slot:
                    self.admitted(call, slot._start)
                    await call.done.wait()
                    if call.fail:
                        raise RuntimeError("handler failed")
                    outcome = "ok"
            except ServerBusy:
                outcome = "shed"
            except HandlerTimeout:
                outcome = "timeout"
            except RuntimeError:
                outcome = "error"
        self.settle_outcome(call, outcome)

    def admitted(self, call: Call, started: float) -> None:
        call.entered = True
        call.started = started  # the guard's own stamp (a scheduler's delay away from now)
        self.waiting.discard(call.index)
        self.just_admitted.append(call.index)

    def check(self) -> None:
        """After a step has settled. The order in which tasks handed a slot in the same step
        *run* is the scheduler's (trio shuffles it), so FIFO is checked per step: whoever got a
        slot arrived before everyone still waiting (no barging, no overtaking)."""
        if self.fifo and self.just_admitted and self.waiting:
            assert max(self.just_admitted) < min(self.waiting)
        self.just_admitted.clear()
        guard = self.guard
        assert 0 <= guard.active <= guard.max_active
        assert 0 <= guard.queued <= guard.max_queue
        assert guard.queued == len(self.waiting)
        if guard.queued:
            assert guard.active == guard.max_active  # a free slot never coexists with waiters
        # Re-judged waiters leave the queue as they are marked; granted ones as they are handed.
        assert not any(w.left or w.granted for w in guard._core.waiters)
        # The in-flight bound: no call holding a slot started after the latest start.
        running = [c.started for c in self.calls if c.entered and c.index not in self.outcomes]
        assert not running or guard._core.latest_start >= max(running)


async def drive(world: World, program: list[tuple[str, int, bool]]) -> None:
    async with anyio.create_task_group() as tg:
        for action, pick, short_deadline in program:
            live = [c for c in world.calls if c.index not in world.outcomes]
            holders = [c for c in live if c.entered]
            if action == ARRIVE:
                call = Call(len(world.calls))
                world.calls.append(call)
                tg.start_soon(world.run_call, call, 0.002 if short_deadline else None)
            elif action in (FINISH, FAIL) and holders:
                call = holders[pick % len(holders)]
                call.fail = action == FAIL
                call.done.set()
            elif action == CANCEL and live:
                live[pick % len(live)].scope.cancel()
            elif action == TICK:
                await anyio.sleep(0.003)  # lets handler deadlines and queue timeouts expire
            await anyio.wait_all_tasks_blocked()
            world.check()
        for call in world.calls:  # wind down: everything still live is cancelled
            call.scope.cancel()


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    program=steps,
    max_active=st.integers(1, 3),
    max_queue=st.integers(0, 8),
    lifo=st.booleans(),
)
async def test_random_programs_keep_every_invariant(
    program: list[tuple[str, int, bool]], max_active: int, max_queue: int, lifo: bool
) -> None:
    guard = ConcurrencyGuard(
        max_active,
        max_queue=max_queue,
        queue_timeout=0.02,
        lifo=lifo,
        standing_after=0.004,
        clock=anyio.current_time,
    )
    world = World(guard, fifo=not lifo)
    await drive(world, program)

    assert (guard.active, guard.queued) == (0, 0)
    assert sorted(world.outcomes) == list(range(len(world.calls)))  # each call exactly once
    counts = {k: list(world.outcomes.values()).count(k) for k in set(world.outcomes.values())}
    stats = guard.statistics()
    entered = sum(c.entered for c in world.calls)
    assert stats.admitted == entered
    assert stats.shed_queue_full + stats.shed_queue_timeout == counts.get("shed", 0)
    assert stats.handler_timeouts == counts.get("timeout", 0)
    never_ran = [c for c in world.calls if not c.entered and world.outcomes[c.index] == "cancelled"]
    assert stats.cancelled_queued == len(never_ran)
