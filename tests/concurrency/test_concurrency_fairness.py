"""Fair shares across client keys (docs/concurrency.md, "Fair shares"): waiting calls served in
turn across clients, a client holding no slot served next, the heaviest client's newest queued
call displaced for a lighter client's, the per-client cap, and bounded per-client records. On
asyncio and trio."""

from __future__ import annotations

import math
from collections import Counter

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_guard import ConcurrencyGuard, ConfigurationError, ServerBusy, parse_tool_error
from fusion_guard._keys import MAX_KEY_CHARS
from fusion_guard.admission._fairness import DECAY_EVERY, MAX_REMEMBERED, PRUNE_FROM, FairQueue
from fusion_guard.testing import FakeClock

pytestmark = pytest.mark.anyio


class Calls:
    """Calls through one guard, each holding its slot until released; ``order`` lists the calls
    in the order they got a slot, ``refused`` the refusals by call."""

    def __init__(self, guard: ConcurrencyGuard) -> None:
        self.guard = guard
        self.order: list[str] = []
        self.refused: dict[str, ServerBusy] = {}
        self.cancelled: set[str] = set()
        self.client_of: dict[str, str | None] = {}
        self._release: dict[str, anyio.Event] = {}
        self._scopes: dict[str, anyio.CancelScope] = {}

    async def call(self, name: str, client: str | None) -> None:
        self.client_of[name] = client
        release = self._release[name] = anyio.Event()
        try:
            with anyio.CancelScope() as scope:
                self._scopes[name] = scope
                async with self.guard.slot(client=client):
                    self.order.append(name)
                    await release.wait()
        except ServerBusy as busy:
            self.refused[name] = busy
        finally:
            if name not in self.refused and name not in self.order:
                self.cancelled.add(name)  # by its own scope or the task group's

    def release(self, name: str) -> None:
        self._release[name].set()

    def cancel(self, name: str) -> None:
        self._scopes[name].cancel()

    def running(self) -> list[str]:
        ended = set(self.refused) | self.cancelled
        return [n for n in self.order if not self._release[n].is_set() and n not in ended]


async def _start(tg: anyio.abc.TaskGroup, calls: Calls, name: str, client: str | None) -> None:
    tg.start_soon(calls.call, name, client)
    await anyio.wait_all_tasks_blocked()


async def test_a_polite_client_gets_the_next_slot_ahead_of_a_greedy_backlog() -> None:
    guard = ConcurrencyGuard(2, max_queue=20, queue_timeout=math.inf, name="t")
    calls = Calls(guard)
    async with anyio.create_task_group() as tg:
        for index in range(8):
            await _start(tg, calls, f"greedy{index}", "greedy")
        await _start(tg, calls, "polite", "polite")
        assert (guard.active, guard.queued) == (2, 7)
        calls.release("greedy0")
        await anyio.wait_all_tasks_blocked()
        assert calls.order[-1] == "polite"  # not greedy2, queued long before
        for name in ("greedy1", "polite"):
            calls.release(name)
            await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    assert calls.order[:4] == ["greedy0", "greedy1", "polite", "greedy2"]


async def test_a_client_alone_uses_every_slot_and_keys_cost_no_queue_place() -> None:
    guard = ConcurrencyGuard(3, max_queue=2, queue_timeout=math.inf, name="t")
    calls = Calls(guard)
    async with anyio.create_task_group() as tg:
        for index in range(5):
            await _start(tg, calls, f"c{index}", "only")
        assert (guard.active, guard.queued, calls.refused) == (3, 2, {})
        tg.cancel_scope.cancel()


async def test_clients_waiting_are_served_in_turn() -> None:
    guard = ConcurrencyGuard(1, max_queue=20, queue_timeout=math.inf, name="t")
    calls = Calls(guard)
    async with anyio.create_task_group() as tg:
        await _start(tg, calls, "a0", "a")
        for index in range(1, 4):
            await _start(tg, calls, f"a{index}", "a")
        for index in range(3):
            await _start(tg, calls, f"b{index}", "b")
        for _ in range(6):
            calls.release(calls.running()[0])
            await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    # b joined while holding nothing: first in turn; then one call each, a and b in turn.
    assert calls.order == ["a0", "b0", "a1", "b1", "a2", "b2", "a3"]


async def test_the_heaviest_client_gives_its_newest_place_to_a_lighter_one() -> None:
    guard = ConcurrencyGuard(1, max_queue=4, queue_timeout=math.inf, name="tool", predictive=False)
    calls = Calls(guard)
    async with anyio.create_task_group() as tg:
        for index in range(5):  # one running, four queued: the queue is full
            await _start(tg, calls, f"g{index}", "greedy")
        await _start(tg, calls, "p0", "polite")
        assert set(calls.refused) == {"g4"}  # the greedy client's newest call
        assert guard.queued == 4
        busy = calls.refused["g4"]
        assert busy.reason == "fair_share"
        assert busy.retry_after > 0
        error = parse_tool_error(busy.response.text)
        assert error is not None
        assert error.details["reason"] == "fair_share"
        # Its own share: one running, three still queued; never the key.
        assert (error.details["client_active"], error.details["client_queued"]) == ("1", "3")
        assert "greedy" not in busy.response.text
        assert list(error.details)[:5] == ["reason", "active", "queued", "max_active", "max_queue"]
        await _start(tg, calls, "p1", "polite")  # polite 1 place, greedy 3: lighter by two
        assert set(calls.refused) == {"g4", "g3"}
        await _start(tg, calls, "p2", "polite")  # two places each now: the newcomer is refused
        assert set(calls.refused) == {"g4", "g3", "p2"}
        assert calls.refused["p2"].reason == "queue_full"
        tg.cancel_scope.cancel()
    stats = guard.statistics()
    assert (stats.shed_fair_share, stats.shed_queue_full) == (2, 1)


async def test_a_client_served_much_lately_gives_way_even_with_one_place() -> None:
    clock = FakeClock(1000.0)
    guard = ConcurrencyGuard(
        1, max_queue=2, queue_timeout=math.inf, name="t", predictive=False, clock=clock
    )
    calls = Calls(guard)
    async with anyio.create_task_group() as tg:
        await _start(tg, calls, "x0", "x")
        for index in range(3):  # a is served from the queue three times
            await _start(tg, calls, f"a{index}", "a")
            calls.release(calls.running()[0])
            await anyio.wait_all_tasks_blocked()
        await _start(tg, calls, "a3", "a")  # a: one waiting + three served = 4
        await _start(tg, calls, "c0", "c")  # c: 1; the queue is full
        await _start(tg, calls, "d0", "d")  # d: 0, two less than a: a's call gives way
        assert set(calls.refused) == {"a3"}
        assert calls.refused["a3"].reason == "fair_share"
        await _start(tg, calls, "e0", "e")  # c and d weigh 1 each: e is refused
        assert calls.refused["e0"].reason == "queue_full"
        clock.advance(8 * DECAY_EVERY)  # a's service long ago is halved away
        calls.release(calls.running()[0])  # c0 (or d0) served
        await anyio.wait_all_tasks_blocked()
        await _start(tg, calls, "a4", "a")  # the queue is full again
        await _start(tg, calls, "f0", "f")  # a weighs its waiting call alone now: f is refused
        assert calls.refused["f0"].reason == "queue_full"
        assert "a4" not in calls.refused
        tg.cancel_scope.cancel()


async def test_calls_without_a_key_form_one_client() -> None:
    guard = ConcurrencyGuard(1, max_queue=4, queue_timeout=math.inf, name="t", predictive=False)
    calls = Calls(guard)
    async with anyio.create_task_group() as tg:
        for index in range(5):  # queued before any key is seen
            await _start(tg, calls, f"n{index}", None)
        await _start(tg, calls, "k0", "keyed")
        assert set(calls.refused) == {"n4"}  # the keyless client is the heaviest
        calls.release("n0")
        await anyio.wait_all_tasks_blocked()
        assert calls.order[-1] == "k0"
        tg.cancel_scope.cancel()


async def test_without_fairness_the_queue_is_first_come_first_served() -> None:
    guard = ConcurrencyGuard(1, max_queue=3, queue_timeout=math.inf, name="t", fair=False)
    calls = Calls(guard)
    async with anyio.create_task_group() as tg:
        for index in range(4):
            await _start(tg, calls, f"g{index}", "greedy")
        await _start(tg, calls, "p0", "polite")
        assert calls.refused["p0"].reason == "queue_full"
        calls.release("g0")
        await anyio.wait_all_tasks_blocked()
        assert calls.order == ["g0", "g1"]
        tg.cancel_scope.cancel()
    assert guard.statistics().clients == 0  # no records kept: keys play no part


async def test_the_per_client_cap_refuses_with_advice_about_the_clients_own_calls() -> None:
    clock = FakeClock(1000.0)
    guard = ConcurrencyGuard(
        4, name="t", max_active_per_client=2, clock=clock, expected_service_time=0.2
    )
    calls = Calls(guard)
    async with anyio.create_task_group() as tg:
        await _start(tg, calls, "a0", "a")
        await _start(tg, calls, "a1", "a")
        await _start(tg, calls, "a2", "a")
        await _start(tg, calls, "b0", "b")  # another client is not affected
        assert calls.order == ["a0", "a1", "b0"]
        busy = calls.refused["a2"]
        assert busy.reason == "client_limit"
        assert busy.retry_after == pytest.approx(0.1)  # one of its two 0.2 s calls ends
        error = parse_tool_error(busy.response.text)
        assert error is not None
        assert (error.details["client_active"], error.details["client_queued"]) == ("2", "0")
        # The number the caller must keep to is its own cap, not the tool's 4 slots.
        assert "(at most 2 of your calls, running or waiting)" in error.recovery
        assert "run in parallel" not in error.recovery
        calls.release("a0")
        await anyio.wait_all_tasks_blocked()
        await _start(tg, calls, "a3", "a")
        assert calls.order[-1] == "a3"
        tg.cancel_scope.cancel()
    assert guard.statistics().shed_client_limit == 1


async def test_a_long_key_is_one_client_however_often_it_comes() -> None:
    # Kept as its digest (a short key is kept as it is): the same long key is one client, two
    # long keys alike up to the limit are two, and neither is kept whole.
    guard = ConcurrencyGuard(4, name="t", max_active_per_client=1)
    long_key = "k" * (MAX_KEY_CHARS + 10)
    held = await guard.acquire(client=long_key)
    with pytest.raises(ServerBusy) as refused:
        await guard.acquire(client=long_key)
    assert refused.value.reason == "client_limit"
    other = await guard.acquire(client=long_key[:-1] + "x")
    assert guard.statistics().clients == 2
    kept = guard._core.fair.records  # type: ignore[union-attr]  # kept from the first key
    assert all(len(key) <= MAX_KEY_CHARS for key in kept)  # digests, not the keys themselves
    held.release()
    other.release()
    assert guard.statistics().clients == 0


async def test_the_cap_counts_queued_calls_too() -> None:
    guard = ConcurrencyGuard(1, name="t", max_active_per_client=1, queue_timeout=math.inf)
    calls = Calls(guard)
    async with anyio.create_task_group() as tg:
        await _start(tg, calls, "b0", "b")
        await _start(tg, calls, "a0", "a")  # queued behind b0
        await _start(tg, calls, "a1", "a")
        assert calls.refused["a1"].reason == "client_limit"
        tg.cancel_scope.cancel()


class Dial:
    """A limit moved by hand (read by the guard after each finished call)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def on_sample(self, start: float, duration: float, inflight: int, dropped: bool) -> None:
        pass


async def test_a_raised_limit_admits_waiters_in_turn_and_a_lowered_one_drains() -> None:
    dial = Dial(1)
    guard = ConcurrencyGuard(limit=dial, max_queue=10, queue_timeout=math.inf, name="t")
    calls = Calls(guard)
    async with anyio.create_task_group() as tg:
        for index in range(4):
            await _start(tg, calls, f"g{index}", "greedy")
        await _start(tg, calls, "p0", "polite")
        dial.limit = 3
        calls.release("g0")  # its sample puts 3 in force: three waiters admitted at once
        await anyio.wait_all_tasks_blocked()
        assert guard.active == 3
        # The polite client first, then the greedy one's oldest two (their tasks may run in
        # any order).
        assert set(calls.running()) == {"p0", "g1", "g2"}
        dial.limit = 1
        calls.release(calls.running()[0])  # lowered: nobody admitted until two more end
        await anyio.wait_all_tasks_blocked()
        assert (guard.active, guard.queued) == (2, 1)
        tg.cancel_scope.cancel()
    assert (guard.active, guard.statistics().clients) == (0, 0)


@pytest.mark.parametrize(
    ("value", "wording"),
    [
        (0, r"max_active_per_client=0 is invalid: expected an integer >= 1"),
        (5, r"max_active_per_client=5 is invalid: expected an integer from 1 to max_active"),
        ("two", r"max_active_per_client='two' is invalid: expected an integer"),
    ],
)
def test_a_bad_per_client_cap_fails_at_construction(value: object, wording: str) -> None:
    with pytest.raises(ConfigurationError, match=wording):
        ConcurrencyGuard(4, name="t", max_active_per_client=value)  # type: ignore[arg-type]


FLOOD = 2 * MAX_REMEMBERED  # 20,000 (100,000 took 26 s over both backends)


@pytest.mark.slow
async def test_a_flood_of_distinct_keys_keeps_records_only_for_calls_in_the_guard() -> None:
    guard = ConcurrencyGuard(2, max_queue=3, queue_timeout=math.inf, name="t", predictive=False)
    held = [await guard.acquire(client=f"holder{index}") for index in range(2)]
    refused = 0
    # The bound is checked at every key, so a record kept for a key gone breaks it at once;
    # twice the queue's memory of clients (MAX_REMEMBERED) passes any clean-up by count too.
    for index in range(FLOOD):
        slot = guard.slot(client=f"client-{index}")
        try:
            with anyio.move_on_after(0):  # arrives, is queued or refused, leaves
                await slot.__aenter__()
        except ServerBusy:
            refused += 1
        assert guard.statistics().clients <= 2 + guard.queued
        records = guard._core.fair.records  # type: ignore[union-attr]  # kept from the first key
        assert len(records) <= PRUNE_FROM + 2 * guard.active
    assert guard.statistics().clients == 2  # the two holders
    for slot in held:
        slot.release()
    stats = guard.statistics()
    assert (stats.clients, guard.active, guard.queued) == (0, 0, 0)
    assert refused + stats.cancelled_queued == FLOOD


async def test_idle_clients_records_are_pruned_however_many_keys_take_free_slots() -> None:
    # Each key's record outlives its call (its next call only counts on it): the idle ones are
    # dropped once the records reach PRUNE_FROM more than twice those running, a record with a
    # call running never.
    guard = ConcurrencyGuard(2, name="t", max_active_per_client=1)
    held = await guard.acquire(client="holder")
    for index in range(3 * PRUNE_FROM):
        async with guard.slot(client=f"client-{index}"):
            assert guard.statistics().clients == 2
        records = guard._core.fair.records  # type: ignore[union-attr]  # kept from the first key
        assert len(records) <= PRUNE_FROM + 2 * guard.active
    assert guard.statistics().clients == 1
    with pytest.raises(ServerBusy) as refused:  # the holder's call is still counted
        await guard.acquire(client="holder")
    assert refused.value.reason == "client_limit"
    held.release()
    again = await guard.acquire(client="holder")  # its idle record counts nothing
    again.release()
    assert guard.statistics().clients == 0


def test_the_memory_of_service_is_bounded_whatever_the_number_of_clients_served() -> None:
    fair: FairQueue[object] = FairQueue(serves_in_turn=True, now=0.0)
    for index in range(3 * MAX_REMEMBERED):
        tenant = fair.tenant(f"client-{index}")
        fair.push(tenant, object(), running=1, now=0.0)
        fair.serve(newest=False)
        fair.ended(f"client-{index}")
        assert fair.remembered <= MAX_REMEMBERED
    assert fair.clients == 0  # nothing running or waiting: only the memory of service is left
    fair.push(fair.tenant("late"), object(), running=1, now=60 * DECAY_EVERY)
    assert fair.remembered == 0  # a minute later every count has halved to nothing


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plan=st.lists(
        st.tuples(
            st.sampled_from(["call", "release", "cancel"]),
            st.sampled_from("abcN"),
            st.integers(0, 30),
        ),
        max_size=50,
    ),
    max_active=st.integers(1, 3),
    max_queue=st.integers(1, 6),
    cap=st.none() | st.integers(1, 3),
    lifo=st.booleans(),
)
async def test_any_mix_of_clients_is_served_fairly_and_nothing_leaks(
    plan: list[tuple[str, str, int]], max_active: int, max_queue: int, cap: int | None, lifo: bool
) -> None:
    cap = None if cap is None else min(cap, max_active)
    # A stopped clock: the plan's actions are instants, whatever a loaded machine makes of them
    # (past DECAY_EVERY of real time the service counts would halve, changing whom the full
    # queue refuses; the decay has tests of its own).
    guard = ConcurrencyGuard(
        max_active, max_queue, math.inf, name="t", max_active_per_client=cap, lifo=lifo,
        predictive=False, standing_limit=max_queue, clock=FakeClock(1000.0),
    )  # fmt: skip
    calls = Calls(guard)
    # For each waiting client, the clients served since it last was (or began waiting): served
    # in turn, none of them may be served twice before it.
    served_since: dict[str | None, Counter[str | None]] = {}
    # Each client's calls served from the queue: with its calls waiting, its weight when a full
    # queue must refuse someone (the clock stands still, so nothing halves).
    from_queue: Counter[str | None] = Counter()
    names = iter(f"call{index}" for index in range(1000))
    async with anyio.create_task_group() as tg:
        for action, letter, pick in plan:
            client = None if letter == "N" else letter
            before_order = len(calls.order)
            before_refused = dict(calls.refused)
            queued_before = _queued_by_client(calls)
            if action == "call":
                name = next(names)
                tg.start_soon(calls.call, name, client)
            else:
                live = calls.running() if action == "release" else _waiting(calls)
                if live:
                    target = live[pick % len(live)]
                    (calls.release if action == "release" else calls.cancel)(target)
            await anyio.wait_all_tasks_blocked()

            granted = calls.order[before_order:]
            assert len(granted) <= 1  # one action frees or takes at most one slot
            for name in granted:
                who = calls.client_of[name]
                if action != "call":  # freed by a release or a cancel: taken from the queue
                    from_queue[who] += 1
                for waiting, served in served_since.items():
                    if waiting != who:
                        assert served[who] == 0, f"{who} served twice while {waiting} waited"
                        served[who] += 1
                served_since.pop(who, None)
            for name in set(calls.refused) - set(before_refused):
                if calls.refused[name].reason == "fair_share":
                    victim = calls.client_of[name]
                    weight = {who: n + from_queue[who] for who, n in queued_before.items()}
                    assert weight[victim] == max(weight.values())
            waiting_now = _queued_by_client(calls)
            for who in waiting_now:
                served_since.setdefault(who, Counter())
            for who in list(served_since):
                if who not in waiting_now:
                    del served_since[who]

            running = calls.running()
            assert guard.active == len(running) <= max_active
            assert guard.queued == sum(waiting_now.values()) <= max_queue
            if cap is not None:
                per_client = Counter(calls.client_of[n] for n in running) + waiting_now
                assert all(n <= cap for who, n in per_client.items() if who is not None)
            keyed = {calls.client_of[n] for n in running} | set(waiting_now)
            assert guard.statistics().clients == len(keyed - {None})
        tg.cancel_scope.cancel()
    assert (guard.active, guard.queued, guard.statistics().clients) == (0, 0, 0)
    ended = set(calls.order) | set(calls.refused) | calls.cancelled
    assert ended == set(calls.client_of)  # every call ran, was refused or was cancelled
    assert not set(calls.refused) & set(calls.order)  # ... and only one of these


def _waiting(calls: Calls) -> list[str]:
    ended = set(calls.order) | set(calls.refused) | calls.cancelled
    return [name for name in calls.client_of if name not in ended]


def _queued_by_client(calls: Calls) -> Counter[str | None]:
    return Counter(calls.client_of[name] for name in _waiting(calls))
