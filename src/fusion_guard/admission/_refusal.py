"""Refusals: a decision to shed turned into its ServerBusy (or a deadline into HandlerTimeout),
counted, reported and advised, from envelopes rendered once and kept.

One function, ``Refusals.refuse``, for every shed of the guard's own (under overload most calls
take it), whoever decided it: the limiter at a full guard, the waiting at arrival or in the
queue, a permit with no lease in time. It reads the core's figures and writes only its
counters.

The advice is decided here too. Each refusal is a small promise (``RetryPromises``): the k-th
refused caller is told when the k-th coming opening is expected, so callers who follow the
advice come back spread out at the drain rate (one opening every ``hold / max_active``, or
under an adaptive limit the time between openings its lessons teach), not all at once into a
second refusal. A *promise cursor* holds the time of the last opening
promised; every refusal advances it by one step, and it never lags behind
``now + (queued + 1) * step`` (the queue ahead drains first).
"""

from __future__ import annotations

import math

from .._exceptions import HandlerTimeout, ServerBusy
from .._observer import ShedReason, observer_failed
from .._priority import DEFAULT_RANK, PRIORITY_NAMES
from ..wire._shedding import ServerBusyTemplate
from ._core import Core
from ._deadline import Timeouts

__all__ = [
    "MAX_CALLERS",
    "MAX_LIMIT_TEMPLATES",
    "FlaggedBusyTemplate",
    "Refusals",
    "RetryPromises",
]

#: SERVER_BUSY envelopes kept rendered per limit an adaptive limit has been at.
MAX_LIMIT_TEMPLATES = 64

#: retry_after is never below one millisecond (the wire contract needs it > 0).
MIN_RETRY_AFTER = 0.001

#: Known callers' promises kept at most per guard (about 100 bytes each).
MAX_CALLERS = 65_536
_MIN_SWEEP = 1024


class FlaggedBusyTemplate(ServerBusyTemplate):
    """SERVER_BUSY with one more detail, ``FLAG`` = ``true``, after the standard ones (rendered
    once): ``predicted`` for a call shed at arrival on its predicted wait, ``standing`` for one
    refused by the standing-queue limit (whose ``max_queue`` is that limit: the queue in force)."""

    __slots__ = ()

    def __init__(self, tool: str, max_active: int, max_queue: int, flag: str) -> None:
        super().__init__(tool, max_active, max_queue, flag=flag)


class Refusals:
    """The refusals of one guard: ``busy`` and ``predicted_busy`` are the SERVER_BUSY envelopes
    of the limit and queue in force (``on_limit`` / ``on_queue`` follow them); ``refuse`` and
    ``handler_timeout`` build what is raised. ``per_client``: the cap a ``client_limit`` refusal
    reports."""

    __slots__ = (
        "_by_limit",
        "_by_priority",
        "_core",
        "_per_client",
        "_promises",
        "_ranked",
        "_standing",
        "_timeouts",
        "busy",
        "predicted_busy",
    )

    def __init__(self, core: Core, max_retry_after: float, per_client: int | None) -> None:
        self._core = core
        self._promises = RetryPromises(max_retry_after)
        # Under priorities, each priority's promises (the default's are the guard's own): the
        # openings a priority is promised are not taken by the retries of those below it.
        self._ranked = [
            self._promises if rank == DEFAULT_RANK else RetryPromises(max_retry_after)
            for rank in range(len(PRIORITY_NAMES))
        ]
        self._per_client = per_client
        self.busy, self.predicted_busy = self._templates(core.max_active)
        self._standing = FlaggedBusyTemplate(
            core.name, core.max_active, core.discipline.standing_limit, "standing"
        )
        self._by_limit: dict[int, tuple[ServerBusyTemplate, FlaggedBusyTemplate]] = {}
        # Under priorities, each template's variant for a refused call's priority (the
        # admission level after the standard details), made on first use, remade with them.
        self._by_priority: dict[tuple[ServerBusyTemplate, int], ServerBusyTemplate] = {}
        self._timeouts = Timeouts(core.name)

    def on_limit(self, limit: int) -> None:
        """The limit in force moved to ``limit``: the envelopes report it."""
        templates = self._by_limit.get(limit)
        if templates is None:
            if len(self._by_limit) >= MAX_LIMIT_TEMPLATES:
                self._by_limit.clear()
            templates = self._by_limit[limit] = self._templates(limit)
        self.busy, self.predicted_busy = templates
        self._by_priority.clear()

    def on_queue(self) -> None:
        """The queue in force moved: the envelopes report it."""
        self._by_limit.clear()
        self._by_priority.clear()
        self.busy, self.predicted_busy = self._templates(self._core.max_active)

    def _templates(self, limit: int) -> tuple[ServerBusyTemplate, FlaggedBusyTemplate]:
        """The SERVER_BUSY envelopes for ``limit`` slots (details report the limit in force)."""
        core = self._core
        return (
            ServerBusyTemplate(core.name, limit, core.max_queue),
            FlaggedBusyTemplate(core.name, limit, core.max_queue, "predicted"),
        )

    def standing(self) -> FlaggedBusyTemplate:
        """The SERVER_BUSY envelope of the standing-queue limit, remade when the slots or that
        limit moved: its ``max_queue`` is the standing limit, the queue in force, so that a
        ``queue_full`` refusal never reads as a full queue at 8 of 20."""
        template = self._standing
        core = self._core
        standing = core.discipline.standing_limit
        if template.max_queue != standing or template.max_active != core.max_active:
            template = self._standing = FlaggedBusyTemplate(
                core.name, core.max_active, standing, "standing"
            )
        return template

    def _at_priority(self, template: ServerBusyTemplate, rank: int) -> ServerBusyTemplate:
        """``template`` for a call of priority ``rank``: its details then say the call's
        priority and the priorities admitted now (those above it, which are served first and
        may displace it), so that a client can hold back its lower-priority work locally."""
        variant = self._by_priority.get((template, rank))
        if variant is None:
            if len(self._by_priority) >= MAX_LIMIT_TEMPLATES:
                self._by_priority.clear()
            admitting = ",".join(p.value for p in PRIORITY_NAMES[:rank]) or "none"
            extra = (("priority", PRIORITY_NAMES[rank].value), ("admitting", admitting))
            variant = self._by_priority[(template, rank)] = ServerBusyTemplate(
                self._core.name, template.max_active, template.max_queue,
                flag=template.flag, extra=extra,
            )  # fmt: skip
        return variant

    def refuse(
        self,
        reason: ShedReason,
        queued: int,
        template: ServerBusyTemplate,
        own: tuple[int, int] | None = None,
        caller: str | None = None,
        rank: int | None = None,
    ) -> ServerBusy:
        """Count, report and advise one refusal (one function: under overload most calls take
        it); ``own``: the refused call's client's calls running and waiting, which the envelope
        then reports (``fair_share``, ``client_limit``); ``caller``: its client key, when known
        (one promise per caller, see ``RetryPromises``); ``rank``: its priority, once the guard
        keeps priorities (its advice then waits out only the calls served before it, and its
        envelope says the admission level)."""
        core = self._core
        levels = core.levels
        counted = template  # the counters below tell the guard's own templates apart
        promises = self._promises
        observer = core.observer
        if levels is not None and rank is not None:
            template = self._at_priority(template, rank)
            promises = self._ranked[rank]
            observer = core.ranked[rank]  # the refused call's priority's
        active = core.active
        now = core.clock()
        service = core.service
        in_flight = now - core.latest_start
        # ServiceTimeEstimator.hold, inlined (under overload most calls come here): the mean
        # (or the prior), or the age of the youngest call in flight if longer.
        mean = service.mean
        hold = in_flight if in_flight > mean else mean
        if reason == "client_limit":
            # About the client's own calls: when one of them is expected to end (one of its n
            # running calls every hold / n; with none running yet, a hold after its first
            # starts). No promise: the openings the crowd is told of are the guard's slots.
            assert own is not None  # refused over its own cap
            retry_after = hold / max(own[0], 1)
            core.shed_client += 1
        else:
            # While the hold is the prior alone (ServiceTimeEstimator.guessing, inlined), the
            # promise waits out only as much of the queue ahead as the calls in flight vouch
            # for: its drain at their age, which no hold can undercut. Waited out at the prior,
            # a prior too long sends callers back to idle slots (a fresh 2-slot tool of 50 ms
            # calls, its queue of 20 full, took 1.94x the ideal drain time); not waited out at
            # all, a prior too short sends them back to the queue that refused them. Once
            # measured, the whole queue ahead.
            guessing = not service.samples and in_flight <= mean
            if levels is not None and rank is not None:  # only the calls served before it
                queued_ahead = min(queued, levels.ahead(rank))
            else:
                queued_ahead = queued
            ahead = int(queued_ahead * in_flight / hold) if guessing else queued_ahead
            # An anonymous promise runs at most a full guard's worth of openings (every slot
            # and every queue place) past the drain and the known callers' promises.
            crowd = core.max_active + core.max_queue
            # The drain step. Under an adaptive limit, the time between openings its lessons
            # teach (``Core.openings``, the overload detector's figure), raised as the hold is
            # by a call in flight older than the mean: the mean hold over the slots in force
            # mixes holds measured at one limit with the slots of another (past the tool's
            # parallelism the holds grow with the calls in flight, which wait inside it).
            openings = core.openings
            if openings is not None and openings.samples and mean > 0.0:
                step = openings.mean * hold / mean
            else:
                step = hold / core.max_active
            retry_after = promises.promise(now, ahead, step, crowd, caller)
            if reason == "queue_full":
                core.shed_full += 1
                core.shed_standing += counted is self._standing
            elif reason == "fair_share":
                core.shed_fair += 1
            else:
                core.shed_timeout += 1
                core.predicted += counted is self.predicted_busy
        if observer is not None:
            try:
                observer.shed(reason, active, queued, retry_after)
            except Exception as failure:  # observers never change an outcome
                observer_failed(observer, "shed", failure)
        if own is None:
            response = template.render(reason, active, queued, retry_after)
        else:
            cap = self._per_client if reason == "client_limit" else None
            response = template.render_for_client(reason, active, queued, retry_after, *own, cap)
        # ServerBusy(response, retry_after, reason), the same object (``args`` is the envelope
        # text) built without the two-level ``__init__`` chain, which cost a sixth of the shed
        # path, nor a function around it.
        busy: ServerBusy = _new_exception(ServerBusy, response.text)
        busy.response = response
        busy.retry_after = retry_after
        busy.reason = reason
        return busy

    def handler_timeout(self, timeout: float) -> HandlerTimeout:
        """The TIMEOUT of a body its ``timeout`` ended, counted."""
        self._core.handler_timeouts += 1
        return self._timeouts.refusal(timeout)


_new_exception = Exception.__new__


class RetryPromises:
    """The promise cursor: successive refusals are told successive expected openings.

    Nobody can run it far ahead for others. A known caller (its client key) holds one promise
    until its time, kept under a hash of the key (never the key; at most ``MAX_CALLERS``, past
    which a caller counts as anonymous): refused again before then, it is told the same time
    and the cursor stays. An anonymous refusal is never promised more than ``crowd`` openings
    (the guard passes its slots plus its queue: the most calls it can hold at once) past the
    later of the queue's drain and the opening after the known callers' last (the *frontier*),
    however many refusals came before: a client polling in a loop cannot push everyone's
    advice out to ``max_retry_after``.
    """

    __slots__ = ("_callers", "_cursor", "_frontier", "_max", "_sweep_at")

    def __init__(self, max_retry_after: float) -> None:
        self._cursor = -math.inf
        self._frontier = -math.inf  # one step past the last opening promised to a known caller
        self._callers: dict[int, float] = {}  # a known caller's hash: its promised opening
        self._sweep_at = _MIN_SWEEP
        self._max = max_retry_after

    def promise(
        self, now: float, queued: int, step: float, crowd: int, caller: str | None = None
    ) -> float:
        """retry_after (seconds) for the caller refused at ``now`` with ``queued`` ahead.

        ``step`` is the drain step (the time between openings); ``crowd``: how many openings past
        the drain an anonymous promise may run (see the class); ``caller``: who is asking, when
        known. The result is at least one step (the next opening cannot be sooner than that),
        at most ``max_retry_after``.
        """
        ident = None if caller is None else self._known(hash(caller), now)
        if ident is not None:
            held = self._callers.get(ident)
            if held is not None and held > now:  # refused again before its time: the same one
                return held - now if held - now > MIN_RETRY_AFTER else MIN_RETRY_AFTER
        cursor = self._cursor + step
        floor = now + (queued + 1) * step
        if cursor < floor:
            cursor = floor
        if ident is None:  # anonymous: at most `crowd` openings past the known ones
            frontier = self._frontier
            bound = (frontier if frontier > floor else floor) + crowd * step
            if cursor > bound:
                cursor = bound
        ceiling = now + self._max
        if cursor > ceiling:
            cursor = ceiling
        if cursor > self._cursor or ident is not None:
            self._cursor = cursor
        if ident is not None:
            self._callers[ident] = cursor
            self._frontier = cursor + step
        wait = cursor - now
        return wait if wait > MIN_RETRY_AFTER else MIN_RETRY_AFTER

    def _known(self, ident: int, now: float) -> int | None:
        """``ident``, or None when the table is full of promises still to come (the caller is
        then advised as an anonymous one). Past promises are swept as the table doubles."""
        callers = self._callers
        if ident in callers:
            return ident
        if len(callers) >= self._sweep_at:
            callers = self._callers = {key: at for key, at in callers.items() if at > now}
            self._sweep_at = max(_MIN_SWEEP, 2 * len(callers))
        return None if len(callers) >= MAX_CALLERS else ident
