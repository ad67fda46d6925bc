"""An adaptive concurrency limit: the slot count found from the latency of the calls themselves.

``GradientLimit`` compares the latency of recent calls with the latency the tool has when it is
not crowded, in the manner of Envoy's adaptive-concurrency gradient controller, and moves the
limit in seconds:

- **The uncrowded latency** (the baseline) is the median of the last ``QUIET_SAMPLES`` quiet
  calls: calls that started with at most a quarter of the limit in flight, or with no more than
  the tool was lately seen serving at once, so few that the tool queues none of them. A new
  limit holds its initial value and takes its first baseline from the first ``FIRST_SAMPLES``
  quiet calls as they come (a probe, below, only if ``FIRST_PROBE_CALLS`` crowded calls come
  first); a slow tool's, once they amount to ``FIRST_SAMPLES x window`` seconds of service
  (``SLOW_WINDOW_SAMPLES`` calls of seconds). When no quiet call has come for ``probe_every``
  seconds (a busy tool runs at its limit), the limit drops to that bound until
  ``probe_samples`` quiet calls have finished, so the baseline follows a tool that slows down
  or speeds up; more workers do not change it. The first probe lasts until
  ``FIRST_PROBE_SAMPLES`` quiet calls have come, and holds the parallelism guess first, if
  higher, dropping to the bound only after ``PROBE_GRACE_CALLS`` crowded calls admitted under
  it: a burst that is ending sends quiet calls by itself.
- **The window**: at least ``window`` seconds and ``window_samples`` finished calls; their
  median latency is compared with the baseline (medians, since tool latencies are heavy-tailed).
  A window closes early, once its last ``EARLY_SAMPLES`` calls in a row each took
  ``EARLY_FACTOR`` times the tolerated latency or more (more calls when the tool's quiet calls
  are often that slow: ``EARLY_RUN_CHANCE``), and is decided on those calls alone (the
  calls of the window that ended before the tool slowed down do not hold it back): a tool that
  lost capacity answers so slowly that
  a full window of its calls would take seconds to gather. A window that would only grow the
  limit closes after ``GROWTH_SAMPLES_PER_SLOT`` calls per slot: at a small limit a full window
  is many services in a row, and a limit cut too low costs throughput for every one of them.
  Such a window grows the limit only on a gradient of ``GROWTH_GRADIENT``. A slow tool's
  window (calls longer than ``window``) closes once its calls amount to ``window_samples x
  window`` seconds of uncrowded service, after ``SLOW_WINDOW_SAMPLES`` calls at the least.
- **The gradient** ``tolerance * baseline / window median``, clamped to [0.5, 2]. Above 1.25
  the tool answers as fast as uncrowded: the limit grows by one slot, but only if the calls
  reached the limit in that window (otherwise nothing says a larger one is needed). Below
  1 / 1.25 the tool queues calls inside: the limit is multiplied by the gradient at once. In
  between, the difference is within the noise of a median of a few calls, and the limit holds.
- A call ended by its deadline (``dropped``) halves the limit: a timeout is the strongest sign of
  overload there is. (The guard feeds as dropped only the timeouts that speak of the tool's
  capacity, not of one client's arguments: ``_feedback.py``.)
- **An overload error** (``on_overload``: a call that raised one of the guard's
  ``overload_errors``, answered SERVER_BUSY, RATE_LIMITED or TIMEOUT, or failed where failures
  rise with the calls in flight) that started with ``n`` calls in flight says the tool serves
  fewer than ``n``: the limit goes to ``n - 1`` at most, and does not grow past that *ceiling*
  for ``CEILING_SECONDS`` (or ``CEILING_BASELINES`` uncrowded latencies, if longer). A ceiling
  confirmed again by the first try above it, soon after it lapsed, is held twice as long the
  next time (up to ``CEILING_MAX_SECONDS``): a pool that fails fast when full is tried one call
  above its size once in a while, not every window. Halving instead would cut a pool of 4 to 2
  and climb back through 3, losing a third of its service on every error.
- **A call that failed alone** (``n = 1``) tells no capacity: the tool failed with nothing else
  in it (a backend that is down). The limit keeps what it has, and when a call succeeds again it
  goes back to the value it had before the overload errors that led there, without ceilings:
  an outage does not leave the limit at its minimum.
- **Not below what calls were seen served at once**: a call that ends while ``k`` calls admitted
  before it still run shows the tool serving ``k + 1`` at once (a tool that serves one at a
  time, in order, never lets a call overtake another). For ``OVERTAKING_MEMORY`` calls after
  such a sighting, a latency cut stops there, and ``parallelism`` is at least that: a cut below
  would idle a worker, and its only warrant is a window measured against a baseline of a few
  heavy-tailed calls, which errs by a third either way. Calls started with no more in flight
  than that are quiet calls and join the baseline, so a baseline measured low is corrected by
  them, without the cut to one slot that would make every call a lone one.

- **A slow tool seen serving every slot at once** (calls longer than ``SIGHTED_WINDOWS`` windows):
  the sighting
  above is a lower bound that needs the youngest call to end before every older one, so at a
  few slots it seldom reaches them. A slow tool's call is quiet with one call more in flight
  than seen served at once, once ``SLACK_FROM_AT_ONCE`` were seen and that one more reaches the
  limit; and a window in which every slot was seen served at once queued nothing inside the
  tool, whatever its median says against a first baseline of a few calls: it grows the limit
  by ``SIGHTED_GROWTH``, not one slot (unless it is slow enough to cut). A tool of 8 workers
  and calls of 1-5 s otherwise held 4-5 slots for a minute at 0.8x of its capacity.

So the limit settles where the tool's latency is ``tolerance`` times its uncrowded latency: with
the default 2, about twice the number of calls the tool truly serves in parallel, little queueing
inside the tool, and headroom for bursts. Why this shape and these defaults (a multiplicative
Gradient2-style increase was tried and wandered too much at steady load): docs/adaptive.md.

The limit stays within [``min_limit``, ``max_limit``] and is never NaN. It learns only from the
samples it is fed (no clock of its own, no I/O), so it is tested with plain numbers.

The limit decides here, over the window of its hot path; its parts keep their own state and
answer it with values: the warm-up and the probes (``_adaptive_probe.py``), the ceilings of
overload errors and the recovery from calls that failed alone (``_overload_ceiling.py``), the
quiet calls' median, the calls seen served at once and what else is read off the samples
(``_latency_estimates.py``), and the tuned constants, each with its reason
(``_adaptive_tuning.py``).
"""

from __future__ import annotations

import math
from typing import ClassVar

from .._checks import check_int, check_number, check_seconds
from .._exceptions import ConfigurationError
from ._adaptive_probe import Probe
from ._adaptive_tuning import (
    DEAD_BAND,
    EARLY_FACTOR,
    EARLY_SAMPLES,
    GROWTH_GRADIENT,
    GROWTH_SAMPLES_PER_SLOT,
    PROBE_SPACING_BASELINES,
    SIGHTED_GROWTH,
    SIGHTED_WINDOWS,
    SLOW_WINDOW_SAMPLES,
)
from ._latency_estimates import (
    ParallelismEstimate,
    QuietBaseline,
    ServedAtOnce,
    early_run,
    median,
    quiet_bound,
    uncrowded_window,
)
from ._overload_ceiling import OverloadCeiling

__all__ = ["GradientLimit"]


class GradientLimit:
    """A limit that follows the tool's capacity (see the module):
    ``ConcurrencyGuard(limit=GradientLimit())``, or ``max_active="auto"`` in the Guard.

    ``min_limit`` / ``max_limit`` bound it; it starts at ``initial_limit`` (default 4, within the
    bounds). ``tolerance`` (>= 1): how far above its uncrowded latency the tool may run before
    the limit shrinks. ``window`` (seconds) / ``window_samples``: the least one decision rests
    on. ``probe_every`` (seconds) / ``probe_samples``: how long the baseline may go without an
    uncrowded call before the limit makes room for some, and how many it waits for. Each sample
    may say how many calls admitted before it the call ``overtook`` (the limiter tells it: a
    tool seen serving that many at once is not cut below them on latency alone).
    """

    learns_overtaking: ClassVar[bool] = True

    __slots__ = (
        "_baseline",
        "_ceiling",
        "_early_bar",
        "_estimate",
        "_limit",
        "_next_probe",
        "_parallelism",
        "_probe",
        "_quiet",
        "_quiet_floor",
        "_served",
        "_sighted_above",
        "_slow_run",
        "_window",
        "_window_crowd",
        "_window_end",
        "_window_peak",
        "max_limit",
        "min_limit",
        "probe_every",
        "probe_samples",
        "tolerance",
        "window",
        "window_samples",
    )

    def __init__(
        self,
        *,
        min_limit: int = 1,
        max_limit: int = 200,
        initial_limit: int | None = None,
        tolerance: float = 2.0,
        window: float = 0.1,
        window_samples: int = 20,
        probe_every: float = 30.0,
        probe_samples: int = 10,
    ) -> None:
        self.min_limit, self.max_limit, initial = _bounds(min_limit, max_limit, initial_limit)
        self.tolerance = check_number("tolerance", tolerance, 1)
        self.window = check_seconds("window", window)
        self._sighted_above = SIGHTED_WINDOWS * self.window  # a slow tool's, for the sightings
        self.window_samples = check_int("window_samples", window_samples, 1)
        self.probe_every = check_seconds("probe_every", probe_every)
        self.probe_samples = check_int("probe_samples", probe_samples, 1)
        self._estimate = float(initial)  # the limit as a real number; ``limit`` rounds it
        self._quiet_floor = max(self.min_limit, math.ceil(self._estimate / 4))
        self._quiet = QuietBaseline()  # the median of the last quiet calls
        self._baseline = math.nan
        self._probe = Probe()  # the warm-up and the probes (``_adaptive_probe.py``)
        self._next_probe = math.inf
        # Unsorted: sorted only when its median is read, so a call costs O(1) however many a
        # window holds (a tool serving 10,000 calls a second fills its 0.1 s with a thousand).
        self._window: list[float] = []
        self._slow_run = 0  # the window's last calls in a row at or above the early bar
        self._early_bar = math.nan  # EARLY_FACTOR x the tolerated latency, with the baseline
        self._window_end = -math.inf
        self._window_peak = 0
        self._window_crowd = 0
        self._limit = initial
        # Until measured: the limit settles at about ``tolerance`` times the parallelism.
        self._parallelism = ParallelismEstimate(max(1.0, initial / self.tolerance))
        self._served = ServedAtOnce()  # the most calls seen served at once, lately
        self._ceiling = OverloadCeiling(self.max_limit)  # ``on_overload``: its ceilings

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def baseline(self) -> float:
        """The tool's uncrowded latency as last measured (seconds; NaN before any)."""
        return self._baseline

    def on_sample(
        self,
        start: float,
        duration: float,
        inflight: int,
        dropped: bool,
        *,
        overtook: int = 0,
    ) -> bool:
        """Learn from one finished call (``Limit.on_sample``, and ``overtook``: see the class).
        Returns False when neither ``limit`` nor ``parallelism`` moved (True: they may have)."""
        # Every finished call of a guard under max_active="auto" comes here, so the common case
        # (a sample that closes no window) is written out without a call it could spare: the
        # quiet bound's floor is kept by ``_set``, and the calls served at once are told of a
        # sample only while they remember one, or when it overtook a call.
        end = start + duration
        if end - end or not duration >= 0.0:  # NaN (truthy) unless both are finite
            return False  # no clock gives such a sample (NaN, infinite, negative)
        seen = self._served.sightings
        if overtook > 0 or seen:  # (none remembered, none to remember: nothing to count)
            self._served.see(overtook)
        if dropped:
            self._set(self._estimate / 2)
            return True
        if self._ceiling.down:  # the first call served since calls failed alone
            restore = self._ceiling.lift(self.max_limit, self._estimate)
            if restore == restore:  # back to the estimate before the errors (NaN: learn as any)
                self._set(restore)
                return True  # this call was served under the limit before
        if seen:
            baseline = self._baseline
            # A slow tool's call (before any baseline: a slow call) gets the quiet bound's slack.
            slow_tool = (baseline if baseline == baseline else duration) > self._sighted_above
            calm = inflight <= quiet_bound(
                self._quiet_floor, seen, self._limit, self._probe.probing, slow_tool
            )
        else:  # with no call seen overtaking another, the quiet bound is its floor
            calm = inflight <= self._quiet_floor
        warmed = False  # a slow tool's warm-up call may move the parallelism's read
        if not self._probe.measured:  # the warm-up: counts shown uncrowded by latency are quiet
            calm = self._probe.observe(inflight, duration, calm)
            warmed = self._parallelism.warming(duration > self._sighted_above)
        if calm:  # a quiet call: it tells the uncrowded latency
            baseline = self._baseline = self._quiet.add(duration)
            self._early_bar = EARLY_FACTOR * self.tolerance * baseline
        if self._probe.active:  # the warm-up, or a probe
            step = self._probe.step(
                start, duration, calm, self.probe_samples, self._baseline, self.window
            )
            if step == "done":
                spacing = max(self.probe_every, PROBE_SPACING_BASELINES * self._baseline)
                self._next_probe = end + spacing
                self._window.clear()
                self._set(self._estimate)  # back to the limit held before the probe
                return True
            if step == "room":  # the first probe's grace is over, or it has room shown
                self._limit = self._probe.room(
                    quiet_bound(self._quiet_floor, seen, self._limit, True)
                )
                return True
            if step == "start":
                self._start_probe(end)
                return True
            return warmed
        if end >= self._next_probe:
            self._start_probe(end)
            return True
        window = self._window
        if not window:
            self._window_end = end + self.window
            self._window_peak = 0
            self._window_crowd = 0
            self._slow_run = 0
        window.append(duration)
        if duration >= self._early_bar:  # (never while the bar is NaN)
            slow = self._slow_run = self._slow_run + 1
        else:
            slow = self._slow_run = 0
        if inflight > self._window_peak:
            self._window_peak = inflight
        self._window_crowd += inflight
        gathered = len(window)
        due = end >= self._window_end
        if slow >= EARLY_SAMPLES and slow >= early_run(self._quiet.ordered, self._early_bar):
            # The tool lost capacity: decided on the slow calls alone.
            self._decide(median(window[-slow:]), end, early=slow)
            window.clear()
            return True
        if due and (
            gathered >= self.window_samples
            or (
                gathered >= SLOW_WINDOW_SAMPLES
                and gathered * self._baseline >= self.window_samples * self.window
            )
        ):
            self._decide(median(window), end)
            window.clear()
            return True
        if (
            due
            and gathered >= GROWTH_SAMPLES_PER_SLOT * self._limit
            and self._window_peak >= self._limit
        ):
            latency = median(window)
            if self.tolerance * self._baseline >= GROWTH_GRADIENT * latency:
                self._decide(latency, end)
                window.clear()
                return True
        return False

    @property
    def served_at_once(self) -> int:
        """The most calls seen served at once lately (``ServedAtOnce``; ``_feedback.py`` too)."""
        return self._served.most()

    @property
    def parallelism(self) -> float:
        """The calls the tool appears to serve in parallel: the last window's calls in flight
        (their mean as each call found them: one left over from a higher limit is no peak to
        set it) scaled by the uncrowded latency over the window's, rising by a share of each
        higher estimate (``PARALLELISM_WEIGHT``; at once for a slow tool's window as fast as
        uncrowded, or a full one so beyond its noise), falling to a lower one at once; until
        measured, the initial limit over ``tolerance`` (a slow tool's: ``_latency_estimates``)."""
        return self._parallelism.read(self._limit)

    def on_overload(
        self, start: float, duration: float, inflight: int, *, overtook: int = 0
    ) -> bool:
        """Learn from a call that said the tool is overloaded (see the module): it took its slot
        at ``start`` with ``inflight`` calls holding one, itself included, and ended after
        ``duration`` seconds (``overtook``: as in ``on_sample``; not used). Returns False when
        neither ``limit`` nor ``parallelism`` moved."""
        end = start + duration
        if end - end or not duration >= 0.0:
            return False
        # (Infinite for a call that failed alone: it tells no capacity, and marks the tool down.)
        ceiling = self._ceiling.lower(end, inflight, self._estimate, self._baseline)
        if self._estimate > ceiling:
            self._set(ceiling)
            return True
        return False

    def _decide(self, latency: float, end: float, *, early: int = 0) -> None:
        baseline = self._baseline
        if not (latency > 0 and baseline > 0):
            return
        self._ceiling.served()
        # An early window (the last ``early`` calls, each EARLY_FACTOR x the tolerated latency)
        # is held up only by the calls seen served at once during it: those seen before were
        # served before the tool lost its capacity (a tool gone from 8 workers to 1 finishes its
        # 8 calls in any order, and held the limit near 8 for OVERTAKING_MEMORY calls more).
        at_once = self._served.most(early)
        # A slow tool's window as fast as uncrowded (a gradient above DEAD_BAND): room to grow.
        slow_room = baseline > self.window and self.tolerance * baseline > DEAD_BAND * latency
        # A full window as fast as uncrowded beyond its median's noise queued none of its calls
        # inside: room too, its estimate taken at once (a whole window, sorted by ``median``;
        # an early one is slow by definition).
        room = slow_room or (
            not early and uncrowded_window(self._window, latency, baseline, self.window_samples)
        )
        crowd = self._window_crowd / len(self._window)
        window = ([] if early else self._window) if baseline > self._sighted_above else None
        self._parallelism.learn(crowd, baseline, latency, room, at_once, window, self._quiet)
        # Calls of twice the early bar or more (a dozen times the uncrowded latency at the
        # default tolerance) cut the limit to a quarter at once, not a half.
        deep = early and latency >= 2.0 * self._early_bar
        gradient = min(max(self.tolerance * baseline / latency, 0.25 if deep else 0.5), 2.0)
        if (
            at_once >= self._limit
            and self._window_peak >= self._limit
            and baseline > self._sighted_above
            and gradient >= 1 / DEAD_BAND
        ):
            # A slow tool seen serving every slot at once queued none of the window's calls,
            # whatever their median says against a baseline of a few calls: a share more.
            grown = max(self._estimate + 1, SIGHTED_GROWTH * self._estimate)
            if self._ceiling.allows(grown, end, self.max_limit):
                self._set(grown)
            return
        if 1 / DEAD_BAND <= gradient <= DEAD_BAND:
            return  # within the noise of a median of a few calls: hold
        if gradient < 1:  # the tool queues calls inside: shrink at once
            cut = self._estimate * gradient
            if at_once > 1 and cut < at_once:  # not below the calls it was seen serving at once
                cut = min(self._estimate, float(at_once))
            self._set(cut)
        elif self._window_peak >= self._limit:
            # Uncrowded at the limit: one slot more a window, but not past a ceiling in force.
            grown = self._estimate + 1
            if self._ceiling.allows(grown, end, self.max_limit):
                self._set(grown)

    def _start_probe(self, now: float) -> None:
        """Make room for quiet calls: hold the limit at the quiet bound until enough have come
        (the first probe, at the parallelism for PROBE_GRACE_CALLS crowded calls first)."""
        bound = quiet_bound(self._quiet_floor, self._served.sightings, self._limit, True)
        self._limit = self._probe.begin(now, self._limit, bound, self._parallelism.value)

    def _set(self, estimate: float) -> None:
        self._estimate = min(max(estimate, float(self.min_limit)), float(self.max_limit))
        # The quiet bound's floor (``quiet_bound``) moves with the estimate alone.
        self._quiet_floor = max(self.min_limit, math.ceil(self._estimate / 4))
        if not self._probe.probing:
            self._limit = min(self.max_limit, max(self.min_limit, round(self._estimate)))

    def __repr__(self) -> str:
        return (
            f"GradientLimit(limit={self._limit}, min_limit={self.min_limit},"
            f" max_limit={self.max_limit})"
        )


def _bounds(min_limit: int, max_limit: int, initial_limit: int | None) -> tuple[int, int, int]:
    """``GradientLimit``'s ``min_limit``, ``max_limit`` and initial limit, checked."""
    low = check_int("min_limit", min_limit, 1)
    high = check_int("max_limit", max_limit, 1)
    if low > high:
        raise ConfigurationError(f"min_limit ({min_limit}) must not exceed max_limit ({max_limit})")
    if initial_limit is None:
        initial = min(max(4, low), high)
    else:
        initial = check_int("initial_limit", initial_limit, 1)
    if not low <= initial <= high:
        raise ConfigurationError(
            f"initial_limit ({initial}) must lie within min_limit ({min_limit}) and"
            f" max_limit ({max_limit})"
        )
    return low, high, initial
