"""The fleet semaphore: at most ``limit`` leases of a fleet's processes in one Redis sorted set.

The leases are taken, refreshed and released by Lua scripts over a :class:`RedisConnection`
(``_redis.py``); the connection's one :class:`LeaseRefresher` (``_redis_refresher.py``) keeps
this process's running leases alive and settles what failures left behind.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import secrets
import time
from typing import Final

from .._exceptions import BackendError
from .._log import log_event
from ._redis import Arg, RedisConnection

__all__ = ["RECOVERY_GRACE", "FleetSemaphore", "LeaseGrant"]

RECOVERY_GRACE: Final = 0.5
"""Seconds new leases wait after Redis lost the holders (a restart), while running calls'
replicas register their leases again: each refreshes at least twice in that time."""
_ABANDONED_MAX = 4096  # ids kept to release per semaphore; older ones just expire with the lease
_RELEASE_BATCH = 256  # ids per release round trip


class LeaseGrant:
    """The reply to an acquire: the holder id when granted (None when the fleet is full), and
    how many holders the fleet has."""

    __slots__ = ("holder", "holders")

    def __init__(self, holder: str | None, holders: int) -> None:
        self.holder = holder
        self.holders = holders


class _LeaseScripts:
    __slots__ = ("lease_acquire", "lease_refresh", "lease_release")

    def __init__(self, conn: RedisConnection) -> None:
        self.lease_acquire = conn.scripts["lease_acquire"]
        self.lease_release = conn.scripts["lease_release"]
        self.lease_refresh = conn.scripts["lease_refresh"]


class FleetSemaphore:
    """A semaphore shared by a fleet: at most ``limit`` leases in one Redis sorted set.

    Each lease lasts ``lease`` seconds unless refreshed; this process's running leases are
    refreshed by the connection's one background task (see :class:`LeaseRefresher`), so a
    crashed process's permits come back within ``lease`` seconds.

    No lease outlives its call: an acquire that failed, timed out or was cancelled may still run
    on Redis (or have run), and a release that failed left its lease behind, so their holder ids
    are released by that task, in the background, retried until Redis answers (released ids
    stay released: a request delayed in a stalled Redis cannot bring them back). When Redis
    fails, or says it lost the holders, this process's running calls register their leases
    again, counted even beyond the limit, so the fleet refuses newcomers until they drain.

    ``key`` is the Redis key of the holders' sorted set.
    """

    __slots__ = (
        "_abandoned",
        "_conn",
        "_counter",
        "_grace_ms",
        "_held",
        "_keys",
        "_lease_ms",
        "_limit",
        "_owner",
        "_release_keys",
        "_remember_until",
        "_scripts",
        "_seen",
        "_suspect",
        "key",
        "lease",
        "limit",
        "name",
    )

    def __init__(self, conn: RedisConnection, name: str, *, limit: int, lease: float) -> None:
        self._conn = conn
        self._scripts = _LeaseScripts(conn)
        self.name = name
        self.limit = limit
        self.lease = lease
        self._limit = b"%d" % limit
        self._lease_ms = b"%d" % max(1, round(lease * 1000))
        self._grace_ms = b"%d" % round(RECOVERY_GRACE * 1000)
        self.key = conn.key("lease", name)
        # Encoded once: redis-py sends bytes as they are (str is encoded on every call).
        keys = (self.key, conn.key("released", name), conn.key("fleet", name))
        self._keys: list[Arg] = [key.encode() for key in keys]
        self._release_keys = self._keys[:2]
        self._owner = _owner_id()
        self._counter = 0
        self._held: set[str] = set()
        self._abandoned: dict[str, None] = {}  # holder ids to release, oldest first
        self._seen = b"0"  # b"1" once Redis answered an acquire: this replica knows the fleet
        self._suspect = False  # Redis failed since the held leases were last seen there
        # Until then (time.monotonic()), releases are remembered in Redis: a restore sent
        # before may still run, late, and must not bring a released lease back.
        self._remember_until = -math.inf

    @property
    def held(self) -> int:
        """How many leases this process holds now."""
        return len(self._held)

    @property
    def abandoned(self) -> int:
        """How many holder ids wait to be released in the background."""
        return len(self._abandoned)

    @property
    def owing(self) -> bool:
        """Whether failures left work for the background task (releases, re-registration)."""
        return bool(self._abandoned) or (self._suspect and bool(self._held))

    async def try_acquire(self) -> LeaseGrant:
        """One attempt (one round trip); raises BackendError when Redis fails."""
        self._counter += 1
        holder = f"{self._owner}:{self._counter}"
        args: list[Arg] = [holder, self._limit, self._lease_ms, self._seen, self._grace_ms]
        try:
            reply = await self._conn.run(self._scripts.lease_acquire, self._keys, args)
        except (BackendError, asyncio.CancelledError) as exc:
            # A timeout on the client does not stop the script: Redis may run it later (or ran
            # it, if the reply was on its way when cancelled). Never block the caller for it.
            self._abandon(holder, failed=isinstance(exc, BackendError))
            raise
        self._seen = b"1"
        granted, holders, recovering = reply
        if recovering:  # Redis lost the holders: ours too, if any
            self._lost()
        if self._abandoned or self._suspect:
            self._conn.refresher.wake()  # Redis answers again: settle now, not at the retry
        if not granted:
            return LeaseGrant(None, int(holders))
        self._held.add(holder)
        self._conn.refresher.holding(self)
        return LeaseGrant(holder, int(holders))

    async def release(self, holder: str) -> None:
        """Give a lease back; raises BackendError when Redis fails (the release is then
        retried in the background)."""
        self._held.discard(holder)
        remember = self._lease_ms if time.monotonic() < self._remember_until else b"0"
        try:
            await self._conn.run(
                self._scripts.lease_release, self._release_keys, [remember, holder]
            )
        except (BackendError, asyncio.CancelledError) as exc:
            self._abandon(holder, failed=isinstance(exc, BackendError))
            raise
        finally:
            if not self._held:
                self._conn.refresher.idle(self)

    async def refresh(self) -> bool:
        """Extend this process's leases (one round trip); after a failure, or when some were
        found missing, restore those Redis lost too. False when Redis failed (logged once per
        streak of failures, retried soon)."""
        if not self._held:
            self._suspect = False
            return True
        restore = self._suspect
        if restore:
            self._remember_until = time.monotonic() + self.lease
        args: list[Arg] = [self._lease_ms, self._grace_ms, b"1" if restore else b"0", *self._held]
        try:
            reply = await self._conn.run(self._scripts.lease_refresh, self._keys, args)
        except BackendError as exc:
            if not self._suspect:
                log_event(
                    logging.WARNING, "lease_refresh_failed", semaphore=self.name, error=str(exc)
                )
            self._lost()
            return False
        self._suspect = False
        if not reply[1]:
            return True
        if restore:
            log_event(
                logging.WARNING, "lease_restored", semaphore=self.name, restored=int(reply[1])
            )
        else:  # Redis lost some (a restart, a stall past the lease): restore them at once
            self._lost()
        return True

    async def settle(self) -> bool:
        """Do what failures left undone: register the running calls' leases again (first, so
        the fleet's count includes them), then release the abandoned ids, in batches. True when
        nothing is left."""
        if self._suspect and not await self.refresh():
            return False
        abandoned = self._abandoned
        while abandoned:
            batch = list(itertools.islice(abandoned, _RELEASE_BATCH))
            try:
                await self._conn.run(
                    self._scripts.lease_release, self._release_keys, [self._lease_ms, *batch]
                )
            except BackendError:
                return False
            for holder in batch:
                abandoned.pop(holder, None)
        return True

    def _abandon(self, holder: str, *, failed: bool) -> None:
        """Release ``holder`` in the background; after a failure, this process's held leases
        may be gone from Redis too."""
        abandoned = self._abandoned
        if len(abandoned) >= _ABANDONED_MAX:
            del abandoned[next(iter(abandoned))]  # the oldest: its lease, if any, expires
        abandoned[holder] = None
        if failed and self._held:
            self._suspect = True
        self._conn.refresher.owe(self)

    def _lost(self) -> None:
        """This process's leases may be missing from Redis: register them again at once."""
        if self._held:
            self._suspect = True
            self._conn.refresher.owe(self)


def _owner_id() -> str:
    """A short id unique to this semaphore object in this process (leases name their owner)."""
    return f"{os.getpid()}-{secrets.token_hex(4)}"
