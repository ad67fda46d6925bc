"""What a finished call teaches an adaptive limit, and how its lesson is put in force.

``_feedback.py`` decides what a call's outcome says of the tool's capacity (a sample, a drop, an
overload error, or nothing); ``LimitLearning.learn`` feeds that to the ``Limit`` with the call's
hold (an overload error to its optional ``on_overload``, else as a drop), learns
how fast slots open, and applies what the limit then says: a new limit in force (``_set_limit``:
a raise admits waiters at once, a cut cancels nothing), a default queue following the tool's
parallelism (``_follow_parallelism``), the discipline's standing limit. Only an adaptive guard
has one; a fixed guard's calls teach nothing.
"""

from __future__ import annotations

import logging
import math
from typing import cast

from .._log import log_event
from .._observer import observer_failed
from ._core import Core
from ._discipline import whole_calls
from ._feedback import ALONE, OVERLOAD, RATE, CapacityFeedback, Seat
from ._limit import Limit, OvertakingLimit
from ._pacing import PaceTimer, RatePacer
from ._refusal import Refusals
from ._service_time import EWMA_ALPHA, ServiceTimeEstimator

__all__ = [
    "LIMIT_LOG_SECONDS",
    "QUEUE_PER_PARALLEL_CALL",
    "QUEUE_PER_SLOT",
    "LimitLearning",
    "default_max_queue",
    "parallelism_of",
]

#: The default queue: this many waiters per slot.
QUEUE_PER_SLOT = 10
#: ... and per call the tool serves in parallel under an adaptive limit that estimates it: such
#: a limit runs above the parallelism on purpose, to find more (``GradientLimit`` settles at
#: about twice it), so about one call per parallel call already waits inside the tool. Counted
#: in, a full queue waits as long as under a fixed limit equal to the parallelism; left out, the
#: first second of a 4x overload waited two calls longer, and 34 of seeds 1-60 of the one-minute
#: demo met every target, not 39 (``python benchmarks/virtual_demo.py --seeds 1-60
#: --max-active auto``, with the slots under overload of ``QueueDiscipline.slots_in_force``).
QUEUE_PER_PARALLEL_CALL = QUEUE_PER_SLOT - 1
#: An adaptive limit's moves by half or more are logged at most this often per tool (seconds).
LIMIT_LOG_SECONDS = 1.0

_NUMBER = (int, float)  # a tuple, not ``int | float``: that makes a union object per call
_INF = math.inf


class LimitLearning:
    """The lessons of one adaptive guard's finished calls (see the module). ``queue_follows``:
    the queue is the default one, which follows the parallelism the limit estimates."""

    __slots__ = (
        "_adaptive",
        "_core",
        "_estimates",
        "_feedback",
        "_limit_logged",
        "_limit_read",
        "_log_due",
        "_on_overload",
        "_on_overtaking_sample",
        "_openings",
        "_overtaking",
        "_paced_queue",
        "_pacer",
        "_parallel_calls",
        "_queue_floor",
        "_queue_follows",
        "_refusals",
        "_standing",
        "_timer",
    )

    def __init__(
        self, core: Core, refusals: Refusals, adaptive: Limit, prior: float, queue_follows: bool
    ) -> None:
        self._core = core
        self._refusals = refusals
        self._adaptive = adaptive
        self._overtaking = getattr(adaptive, "learns_overtaking", False) is True
        if self._overtaking:  # bound once: each call's sample then costs no look-up more
            self._on_overtaking_sample = cast(OvertakingLimit, adaptive).on_sample
        self._estimates = hasattr(adaptive, "parallelism")  # of the calls served in parallel
        # What an overload error teaches (``GradientLimit.on_overload``); a limit without it
        # takes one as a drop.
        on_overload = getattr(adaptive, "on_overload", None)
        self._on_overload = on_overload if callable(on_overload) else None
        # Each finished call's signal (``_feedback.py``), from the seat it took with its slot.
        # The calls seen served at once are the limit's record (``GradientLimit.served_at_once``),
        # read by the feedback for an overload error's shape, not kept twice.
        at_once = (lambda: adaptive.served_at_once) if hasattr(adaptive, "served_at_once") else None
        self._feedback = core.capacity = CapacityFeedback(core.queued_by_others, at_once)
        # Admissions paced at a learnt rate, after overload errors of a tool limited by rate.
        self._pacer = RatePacer(
            self._feedback,
            lambda: core.shed_full + core.shed_timeout,
            lambda: core.latest_start,
            lambda: core.admitted - core.active,
        )
        self._timer = PaceTimer(core.name)  # spaces the paced admissions between calls' ends
        self._paced_queue = False  # the default queue is held to the pace's (``_pace_queue``)
        # The time between slot openings at saturation, learnt from each call's hold over the
        # calls it shared the tool with. The mean hold over the slots in force is wrong for as
        # long as the mean lags a moved limit (a small limit moves often).
        self._openings = core.openings = ServiceTimeEstimator(prior)
        self._parallel_calls = parallelism_of(adaptive)  # as of the last finished call
        # The limit as last read (None: to be read after the next sample): a limit whose
        # sample says nothing moved is not read again, nor its parallelism.
        self._limit_read: object = None
        self._queue_follows = queue_follows
        self._queue_floor = core.max_queue  # a default queue never shrinks below its first
        self._limit_logged = core.max_active  # the limit last reported in the log
        self._log_due = -math.inf
        # What the discipline's standing limit was last put in force for (``learn``): none yet.
        self._standing: tuple[int, float | None, float] | None = None

    def learn(
        self,
        seat: Seat,
        start: float,
        held: float,
        inflight: int,
        timeout: float | None,
        outcome: str,
        overload: bool,
        overtook: int,
        reached_tool: bool,
    ) -> None:
        """Feed one finished call to the limit, as far as it tells of the tool's capacity
        (``CapacityFeedback``), and apply the limit it then gives. The call took its slot at
        ``start`` with ``inflight`` calls holding one (itself included), held it ``held``
        seconds, overtook ``overtook`` calls that took a slot before it, and ended with
        ``outcome`` (``overload``: its answer said the tool is overloaded)."""
        core = self._core
        feedback = self._feedback
        dropped = feedback.ended(
            seat, start, held, inflight, timeout, outcome, overload, reached_tool
        )
        if dropped is None:
            # It never ran, or it teaches nothing: a timeout of its caller's own, a
            # cancellation, an error that does not rise with the load (``_feedback.py``).
            # While paced its slot is still the pace's: not handed on without a token (a
            # paced tool's unnamed 429s mostly end here).
            if self._pacer.pacing:
                self._pace_slots(start + held)
            return
        parallel = self._parallel_calls
        try:
            if dropped is False or dropped is True:
                if parallel is None:
                    # A limit with no estimate: only a call that found every slot taken tells
                    # how fast they open.
                    if inflight >= core.max_active:
                        self._openings.observe(held / inflight)
                else:
                    # Every call tells it, as under a fixed limit: its hold over the calls it
                    # shared the tool with (in flight at its start and its end, averaged: a
                    # crowd thinned by a lull let it through sooner), or over the parallelism
                    # when more (it did not wait inside), rounded down (``// 1.0``: math.floor
                    # without a call): to the nearest, an estimate of 1.6 for one worker read
                    # the tool as serving twice as fast as it does (docs/adaptive-tried.md).
                    crowd = 0.5 * (inflight + core.active)
                    in_parallel = parallel // 1.0
                    opening = held / (crowd if crowd > in_parallel else in_parallel)
                    openings = self._openings  # ServiceTimeEstimator.observe, inlined
                    if openings.samples:
                        openings.mean += EWMA_ALPHA * (opening - openings.mean)
                    else:
                        openings.mean = opening
                    openings.samples += 1
                if self._overtaking:
                    moved = self._on_overtaking_sample(
                        start, held, inflight, dropped, overtook=overtook
                    )
                else:
                    moved = self._adaptive.on_sample(start, held, inflight, dropped)
            elif dropped is RATE or (dropped is OVERLOAD and self._pacer.explains(inflight)):
                # The tool's limit is a rate: paced, the limit left alone.
                self._pacer.rate_shaped(start + held)
                moved = False
            else:  # an overload error: not a hold the slots' openings are learnt from
                moved = self._overloaded(start, held, inflight, overtook, dropped is ALONE)
            limit = self._limit_read
            if moved is False and limit is not None:  # the limit says neither moved
                parallelism = parallel
            else:
                adaptive = self._adaptive
                limit = self._limit_read = adaptive.limit
                # parallelism_of, inlined: it runs for every call under an adaptive limit.
                parallelism = getattr(adaptive, "parallelism", None) if self._estimates else None
                if parallelism is not None:
                    if isinstance(parallelism, _NUMBER) and 1 <= parallelism < _INF:
                        if type(parallelism) is not float:  # (a float as it is: no call)
                            parallelism = float(parallelism)
                    else:
                        parallelism = None
                self._parallel_calls = parallelism
        except Exception as failure:  # a limit's bug never changes a call's answer
            self._limit_read = None  # both read anew after the next sample, whatever it says
            observer_failed(self._adaptive, "on_sample", failure)
            return
        discipline = core.discipline
        if isinstance(limit, int) and limit >= 1:
            waiters = core.waiters
            pacer = self._pacer
            # Paced (``_pacing.py``): not above what the pace allows, which stands in for the
            # slots under overload below (the pace, not the parallelism, is the tool's limit).
            paced = pacer.slots(start + held, core.active, core.admitted) if pacer.pacing else None
            if paced is not None:
                # Not above what the pace allows, nor held by the limit below what the pace
                # needs in flight.
                limit = min(paced, max(limit, pacer.needed()))
                if self._queue_follows:
                    self._pace_queue(pacer.queue())
                if not self._timer.running:
                    self._timer.start(self._pace_tick)
            elif self._paced_queue:  # the pacer let go: the default queue again
                self._paced_queue = False
                self._follow_parallelism(parallelism or 1.0)
            elif waiters:  # (without waiters no queue stands: the limit is in force as it is)
                # Under sustained overload, not above what the tool serves in parallel (and one).
                limit = discipline.slots_in_force(limit, parallelism, start + held, len(waiters))
            if limit != core.max_active:
                self._set_limit(limit)
        # Only when the estimate moved: GradientLimit moves it once a window, not every call.
        if parallelism is not None and parallelism != parallel and self._queue_follows:
            self._follow_parallelism(parallelism)
        # A standing queue is held to a few calls per call the tool serves in parallel: for a
        # limit that runs above the tool's parallelism (to find it), the limit would overstate
        # it, and the queue's wait, by as much. Without an estimate: held per slot. Put anew
        # only when what it rests on moved (the slots, the parallelism, the offered load; the
        # queue in force moves only with the parallelism): mostly it did not. (A tuple's items
        # compare by identity first, so a NaN load, before any, counts as the same.)
        standing = (core.max_active, parallelism, discipline.overload.offered_load)
        if standing != self._standing:
            self._standing = standing
            discipline.on_limit(core.max_active, parallelism)

    def _overloaded(
        self, start: float, held: float, inflight: int, overtook: int, alone: bool
    ) -> bool | None:
        """An overload error (``alone``: of a call that ran alone) told to the limit: its
        ``on_overload`` if it has one, else a drop (a call alone tells such a limit nothing)."""
        if not alone:
            # While paced, a ceiling below the slots the pace needs would fight the pace.
            inflight = max(inflight, self._pacer.needed() + 1)
        on_overload = self._on_overload
        if on_overload is not None:
            moved: bool | None = on_overload(start, held, inflight, overtook=overtook)
            return moved
        if alone:
            return False
        if self._overtaking:
            return self._on_overtaking_sample(start, held, inflight, True, overtook=overtook)
        return self._adaptive.on_sample(start, held, inflight, True)

    @property
    def paced_rate(self) -> float | None:
        """The pace in force (calls/s) while the tool is paced at a rate learnt, else None."""
        rate = self._pacer.rate
        return None if rate != rate else rate

    @property
    def pace_timer_running(self) -> bool:
        """Whether the pace timer runs now (a loop callback pending, or trio's task alive)."""
        return self._timer.running

    def stop_pacing(self) -> None:
        """The guard closed (or its server stopped): the pace timer stops at once (no callback
        or task left behind) and the pacer lets go, so that calls still waiting are admitted at
        the limit as the calls in flight end, not left to a timer that stopped. A rate-shaped
        error of a call still running paces again."""
        self._timer.stop()
        self._pacer.let_go()
        limit = self._adaptive.limit
        if isinstance(limit, int) and limit > self._core.max_active:
            self._set_limit(limit)

    def _pace_slots(self, end: float) -> None:
        """At the end of a call that taught the limit nothing, while paced: the slots the pace
        allows (``learn``'s, the limit as it stands)."""
        core = self._core
        pacer = self._pacer
        paced = pacer.slots(end, core.active, core.admitted)
        limit = self._adaptive.limit
        if paced is not None and isinstance(limit, int) and limit >= 1:
            limit = min(paced, max(limit, pacer.needed()))
            if limit != core.max_active:
                self._set_limit(limit)

    def _pace_tick(self) -> float | None:
        """The pace timer's tick (``_pacing.PaceTimer``): a slot for a token earned, handed to
        the next waiter (or kept free for the next arrival); the seconds until the next token,
        or None once the pacer let go or no call waits."""
        core = self._core
        pacer = self._pacer
        wait = pacer.until_token(core.clock(), core.admitted)
        if wait is None:
            return None
        if wait > 0.0:
            return wait
        if core.active >= core.max_active and core.active < max(
            self._adaptive.limit, pacer.needed()
        ):
            self._set_limit(core.active + 1)  # hands it to the next waiter, if one waits
            pacer.granted(core.clock())
        # The call handed the slot counts as admitted once its task runs: the next token is
        # looked for one token's time on, not at once.
        return 1.0 / pacer.rate if core.waiters or core.active else None

    def _pace_queue(self, queue: int) -> None:
        """A default queue while paced (``RatePacer.queue``): a call that would wait longer for
        its turn at the pace is refused at once, with the advice of when to come back."""
        core = self._core
        self._paced_queue = True
        if queue != core.max_queue:
            core.max_queue = core.discipline.max_queue = queue
            self._refusals.on_queue()

    def _follow_parallelism(self, parallelism: float) -> None:
        """A default queue under an adaptive limit: ``QUEUE_PER_PARALLEL_CALL`` waiters per call
        the tool serves in parallel, to the nearest call, never below the first. A queue that
        shrinks refuses newcomers; it cancels no waiter."""
        core = self._core
        queue = max(default_max_queue(parallelism, adaptive=True), self._queue_floor)
        if queue != core.max_queue:
            core.max_queue = core.discipline.max_queue = queue
            self._refusals.on_queue()  # the envelopes report the queue in force

    def _set_limit(self, limit: int) -> None:
        """Put ``limit`` in force: a raise admits waiters at once; a decrease cancels nothing
        (the calls in flight drain, and no slot is handed on above the limit)."""
        core = self._core
        logged = self._limit_logged
        if (limit >= 2 * logged or 2 * limit <= logged) and core.clock() >= self._log_due:
            # A move by half or more, at most once per LIMIT_LOG_SECONDS per tool.
            self._limit_logged = limit
            self._log_due = core.clock() + LIMIT_LOG_SECONDS
            log_event(logging.INFO, "concurrency_limit_moved", tool=core.name, limit=limit,
                      previous=logged)  # fmt: skip
        core.max_active = limit
        self._refusals.on_limit(limit)
        waiters = core.waiters
        while waiters and core.active < limit:
            core.active += 1
            if not core.hand_off():  # kept for calls of a higher priority (``_levels.py``)
                break


def default_max_queue(parallel: float, *, adaptive: bool = False) -> int:
    """The queue a guard keeps when none is given: ``QUEUE_PER_SLOT`` waiters per slot, or,
    under an ``adaptive`` limit, ``QUEUE_PER_PARALLEL_CALL`` per call it estimates the tool
    serves in parallel, to the nearest call (halves up). Not rounded up: a window of lucky calls
    reads 2.2 for a tool of 2, and a queue of 30 made the first second of an overload wait
    behind 20-29 calls; a tool partly used, which reads below what it serves, is held up by the
    calls it is seen serving at once."""
    per_call = QUEUE_PER_PARALLEL_CALL if adaptive else QUEUE_PER_SLOT
    return per_call * whole_calls(parallel)


def parallelism_of(adaptive: object) -> float | None:
    """An adaptive limit's estimate of the calls the tool serves in parallel (its optional
    ``parallelism``), or None: none, or a nonsense one (not a finite number >= 1)."""
    parallelism = getattr(adaptive, "parallelism", None)
    if isinstance(parallelism, int | float) and 1 <= parallelism < math.inf:
        return float(parallelism)
    return None
