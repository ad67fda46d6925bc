"""A composed permit (``ConcurrencyGuard(permit=...)``): taken after the local slot, given back
before it, a permit not had in time refused by the guard (``TimeoutError``); whatever the mix
of calls, permits refused, failing and cancellations, every permit taken is given back once and
the guard ends empty. On asyncio and trio (a user's permit need not be Redis)."""

from __future__ import annotations

import itertools

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_guard import ConcurrencyGuard, ConfigurationError, Permit, ServerBusy
from fusion_guard.testing import RecordingObserver
from virtual_time import virtual_time_backends

pytestmark = pytest.mark.anyio

anyio_backend = virtual_time_backends()  # a stalled give-back is 0.2 s exactly, a hold 0


class CountingPermit:
    """A permit of ``capacity`` tokens; ``refuse`` makes takes answer SERVER_BUSY, ``broken``
    makes them raise; every take may wait a scheduling round first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.out: set[int] = set()
        self.given_back: list[int] = []
        self.refuse = False
        self.broken = False
        self._ids = itertools.count()

    async def take(self, deadline: float) -> object | None:
        await anyio.lowlevel.checkpoint()  # a round trip
        if self.broken:
            raise RuntimeError("permit store down")
        if self.refuse or len(self.out) >= self.capacity:
            raise TimeoutError  # the guard refuses the call queue_timeout
        token = next(self._ids)
        self.out.add(token)
        return token

    async def give_back(self, token: object) -> None:
        await anyio.lowlevel.checkpoint()
        assert isinstance(token, int)
        assert token in self.out, "a permit given back twice, or never taken"
        self.out.remove(token)
        self.given_back.append(token)


class SlowToGiveBack(CountingPermit):
    """A permit whose give-back is a slow round trip (a Redis that stalls)."""

    async def give_back(self, token: object) -> None:
        await anyio.sleep(0.2)
        await super().give_back(token)


class RecordingLimit:
    """A limit of 2 that keeps every hold it is told of."""

    def __init__(self) -> None:
        self.limit = 2
        self.holds: list[float] = []

    def on_sample(self, start: float, duration: float, inflight: int, dropped: bool) -> None:
        self.holds.append(duration)


def test_a_counting_permit_is_a_permit_and_anything_else_is_refused_at_once() -> None:
    assert isinstance(CountingPermit(1), Permit)  # the protocol is structural
    with pytest.raises(ConfigurationError, match=r"permit=.* is invalid: expected a Permit"):
        ConcurrencyGuard(1, permit=object())  # type: ignore[arg-type]


async def test_the_permit_is_taken_after_the_slot_and_given_back_before_it() -> None:
    permit = CountingPermit(5)
    guard = ConcurrencyGuard(2, name="t", permit=permit)
    assert guard.permit is permit
    assert not guard.slot().take_free()  # a permit is awaited: never taken without a coroutine
    async with guard.slot():
        assert (guard.active, len(permit.out)) == (1, 1)
    assert (guard.active, permit.out, permit.given_back) == (0, set(), [0])
    held = await guard.acquire()
    assert len(permit.out) == 1
    await held.arelease()  # type: ignore[attr-defined]
    assert (guard.active, permit.out) == (0, set())
    with pytest.raises(ConfigurationError, match="acquire_nowait"):
        guard.acquire_nowait()


async def test_a_limit_learns_the_calls_hold_without_the_permits_give_back() -> None:
    # A fleet lease given back through a stalled Redis is not a tool that slowed down: an
    # adaptive limit fed that time would cut the slots of a healthy tool.
    permit, learnt = SlowToGiveBack(5), RecordingLimit()
    guard = ConcurrencyGuard(limit=learnt, name="t", permit=permit, clock=anyio.current_time)
    began = anyio.current_time()
    async with guard.slot():
        pass
    assert anyio.current_time() - began == 0.2  # the local slot went after the permit
    assert permit.given_back == [0]
    assert learnt.holds == [0.0]
    assert guard.statistics().mean_service_time == 0.0  # nor the retry_after advice


async def test_a_refused_permit_frees_the_local_slot_and_is_counted_as_a_shed() -> None:
    permit = CountingPermit(0)
    guard = ConcurrencyGuard(2, name="t", permit=permit)
    with pytest.raises(ServerBusy) as refused:
        async with guard.slot():
            pytest.fail("ran without its permit")
    assert refused.value.reason == "queue_timeout"
    stats = guard.statistics()
    assert (guard.active, stats.admitted, stats.shed_queue_timeout) == (0, 0, 1)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plan=st.lists(st.sampled_from(["call", "cancel", "refuse", "break", "heal"]), max_size=40),
    capacity=st.integers(0, 3),
    max_active=st.integers(1, 3),
)
async def test_every_permit_taken_is_given_back_once(
    plan: list[str], capacity: int, max_active: int
) -> None:
    permit = CountingPermit(capacity)
    guard = ConcurrencyGuard(max_active, max_queue=3, queue_timeout=5.0, name="t", permit=permit)
    scopes: list[anyio.CancelScope] = []
    release = anyio.Event()

    async def call() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            try:
                async with guard.slot():
                    assert len(permit.out) <= capacity
                    await release.wait()
            except (ServerBusy, RuntimeError):
                pass

    async with anyio.create_task_group() as tg:
        for step in plan:
            if step == "call":
                tg.start_soon(call)
            elif step == "cancel" and scopes:
                scopes[len(scopes) // 2].cancel()
            elif step == "refuse":
                permit.refuse = True
            elif step == "break":
                permit.broken = True
            else:
                permit.refuse = permit.broken = False
            await anyio.wait_all_tasks_blocked()
            assert guard.active <= max_active
            assert len(permit.out) <= min(capacity, guard.active)
        release.set()
    assert (guard.active, guard.queued, permit.out) == (0, 0, set())
    assert len(permit.given_back) == len(set(permit.given_back))


def test_a_guard_used_on_a_second_event_loop_times_its_queue_out_there_too() -> None:
    """The asyncio queue timers belong to a loop: a guard reused on a new loop arms new ones."""
    guard = ConcurrencyGuard(1, max_queue=5, queue_timeout=0.05, predictive=False, name="t")

    async def one_round() -> str:
        held = guard.acquire_nowait()
        try:
            async with guard.slot():
                return "served"
        except ServerBusy as busy:
            return str(busy.reason)
        finally:
            held.release()

    assert anyio.run(one_round, backend="asyncio") == "queue_timeout"
    assert anyio.run(one_round, backend="asyncio") == "queue_timeout"  # a second loop
    assert (guard.active, guard.queued) == (0, 0)


class NeverPermit(CountingPermit):
    """A permit store that never answers."""

    async def take(self, deadline: float) -> object | None:
        await anyio.sleep_forever()
        raise AssertionError("never answered")


async def test_a_call_cancelled_waiting_for_its_permit_is_reported_once_by_its_slot() -> None:
    observer = RecordingObserver()
    guard = ConcurrencyGuard(
        2, name="t", permit=NeverPermit(1), observer=observer.for_tool("t", max_active=2)
    )

    async def call() -> None:
        async with guard.slot():
            raise AssertionError("no permit came")

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await anyio.wait_all_tasks_blocked()
        assert guard.active == 1  # its local slot, held while it waits for the permit
        tg.cancel_scope.cancel()
    assert guard.active == 0
    assert observer.events["t"] == [("finished", "cancelled", None)]
