"""The fleet semaphore's Lua scripts against a model, under any interleaving of replicas.

A hypothesis state machine drives three replicas (three ``FleetSemaphore`` objects, each with its
own owner id, as three processes would have) through acquires, releases, refreshes and a Redis
that loses everything (a restart), and checks after every step that Redis holds exactly the
leases the model says are held, never more than the limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fusion_guard.backends._redis import RedisConnection
from fusion_guard.backends._redis_lease import FleetSemaphore
from redis_testserver import RedisServer

T = TypeVar("T")
LIMIT = 3
REPLICAS = 3


async def _finish(tasks: set[asyncio.Task[Any]]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)


class LeaseMachine(RuleBasedStateMachine):
    server: RedisServer  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.conn = RedisConnection(self.server.url, timeout=2.0, prefix="lease-prop")
        # A long lease: nothing expires during a run, so the model needs no clock.
        self.replicas = [
            FleetSemaphore(self.conn, "prop", limit=LIMIT, lease=60.0) for _ in range(REPLICAS)
        ]
        self.held: list[list[str]] = [[] for _ in range(REPLICAS)]
        self.admin = self.server.client()
        self.admin.delete(self.replicas[0].key)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    @property
    def total(self) -> int:
        return sum(len(h) for h in self.held)

    @rule(replica=st.integers(0, REPLICAS - 1))
    def acquire(self, replica: int) -> None:
        grant = self.run(self.replicas[replica].try_acquire())
        if self.total < LIMIT:
            assert grant.holder is not None
            self.held[replica].append(grant.holder)
        else:
            assert grant.holder is None
            assert grant.holders == LIMIT

    @precondition(lambda self: self.total > 0)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        replica = data.draw(st.sampled_from([i for i, h in enumerate(self.held) if h]))
        holder = data.draw(st.sampled_from(self.held[replica]))
        self.held[replica].remove(holder)
        self.run(self.replicas[replica].release(holder))

    @rule(replica=st.integers(0, REPLICAS - 1))
    def refresh(self, replica: int) -> None:
        self.run(self.replicas[replica].refresh())

    @rule()
    def redis_loses_everything(self) -> None:
        # As after a restart: every lease is gone until the replicas refresh them. A refresh
        # finds them missing, the settling restores them (the refresher would do it at once;
        # here it is done in step, so the invariant sees the outcome).
        self.admin.delete(self.replicas[0].key)
        for replica in self.replicas:
            self.run(replica.refresh())
            self.run(replica.settle())

    @invariant()
    def redis_holds_exactly_the_model(self) -> None:
        members = {m.decode() for m in self.admin.zrange(self.replicas[0].key, 0, -1)}
        assert members == {holder for held in self.held for holder in held}
        assert len(members) <= LIMIT

    def teardown(self) -> None:
        self.run(self.conn.aclose())  # also stops the lease refresher
        self.run(_finish(asyncio.all_tasks(self.loop)))  # the refresher, cancelled
        self.loop.close()
        self.admin.close()


def test_leases_match_the_model(redis_server: RedisServer, redis_url: str) -> None:
    LeaseMachine.server = redis_server
    machine = LeaseMachine.TestCase
    machine.settings = settings(
        max_examples=25,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    machine().runTest()
