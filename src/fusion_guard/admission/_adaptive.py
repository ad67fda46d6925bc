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
  or speeds up; more workers do not change it. The first probe holds the parallelism guess
  first, if higher, and drops to the bound only after ``PROBE_GRACE_CALLS`` crowded calls
  admitted under it: a burst that is ending sends quiet calls by itself.
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

So the limit settles where the tool's latency is ``tolerance`` times its uncrowded latency: with
the default 2, about twice the number of calls the tool truly serves in parallel, little queueing
inside the tool, and headroom for bursts. Why this shape and these defaults (a multiplicative
Gradient2-style increase was tried and wandered too much at steady load): docs/adaptive.md.

The limit stays within [``min_limit``, ``max_limit``] and is never NaN. It learns only from the
samples it is fed (no clock of its own, no I/O), so it is tested with plain numbers.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from typing import ClassVar

from .._checks import check_int, check_number, check_seconds
from .._exceptions import ConfigurationError

__all__ = ["GradientLimit"]

_INF = math.inf

#: A gradient within [1 / DEAD_BAND, DEAD_BAND] holds the limit (noise of a small median).
DEAD_BAND = 1.25
#: Uncrowded calls whose median is the baseline.
QUIET_SAMPLES = 60
# Where the median of QUIET_SAMPLES sorted calls lies (the same place twice for an odd number):
# once that many have come, the baseline is read there without working out the middle.
_MIDDLE_LOW, _MIDDLE_HIGH = (QUIET_SAMPLES - 1) // 2, QUIET_SAMPLES // 2
#: Probes come at least this many baselines apart, so a slow tool does not probe all the time.
PROBE_SPACING_BASELINES = 200
#: A window closes early once this many calls in a row each took EARLY_FACTOR x the tolerated
#: latency or more, and is decided on them alone: the tool has lost capacity, and waiting for a
#: full window of such slow calls is what made the limit take seconds to come down. (Until
#: 2026-12-07 it took the window's fastest call so far, so the fast calls that ended before the
#: tool slowed down held the window open: 0.75-0.80 s, not 0.40 s, for the shifting demo's
#: limit to come within 2x of one worker after eight, median over seeds 1-40.)
EARLY_SAMPLES = 5
EARLY_FACTOR = 3.0
#: ... unless the tool's own uncrowded calls make such a run this likely at any one call: a tool
#: whose quiet calls are often that slow (a lookup tool's expensive queries: 20 % of its calls at
#: 30x the median) then needs a longer run. Five in a row of those came by chance about once in
#: half a minute at 0.8x, and each cut the limit to a quarter: 6.8 % shed, not 2.2 %
#: (``python benchmarks/zoo.py --models arg_cost --loads 0.8 --no-special --seeds 4-8``).
EARLY_RUN_CHANCE = 1e-4
#: A window that would only grow the limit closes once it holds this many calls per slot (and
#: has lasted ``window``): at a limit of 1 a full window takes ``window_samples`` services one
#: after another, so a limit that a noisy window had cut to 1 took a second or more to climb.
GROWTH_SAMPLES_PER_SLOT = 5
#: The gradient such a short window needs to grow the limit (a full window needs DEAD_BAND): the
#: median of a few calls is noisier, and a limit pushed up by noise puts calls in the tool's queue.
GROWTH_GRADIENT = 1.5
#: Weight of a window's estimate in ``parallelism`` when it is higher (the first, or a lower one,
#: is taken as measured): the standing queue and the default queue follow it, one window of
#: lucky calls read 4.6 for a tool of 2 workers, and a queue too long costs more than one too
#: short. A tool that lost workers is followed at once.
PARALLELISM_WEIGHT = 0.3
#: For this many calls after ``k + 1`` calls were seen served at once (one ended while ``k``
#: admitted before it still ran), latency cuts stop at ``k + 1`` slots and ``parallelism`` is at
#: least that. A tool that loses workers stops showing it once the calls inside from before have
#: ended, so the memory is short: with 30, one shifting run in 30 took 2.25 s (the target is 2)
#: for its limit to come within 2x of a tool gone from 8 workers to 1.
OVERTAKING_MEMORY = 20
#: A new limit holds its initial value until this many quiet calls have come by themselves
#: (later probes wait for ``probe_samples``): the first baseline rests on more calls, since every
#: window is read against it and a first baseline of 10 heavy-tailed calls came out up to three
#: times the true median.
FIRST_SAMPLES = 30
#: ... or until this many crowded calls have come first: then it makes room for quiet ones (a
#: probe). Probing at once, as it did before, held a fresh guard at a quarter of its limit for
#: the first calls: 4.0 s, not 1.0 s, for a first burst of 8 calls of 0.5 s.
FIRST_PROBE_CALLS = 50
#: A probe first holds the slots the tool appears to serve in parallel (``parallelism``, whole),
#: and cuts to the quiet bound only after this many crowded calls more: a burst that is ending
#: leaves quiet calls by itself, and a cut to one slot of a 2-worker FIFO pool (no call ever
#: overtakes another, so the quiet bound is 1) mid-burst drained 30 callers 5 ms apart at 1.34x
#: the ideal time. A standing load gets its cut after these calls.
PROBE_GRACE_CALLS = 10
#: A slow tool (its uncrowded call outlasts ``window``) gathers calls slowly: 20 calls of 1-5 s
#: at 4 slots are 15 s, and a limit that grows one slot a window took minutes to reach the
#: tool's workers. So a window also closes once its calls, at the uncrowded latency, amount to
#: ``window_samples x window`` seconds of service, but not before this many; and the first
#: baseline once its quiet calls amount to ``FIRST_SAMPLES x window`` seconds, not before this
#: many either (those started before the longest one seen: the short ones finish first). For a
#: tool faster than the window, ``window_samples`` and FIRST_SAMPLES come first, as before.
SLOW_WINDOW_SAMPLES = 5
#: After an overload error at ``n`` calls in flight, the limit does not grow to ``n`` again for
#: this long (seconds), or CEILING_BASELINES uncrowded latencies if longer: each try above a
#: pool that fails fast when full costs at least one failed call.
CEILING_SECONDS = 1.0
CEILING_BASELINES = 20
#: A ceiling confirmed again within its own hold after it lapsed is held twice as long, up to
#: this (seconds): a pool that stays the same size is tried less and less often.
CEILING_MAX_SECONDS = 16.0


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
        "_ceiling_hold",
        "_ceiling_until",
        "_crowded_unmeasured",
        "_down",
        "_early_bar",
        "_estimate",
        "_first",
        "_limit",
        "_measured",
        "_next_probe",
        "_overtaking",
        "_parallelism",
        "_parallelism_measured",
        "_probe_crowded",
        "_probe_grace",
        "_probe_taken",
        "_probing",
        "_quiet",
        "_quiet_floor",
        "_quiet_sorted",
        "_restore",
        "_samples",
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
        self.min_limit = check_int("min_limit", min_limit, 1)
        self.max_limit = check_int("max_limit", max_limit, 1)
        if self.min_limit > self.max_limit:
            raise ConfigurationError(
                f"min_limit ({min_limit}) must not exceed max_limit ({max_limit})"
            )
        if initial_limit is None:
            initial = min(max(4, self.min_limit), self.max_limit)
        else:
            initial = check_int("initial_limit", initial_limit, 1)
        if not self.min_limit <= initial <= self.max_limit:
            raise ConfigurationError(
                f"initial_limit ({initial}) must lie within min_limit ({min_limit}) and"
                f" max_limit ({max_limit})"
            )
        self.tolerance = check_number("tolerance", tolerance, 1)
        self.window = check_seconds("window", window)
        self.window_samples = check_int("window_samples", window_samples, 1)
        self.probe_every = check_seconds("probe_every", probe_every)
        self.probe_samples = check_int("probe_samples", probe_samples, 1)
        self._estimate = float(initial)  # the limit as a real number; ``limit`` rounds it
        self._quiet_floor = max(self.min_limit, math.ceil(self._estimate / 4))
        self._quiet: deque[float] = deque(maxlen=QUIET_SAMPLES)
        self._quiet_sorted: list[float] = []  # the same calls, sorted: the median at once
        self._baseline = math.nan
        self._probe_taken = 0
        # The first probe's grace (``_start_probe``): when it began (infinite: none pending),
        # and the crowded calls admitted since.
        self._probe_grace = _INF
        self._probe_crowded = 0
        self._probing = False
        self._measured = False  # no baseline yet: the first one is taken from calls as they come
        self._crowded_unmeasured = 0
        # The warm-up's quiet calls, (start, duration): a slow tool's first baseline
        # (``_first_settled``).
        self._first: list[tuple[float, float]] = []
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
        self._parallelism = max(1.0, initial / self.tolerance)
        self._parallelism_measured = False
        # The most calls seen served at once within the last OVERTAKING_MEMORY samples, as a
        # sliding maximum: (sample number, count), counts falling from the oldest to the newest.
        self._overtaking: deque[tuple[int, int]] = deque()
        self._samples = 0
        # The ceiling the last overload error set (``on_overload``), until when it holds, and how
        # long the next one holds; the estimate to go back to after a run of overload errors
        # (NaN: none), and whether the last one failed alone (the tool down).
        self._ceiling = self.max_limit
        self._ceiling_until = -math.inf
        self._ceiling_hold = CEILING_SECONDS
        self._restore = math.nan
        self._down = False

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
        # quiet bound's floor is kept by ``_set``, the baseline's median read in place.
        end = start + duration
        if end - end or not duration >= 0.0:  # NaN (truthy) unless both are finite
            return False  # no clock gives such a sample (NaN, infinite, negative)
        samples = self._samples = self._samples + 1
        seen = self._overtaking
        if overtook > 0:
            at_once = int(overtook) + 1
            while seen and seen[-1][1] <= at_once:
                seen.pop()
            seen.append((samples, at_once))
        if seen and seen[0][0] <= samples - OVERTAKING_MEMORY:
            seen.popleft()
        if dropped:
            self._set(self._estimate / 2)
            return True
        if self._down and self._recovered():  # the first call served since calls failed alone
            return True  # the limit went back: this call was served under the one before
        # With no call seen overtaking another, the quiet bound is its floor (``_quiet_bound``).
        calm = inflight <= (self._quiet_bound() if seen else self._quiet_floor)
        if calm:
            # A quiet call: it tells the uncrowded latency (the median of the last ones).
            quiet, ordered = self._quiet, self._quiet_sorted
            if len(quiet) == QUIET_SAMPLES:  # the oldest leaves the median too
                del ordered[bisect_left(ordered, quiet[0])]
                quiet.append(duration)
                insort(ordered, duration)
                baseline = self._baseline = (ordered[_MIDDLE_LOW] + ordered[_MIDDLE_HIGH]) / 2
            else:
                quiet.append(duration)
                insort(ordered, duration)
                baseline = self._baseline = _median_of_sorted(ordered)
            self._early_bar = EARLY_FACTOR * self.tolerance * baseline
            self._probe_taken += 1
        elif not self._measured:
            self._crowded_unmeasured += 1
        if self._probing or not self._measured:
            if calm and not self._measured:
                self._first.append((start, duration))
            taken = self._probe_taken
            if taken >= (self.probe_samples if self._measured else FIRST_SAMPLES) or (
                not self._measured
                and taken >= SLOW_WINDOW_SAMPLES
                and taken * self._baseline >= FIRST_SAMPLES * self.window
                and self._first_settled(end)
            ):
                self._first.clear()
                self._probe_grace = _INF
                self._probing = False
                self._measured = True
                spacing = max(self.probe_every, PROBE_SPACING_BASELINES * self._baseline)
                self._next_probe = end + spacing
                self._window.clear()
                self._set(self._estimate)  # back to the limit held before the probe
                return True
            if not calm and start >= self._probe_grace:  # admitted under the probe's grace
                self._probe_crowded += 1
                if self._probe_crowded >= PROBE_GRACE_CALLS:  # a standing load: make room
                    self._probe_grace = _INF
                    self._limit = self._quiet_bound()
                    return True
            if not self._probing and self._crowded_unmeasured >= FIRST_PROBE_CALLS:
                self._start_probe(end)  # the quiet calls counted so far still count
                return True
            return False
        if end >= self._next_probe:
            self._probe_taken = 0
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
        if slow >= EARLY_SAMPLES and slow >= self._early_run():
            # The tool lost capacity: decided on the slow calls alone.
            self._decide(_median(window[-slow:]), end, early=slow)
            window.clear()
            return True
        if due and (
            gathered >= self.window_samples
            or (
                gathered >= SLOW_WINDOW_SAMPLES
                and gathered * self._baseline >= self.window_samples * self.window
            )
        ):
            self._decide(_median(window), end)
            window.clear()
            return True
        if (
            due
            and gathered >= GROWTH_SAMPLES_PER_SLOT * self._limit
            and self._window_peak >= self._limit
        ):
            latency = _median(window)
            if self.tolerance * self._baseline >= GROWTH_GRADIENT * latency:
                self._decide(latency, end)
                window.clear()
                return True
        return False

    @property
    def parallelism(self) -> float:
        """The calls the tool appears to serve in parallel: the calls in flight of the last
        window (their mean, as each call found them) scaled by the uncrowded latency over the
        window's, rising by a share of each higher estimate (``PARALLELISM_WEIGHT``; a slow
        tool's window as fast as uncrowded: at once), falling to a lower one at once; until
        measured, the initial limit over ``tolerance`` (where the limit would settle). The mean,
        not the peak: one call left over from a higher limit would otherwise set it."""
        return self._parallelism

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
        if inflight <= 1:  # failed alone: no capacity to learn, and no cut below one call
            self._down = True
            return False
        if self._restore != self._restore:  # NaN: the first of a run of overload errors
            self._restore = self._estimate
        ceiling = int(inflight) - 1
        hold = self._ceiling_hold
        if end >= self._ceiling_until:  # none in force: a new one
            if end < self._ceiling_until + hold and ceiling >= self._ceiling:
                hold = min(2.0 * hold, CEILING_MAX_SECONDS)  # the same size, confirmed again
            else:
                hold = max(CEILING_SECONDS, CEILING_BASELINES * self._baseline)  # NaN: the first
            self._ceiling_hold = hold
            self._ceiling = ceiling
        elif ceiling < self._ceiling:
            self._ceiling = ceiling
        self._ceiling_until = end + hold
        if self._estimate > self._ceiling:
            self._set(float(self._ceiling))
            return True
        return False

    def _recovered(self) -> bool:
        """A call served after calls failed alone: back to the estimate held before the overload
        errors (if any), without the ceilings they set. True when the estimate moved (a call
        that merely failed alone, bad input say, moves nothing: the call learns as any)."""
        self._down = False
        restore = self._restore
        self._restore = math.nan
        self._ceiling = self.max_limit
        self._ceiling_until = -math.inf
        if restore == restore and restore > self._estimate:  # not NaN
            self._set(restore)
            return True
        return False

    def _decide(self, latency: float, end: float, *, early: int = 0) -> None:
        baseline = self._baseline
        if not (latency > 0 and baseline > 0):
            return
        # A window of calls served: the estimate before the overload errors is history now.
        self._restore = math.nan
        crowd = self._window_crowd / len(self._window)
        measured = max(1.0, crowd * min(1.0, baseline / latency))
        # A slow tool's window as fast as uncrowded (a gradient above DEAD_BAND) is taken as
        # measured too: it has few windows, and shares of the difference never reach the slots
        # in force under overload (the parallelism and one): its slots stayed below its workers.
        slow_room = baseline > self.window and self.tolerance * baseline > DEAD_BAND * latency
        if self._parallelism_measured and measured > self._parallelism and not slow_room:
            self._parallelism += PARALLELISM_WEIGHT * (measured - self._parallelism)
        else:  # the first estimate, a lower one, or a slow tool's with room: taken as measured
            self._parallelism = measured
            self._parallelism_measured = True
        # An early window (a run of calls each EARLY_FACTOR x the tolerated latency) is no
        # baseline measured low: the calls seen served at once were served before the tool lost
        # its capacity, and the cut may go to a quarter at once.
        # An early window (the last ``early`` calls, each EARLY_FACTOR x the tolerated latency)
        # cuts to a quarter at once if its median says so, and only the calls seen served at
        # once during those calls hold it up: those seen before were served before the tool
        # lost its capacity (a tool gone from 8 workers to 1 finishes the 8 calls it was serving
        # in any order, and held the limit near 8 for OVERTAKING_MEMORY calls more).
        at_once = self._seen_at_once(self._samples - early + 1 if early else 0)
        self._parallelism = max(self._parallelism, float(at_once))
        # Calls of twice the early bar or more (a dozen times the uncrowded latency at the
        # default tolerance) cut the limit to a quarter at once, not a half.
        deep = early and latency >= 2.0 * self._early_bar
        gradient = min(max(self.tolerance * baseline / latency, 0.25 if deep else 0.5), 2.0)
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
            if grown > self._ceiling:
                if end < self._ceiling_until:
                    return
                if grown > self._ceiling + 1:  # a slot past it served a window: forget it
                    self._ceiling = self.max_limit
                    self._ceiling_hold = CEILING_SECONDS
            self._set(grown)

    def _first_settled(self, now: float) -> bool:
        """Whether a slow tool's warm-up has quiet calls enough for a first baseline, counting
        only those started before ``now`` less the longest one seen: the calls that finish
        first are the short ones, and a baseline read low scales every window and estimate of
        parallelism by as much."""
        first = self._first
        horizon = now - max(duration for _, duration in first)
        settled = sorted(duration for start, duration in first if start <= horizon)
        return (
            len(settled) >= SLOW_WINDOW_SAMPLES
            and len(settled) * _median_of_sorted(settled) >= FIRST_SAMPLES * self.window
        )

    def _early_run(self) -> int:
        """How many calls in a row at the early bar or more say the tool lost capacity: at
        least ``EARLY_SAMPLES``, more when its quiet calls reach the bar often enough that a
        shorter run comes by chance (``EARLY_RUN_CHANCE``). Asked only once such a run is
        ``EARLY_SAMPLES`` long."""
        ordered = self._quiet_sorted
        share = (len(ordered) - bisect_left(ordered, self._early_bar)) / len(ordered)
        if share <= 0.0:  # (the bar is above the median: share < 0.5, the log below < 0)
            return EARLY_SAMPLES
        return max(EARLY_SAMPLES, math.ceil(math.log(EARLY_RUN_CHANCE) / math.log(share)))

    def _start_probe(self, now: float) -> None:
        """Make room for quiet calls: hold the limit at the quiet bound until enough have come
        (the first probe, at the parallelism for PROBE_GRACE_CALLS crowded calls first)."""
        held = self._limit
        self._probing = True
        self._limit = self._quiet_bound()
        graced = min(held, math.floor(self._parallelism))
        if not self._measured and graced > self._limit:  # a burst may be ending
            self._limit = graced
            self._probe_grace = now
            self._probe_crowded = 0

    def _quiet_bound(self) -> int:
        """The most calls in flight at which a call still counts as quiet (uncrowded): a quarter
        of the limit, or as many as the tool was lately seen serving at once (within the limit
        outside a probe), since it queues none of those. Also the limit a probe holds."""
        at_once = self._seen_at_once()
        if not self._probing:
            at_once = min(at_once, self._limit)
        return max(self._quiet_floor, at_once)

    def _seen_at_once(self, since: int = 0) -> int:
        """The most calls the tool was seen serving at once within the last OVERTAKING_MEMORY
        samples, and from sample number ``since`` on (1 when none overtook another)."""
        if not since:
            return self._overtaking[0][1] if self._overtaking else 1
        # Counts fall from the oldest sighting to the newest: the first one since is the most.
        return next((count for number, count in self._overtaking if number >= since), 1)

    def _set(self, estimate: float) -> None:
        self._estimate = min(max(estimate, float(self.min_limit)), float(self.max_limit))
        # The quiet bound's floor (``_quiet_bound``) moves with the estimate alone.
        self._quiet_floor = max(self.min_limit, math.ceil(self._estimate / 4))
        if not self._probing:
            self._limit = min(self.max_limit, max(self.min_limit, round(self._estimate)))

    def __repr__(self) -> str:
        return (
            f"GradientLimit(limit={self._limit}, min_limit={self.min_limit},"
            f" max_limit={self.max_limit})"
        )


def _median(values: list[float]) -> float:
    """``statistics.median`` of ``values``, sorting them in place (their order is not kept)."""
    values.sort()
    return _median_of_sorted(values)


def _median_of_sorted(values: list[float]) -> float:
    """``statistics.median`` of a list already sorted, without sorting it again."""
    middle = len(values) // 2
    if len(values) % 2:
        return values[middle]
    return (values[middle - 1] + values[middle]) / 2
