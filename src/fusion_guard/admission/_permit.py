"""A permit: what a call holds besides its local slot, such as a fleet-wide lease in Redis.

``ConcurrencyGuard(permit=...)`` composes one: each call's slot (``_PermitSlot``) takes the local
slot first, then the permit (awaited, by the call's deadline), and gives them back in the
opposite order. The queue and the hand-off never look at the permit, and the permit sees
nothing of the guard but the call's deadline (``DistributedConcurrencyGuard`` is a guard with a
``RedisLease`` permit).
"""

from __future__ import annotations

from types import TracebackType
from typing import ClassVar, Protocol, runtime_checkable

import anyio

from .._observer import Outcome, observer_failed
from .._priority import DEFAULT_RANK
from ._core import Core
from ._refusal import Refusals
from ._slot import _LevelSlot

__all__ = ["Permit"]


@runtime_checkable
class Permit(Protocol):
    """Something a call must hold besides its local slot, composed into a guard with
    ``ConcurrencyGuard(permit=...)``: a fleet-wide lease in Redis, say. ``take`` is awaited once
    the local slot is held, ``deadline`` being the call's arrival plus ``queue_timeout`` (the
    guard's clock); it returns a token for ``give_back`` (None: nothing to give back, e.g.
    admitted by a failure policy), raises ``TimeoutError`` when no permit came by the deadline
    (the guard then refuses the call ``queue_timeout``, counted, reported and advised like its
    own refusals), or raises a :class:`~fusion_guard.ServerBusy` of its own, which passes as it
    is. ``give_back`` is awaited, shielded, before the local slot is released. A permit whose
    class sets ``takes_rank = True`` is called ``take(deadline, rank)``, ``rank`` being the
    call's priority (``Priority.rank``), so that a refusal it reports counts under it."""

    async def take(self, deadline: float) -> object | None: ...

    async def give_back(self, token: object) -> None: ...


class _PermitSlot(_LevelSlot):
    """A slot of a guard with a permit: the local slot, then the permit (awaited), given back in
    the opposite order. The permit sees nothing of the guard: only its deadline."""

    __slots__ = ("_permit", "_refusals", "_token")
    leaves_at_once: ClassVar[bool] = False  # the permit is given back (awaited) first

    def __init__(
        self,
        core: Core,
        timeout: float | None,
        client: str | None,
        permit: Permit,
        refusals: Refusals,
        level: int = DEFAULT_RANK,
    ) -> None:
        super().__init__(core, timeout, client, level)
        self._permit = permit
        self._refusals = refusals
        self._token: object | None = None

    async def __aenter__(self) -> _PermitSlot:
        # Slot.__aenter__ with one step more, the permit, between taking the local slot and
        # counting the call admitted (a call refused its permit was never admitted).
        core = self._core
        arrival = core.clock()
        if self._client is not None or core.fair is not None:
            if not core.arrive(self._client, self._level):
                await core.wait_as_client(self._client, self._level)
        elif core.active < core.max_active:  # a free local slot, taken without yielding
            core.active += 1
        else:
            await core.wait(None)  # sheds (and reports) queue_full or queue_timeout
        try:
            permit, deadline = self._permit, arrival + core.queue_timeout
            if getattr(permit, "takes_rank", False) is True:
                self._token = await permit.take(deadline, self._level)  # type: ignore[call-arg]
            else:
                self._token = await permit.take(deadline)
        except TimeoutError:  # no permit in time: the guard's own refusal
            refusals = self._refusals
            # Counted and advised while the local slot is still held, as every refusal is.
            busy = refusals.refuse(
                "queue_timeout", len(core.waiters), refusals.busy, None, None, self._level
            )
            self._give_back_local()
            raise busy from None
        except BaseException as failure:
            self._give_back_local()
            ends = core.ends
            if ends is not None and isinstance(failure, anyio.get_cancelled_exc_class()):
                # Cancelled waiting for its permit: the call's end (no duration, never run).
                try:
                    ends.finished("cancelled", None)
                except Exception as broken:  # observers never change an outcome
                    observer_failed(ends, "finished", broken)
            raise
        return self._hold(core.clock() - arrival, core.ranked[self._level])

    def _give_back_local(self) -> None:
        """The local slot of a call refused its permit (or cancelled waiting for it)."""
        core = self._core
        if self._client is not None:
            core.fair.ended(self._client)  # type: ignore[union-attr]  # kept
        if core.levels is not None:
            core.levels.ended(self._level)
        core.release()

    def take_free(self) -> bool:
        return False  # a local slot is not enough: the permit is awaited (``__aenter__``)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return await self.aleave(exc_type, exc, tb)

    async def aleave(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        outcome: Outcome = "ok",
    ) -> bool:
        token, self._token = self._token, None
        if token is not None:
            clock = self._core.clock
            giving = clock()
            # Shielded: a body cancelled by its deadline must still give its permit back.
            with anyio.CancelScope(shield=True):
                await self._permit.give_back(token)
            # The hold an adaptive limit learns from is the call's, not the permit's round trip
            # (a Redis that stalls is not a tool that slowed down).
            self._start += clock() - giving
        return self.leave(exc_type, exc, tb, outcome)

    async def arelease(self) -> None:
        """Give the permit and the local slot back (for slots taken with ``acquire()``)."""
        await self.__aexit__(None, None, None)
