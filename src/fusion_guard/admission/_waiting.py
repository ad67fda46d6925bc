"""Arrival at a taken guard: refuse at once, or queue (``_queue.py``).

Where a call that found no free slot is judged (``Waiting.wait``): a full queue refuses it
(``queue_full``, or a lighter client's call takes the heaviest client's newest place); a
standing queue under sustained overload is held to ``standing_limit`` (``queue_full``, detail
``standing``); a call whose expected wait already exceeds ``queue_timeout`` is shed at once
(``queue_timeout``, detail ``predicted``); any other call queues. And where a keyed call
arrives (``Waiting.arrive``): refused over its client's cap (``client_limit``), else it takes a
free slot or goes on to ``wait``.
"""

from __future__ import annotations

from collections.abc import Coroutine

from .._priority import DEFAULT_RANK
from ._core import Core, Waiter
from ._discipline import LOOK_EVERY
from ._fairness import FairQueue, Tenant
from ._levels import CAPPED_FROM, Levels
from ._queue import Queue, key_of
from ._refusal import Refusals

__all__ = ["Waiting"]


class Waiting:
    """The arrival of one guard's calls at its queue (see the module). ``fair``: serve waiting
    calls in turn across client keys; ``per_client``: the cap on one key's calls running or
    waiting (None: no cap); ``share``: of the slots, what calls below ``interactive`` may hold
    while calls above them wait or arrived lately (``_levels.py``)."""

    __slots__ = ("_core", "_fair_order", "_per_client", "_queue", "_refusals", "_share")

    def __init__(
        self,
        core: Core,
        refusals: Refusals,
        queue: Queue,
        *,
        fair: bool,
        per_client: int | None,
        share: float = 1.0,
    ) -> None:
        self._core = core
        self._refusals = refusals
        self._queue = queue
        self._fair_order = fair
        self._per_client = per_client
        self._share = share  # of the slots below-interactive calls may hold (``_levels.py``)

    def wait(self, tenant: Tenant[Waiter] | None = None) -> Coroutine[None, None, float]:
        """``await wait()``: queue for a slot and return the time waited; ``tenant``: the
        caller's client, once clients' records are kept.

        Raises ServerBusy before any coroutine exists when the caller is shed at arrival (queue
        full, or predicted to time out): the shed path stays short. At a full queue a lighter
        client's call takes the place of the heaviest client's newest instead (fair shares).
        """
        core = self._core
        refusals = self._refusals
        queued = len(core.waiters)
        displaced = False
        if queued >= core.max_queue:
            if not self._displace_for(tenant):
                raise refusals.refuse(
                    "queue_full",
                    queued,
                    refusals.busy,
                    None,
                    key_of(tenant),
                    None if tenant is None else tenant.rank,
                )
            queued -= 1
            displaced = True
        now = core.clock()
        discipline = core.discipline
        if now - discipline.overload.last_look >= LOOK_EVERY:
            self._look_at_rates(now)
        if queued and discipline.rejudging:  # an arrival is a moment to look (after the rates)
            queued = self._queue.rejudge(now)
        discipline.arrival(now, queued)
        # No standing-queue judgement before a call has finished: the rate the slots serve is
        # then the prior, a guess (a fresh 2-slot tool of 1 s calls, on its 0.1 s prior, read a
        # burst of 20 calls 5 ms apart as overload, held its queue of 20 to 8 and refused each
        # extra caller 2-3 times). Predictive shedding, on the calls in flight, still applies.
        # Under priorities a newcomer is held to the standing limit by the calls served before
        # it (its priority and above): the calls below it give way to it, not it to them.
        # And while calls below it hold slots or wait, the overload is theirs: they give way, so
        # the calls above them are not held to the standing limit (max_queue and predictive
        # shedding still bound their wait).
        levels = core.levels
        ahead = queued if levels is None else levels.ahead(tenant.rank)  # type: ignore[union-attr]
        if (
            ahead
            and (levels is None or not levels.yielded_to(tenant.rank))  # type: ignore[union-attr]
            and not displaced
            and core.service.samples
            and discipline.holds_standing(now, ahead, core.service.mean)
        ):
            if not self._displace_for(tenant) and not (
                levels is not None and levels.owed(tenant, now)  # type: ignore[arg-type]
            ):
                standing = refusals.standing()
                raise refusals.refuse(
                    "queue_full",
                    queued,
                    standing,
                    None,
                    key_of(tenant),
                    None if tenant is None else tenant.rank,
                )
            queued -= 1
        if discipline.predictive:
            fair = core.fair
            levels = core.levels
            if levels is not None:  # each priority judged by the wait it faces
                position = levels.position(tenant, core.active)  # type: ignore[arg-type]  # kept
            elif tenant is None or fair is None or not fair.serves_in_turn:
                position = queued + 1
            else:
                position = fair.position(tenant, queued, core.active)
            if discipline.would_time_out(
                position, now, core.max_active, core.service, core.latest_start
            ):
                raise refusals.refuse(
                    "queue_timeout",
                    queued,
                    refusals.predicted_busy,
                    None,
                    key_of(tenant),
                    None if tenant is None else tenant.rank,
                )
        return self._queue.join(now, tenant)

    def _displace_for(self, tenant: Tenant[Waiter] | None) -> bool:
        """Make room for a call of ``tenant`` at a full queue by refusing the heaviest client's
        newest queued call, when ``tenant`` is lighter enough (``FairQueue.displaced_by``)."""
        core = self._core
        fair = core.fair
        if tenant is None or fair is None:
            return False
        levels = core.levels
        if levels is not None:  # the lowest priority gives way first (``Levels.displaced_by``)
            given_way = levels.displaced_by(tenant, core.clock())
            if given_way is None:
                return False
            waiter, outranked = given_way
        else:
            displaced = fair.displaced_by(tenant, core.clock())
            if displaced is None:
                return False
            waiter, outranked = displaced[1], False
        del core.waiters[waiter]
        waiter.left = "outranked" if outranked else "displaced"
        waiter.wake()  # its own task raises the refusal (queue_full, or fair_share)
        return True

    def _look_at_rates(self, now: float) -> None:
        """Feed the overload detector (see ``_overload.py``) the counters kept anyway."""
        core = self._core
        arrivals = (
            core.admitted
            + core.shed_full
            + core.shed_timeout
            + core.cancelled_queued
            + core.shed_fair
            + core.shed_client
            + len(core.waiters)
        )
        openings = core.openings
        if openings is not None and openings.samples:
            opening = openings.mean
        else:
            opening = core.service.mean / core.max_active
        service = core.service
        core.discipline.overload.observe(now, arrivals, opening, service.samples, service.spread())

    # -- clients (fair shares, the per-client cap) --------------------------------------------

    def arrive(self, client: str | None, rank: int = DEFAULT_RANK) -> bool:
        """A call of ``client`` (None: without a key) and priority ``rank`` arrives: refuse it
        over its client's cap, else take a free slot for it if there is one and its priority
        may (``Levels.may_take``) (True), or leave it to queue (False)."""
        core = self._core
        fair = core.fair
        if fair is None:
            fair = self._keep_clients()
        levels = core.levels
        if levels is None and rank != DEFAULT_RANK:
            levels = self._keep_levels(fair)
        cap = self._per_client
        if cap is not None and client is not None:
            queued = fair.queued(client) if levels is None else levels.queued(client)
            own = (fair.active(client, 0), queued)
            if own[0] + own[1] >= cap:
                refusals = self._refusals
                raise refusals.refuse(
                    "client_limit", len(core.waiters), refusals.busy, own, None, rank
                )
        if levels is not None:
            now = core.clock()
            levels.seen[rank] = now
            if core.active >= core.max_active or not levels.may_take(
                rank, core.max_active, now, core.service.mean, core.active
            ):
                return False
            if rank >= CAPPED_FROM and levels.ahead(rank):
                # A slot kept from the calls waiting at this priority (or above) while calls
                # above them were about, free again: theirs first, in turn, not the newcomer's.
                # Taken by whoever arrived next, it went mostly to the client that sends most:
                # keeping background out of the tool (``Levels.may_take``) brought the smaller
                # of two background clients of 10:1 demand to 0.897 of its fair share at 3x on
                # seed 6 (0.914 before that rule, and with this one).
                core.active += 1
                core.hand_off()  # to the highest waiting, which may take it (``may_take``)
                return False
            core.active += 1
            levels.started(rank, client, now)
            fair.started(client)
            return True
        if core.active < core.max_active:
            core.active += 1
            if client is not None:  # FairQueue.started, inlined: the keyed hot path
                record = fair.records.get(client)
                if record is None:
                    record = fair.client(client)
                record.running += 1
                fair.keyed_active += 1
            return True
        return False

    async def wait_as_client(self, client: str | None, rank: int = DEFAULT_RANK) -> float:
        """Queue a keyed call (its client's records are kept): ``wait`` as its client, at its
        priority ``rank``."""
        core = self._core
        fair = core.fair
        assert fair is not None  # kept from the first arrival with a key
        levels = core.levels
        records = fair if levels is None else levels
        tenant = (
            fair.tenant(client) if levels is None else levels.tenant(client, rank, core.clock())
        )
        try:
            return await self.wait(tenant)
        except BaseException:
            records.forget_if_idle(tenant)  # a refused newcomer leaves no record behind
            raise

    def _keep_clients(self) -> FairQueue[Waiter]:
        """Start keeping clients' records (the first call with a key): calls already waiting
        form the keyless client."""
        core = self._core
        fair = core.fair = FairQueue(serves_in_turn=self._fair_order, now=core.clock())
        for waiter in core.waiters:
            waiter.tenant = fair.anonymous
            fair.push(fair.anonymous, waiter, core.active, waiter.since)
        return fair

    def _keep_levels(self, fair: FairQueue[Waiter]) -> Levels[Waiter]:
        """Start keeping priorities (the first call not of the default one): the calls waiting
        are of the default priority, their clients' queue becomes that priority's."""
        core = self._core
        levels = core.levels = Levels(fair, self._share, core)
        if core.active:  # the calls in flight arrived lately, of the default priority
            levels.seen[DEFAULT_RANK] = core.clock()
        for waiter in core.waiters:
            levels.adopt(waiter)
        return levels
