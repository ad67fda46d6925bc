"""How long a slot is held, and when the next openings are expected.

The guard measures slot holds (handler time, whatever the outcome; not every one: see below)
and keeps a moving average. With ``max_active`` slots all busy, one slot frees up every
``mean / max_active`` seconds on average (Little's law), which is the *drain step*. Two things
are derived from it:

- the expected wait of a caller at queue position ``p``: ``p * step``, which drives predictive
  early shedding;
- ``retry_after`` for a refused caller: the promises of the coming openings, kept where
  refusals are decided (``RetryPromises``, ``_refusal.py``).

Before any call has finished, the mean is only a prior. The calls in flight say more as they age:
every one of them has held its slot at least as long as the youngest (the guard passes that age
in, ``in_flight``), so a cold guard whose calls have been running for 0.8 s plans with 0.8 s, not
with the prior. Two readings of the hold follow:

- for advice, the mean (the prior until a call finishes) raised to ``in_flight`` (read inline
  where refusals are advised, ``_refusal.py``: under overload most calls are refused);
- :meth:`ServiceTimeEstimator.evidence`, for shedding: the same without the prior (0.0 when
  nothing is known), because nobody is shed on a guess; and outside overload, on the
  lower of the mean and a slow mean of about 100 holds (``typical``): queues form behind runs
  of long holds, just when a mean of 20 reads high.

Not every hold is measured. The mean is in use when calls queue (it judges them) or are
refused (it advises them), and its two clock reads and its update were about a third of what an
uncontended call of a fixed limit costs over a bare semaphore. So once ``SAMPLED_FROM`` holds
are measured, of the calls of a fixed limit that found the guard empty (took a free slot with
no other call in flight, waiting for none by the guard's clock) only every
``SAMPLE_EVERY``-th to end is measured (``observe(hold, alone=True)``; ``skips`` counts down to
the next): a systematic sample, which tells the mean of holds drawn alike as well as all of
them do, over ``SAMPLE_EVERY`` times as many calls. Every other call is measured: a guard with
calls in flight or queued moves the mean as fast as before, and every call of an adaptive limit
teaches it. Which calls are sampled is settled by how they arrived, never by what happens while
they run: sampling the calls that end with nobody waiting measured the long holds (which queues
build up behind) more often than the short ones. And it is settled by an empty guard, not by a
free slot: sampling every call that took a free slot slowed the mean of a guard that was never
empty (four slots of a bimodal tool at 0.8x, ``test_concurrency_shed_bimodal.py``), and the
standing limit shed 2.2 % of the calls of a seed instead of 1.8 %. ``samples`` counts the holds
measured: what the mean rests on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import repeat

__all__ = ["ServiceTimeEstimator", "expected_wait"]

#: Weight of the newest sample in the moving average. Handler times are heavy-tailed
#: (log-normal), so a long memory (about 20 samples) keeps one slow call from swinging the mean.
EWMA_ALPHA = 0.05

#: Holds measured one by one before the calls that found the guard empty are sampled: as many
#: as the overload detector's figures take to settle (``_overload.SETTLING_CALLS``, counted in
#: holds measured). With 20, the demo at two slots (``benchmarks/virtual_demo.py --max-active
#: 2``) moved by up to 4 points within the SLO on a seed (one seed of 10 more failed); with 100
#: its figures are those of every hold measured on all 10 seeds ...
SAMPLED_FROM = 100
#: ... then one in this many of them (a mean of 20 samples spans the last 160 such calls).
SAMPLE_EVERY = 8

#: Holds measured before their spread is read (``ServiceTimeEstimator.spread``).
SPREAD_SAMPLES = 20
#: A call in flight raises the hold to shed by once it outlived the mean by this many standard
#: deviations of the holds (``ServiceTimeEstimator.evidence``).
EVIDENCE_SPREADS = 3.0
#: Weight of the moving mean's newest reading, per hold since the last, in the slow mean that
#: predictive shedding judges by when it is the lower (``ServiceTimeEstimator.typical``): about
#: 100 holds of memory, five times the moving mean's.
SLOW_ALPHA = 0.01


#: The countdown of an estimator that measures the next hold: exhausted for good.
_MEASURE_NEXT: Iterator[bool] = repeat(True, 0)


class ServiceTimeEstimator:
    """Exponentially weighted mean of slot hold times, starting from a prior.

    The first observation replaces the prior outright (the prior is a guess, not a sample); later
    ones move the mean by ``EWMA_ALPHA``. The guard updates ``mean`` and ``samples`` inline on its
    release path through :meth:`observe`. ``in_flight`` (seconds) is the age of the youngest call
    holding a slot: a lower bound on the hold of every call in flight.

    ``skips``: the countdown of the holds of calls that found the guard empty that the release
    path of a fixed limit leaves unmeasured before it measures the next (see the module), as an
    iterator the estimator renews: ``next(skips, False)`` is True for a hold to leave
    unmeasured, False (exhausted) for one to measure. The release path draws from it once per
    such hold; only ``observe`` sets it. An iterator rather than a method: drawing from it is
    one call in C, cheaper than the integer the release path counted down before (which wrote
    a field of the estimator) and than a method of the estimator's (a Python call per release:
    about 5 % of an uncontended slot).
    """

    __slots__ = ("_seen", "_seen_mean", "mean", "samples", "skips", "slow", "variance")

    def __init__(self, prior: float) -> None:
        self.mean = prior
        self.samples = 0
        self.variance = 0.0
        """Of the holds, as last read (``spread``)."""
        self._seen = 0  # samples as of the last read
        self._seen_mean = prior
        self.slow = prior
        """The moving mean's readings, averaged again over about 100 holds (``typical``)."""
        self.skips: Iterator[bool] = _MEASURE_NEXT

    def observe(self, duration: float, alone: bool = False) -> None:
        """Take in a hold of ``duration`` seconds; ``alone``: of a call of a fixed limit that
        found the guard empty, after which, once ``SAMPLED_FROM`` holds are measured, the next
        ``SAMPLE_EVERY - 1`` such holds are not (see the module)."""
        samples = self.samples
        if samples:
            self.mean += EWMA_ALPHA * (duration - self.mean)
        else:
            self.mean = duration
        self.samples = samples + 1
        if alone and samples >= SAMPLED_FROM - 1:
            self.skips = repeat(True, SAMPLE_EVERY - 1)

    def spread(self) -> float:
        """The squared coefficient of variation of the holds (variance over the squared mean):
        about 0 for a steady tool, 1.7 for a log-normal of sigma 1, 3.2 for sigma 1.2. 0.0 until
        ``SPREAD_SAMPLES`` holds have been measured (a spread of a few holds says nothing).

        Read off the moving mean's own moves, on the slow path that asks (calls queued): the
        release path, which every call takes, keeps only the mean (a variance beside it cost
        every uncontended call 5 %). ``j`` holds move a stationary moving mean by a step whose
        square is ``2 V (1 - (1 - a) ** j)`` on average, ``V = a / (2 - a)`` of the holds'
        variance (``a``: ``EWMA_ALPHA``); each read's estimate joins a moving average, weighted
        as ``j`` holds. A drift of the holds themselves reads as spread: a wider wait, fewer
        calls shed."""
        samples = self.samples
        mean = self.mean
        seen = self._seen
        if samples > seen:
            if seen:  # (the first hold replaced the prior: no move of the mean to read)
                keep = (1.0 - EWMA_ALPHA) ** (samples - seen)
                step = mean - self._seen_mean
                estimate = step * step * (2.0 - EWMA_ALPHA) / (2.0 * EWMA_ALPHA * (1.0 - keep))
                self.variance += (1.0 - keep) * (estimate - self.variance)
                # At least the readings' plain average while fewer holds are measured than
                # the slow mean's memory: its first reading (often of one hold) is no anchor.
                moved = samples - seen
                weight = max(1.0 - (1.0 - SLOW_ALPHA) ** moved, moved / samples)
                self.slow += weight * (mean - self.slow)
            else:
                self.slow = mean
            self._seen = samples
            self._seen_mean = mean
        if samples < SPREAD_SAMPLES or mean <= 0.0:
            return 0.0
        return self.variance / (mean * mean)

    def typical(self, overloaded: bool = False) -> float:
        """The mean hold predictive shedding judges a queue by: the moving mean, or the slow
        mean (``slow``, read on this slow path as ``spread`` reads the variance) when lower,
        but by no more than the moving mean's own standard error (``sqrt(spread * a / (2 -
        a))`` of it, ``a`` its weight: a reading that high is chance, one higher a change the
        slow mean lags); the moving mean under overload (``overloaded``).

        Queues form behind runs of long holds, and a mean of about 20 holds is read high just
        after one: that is when queues are judged. Judged by it, a heavy-tailed tool's waiters
        were shed that a queue without predictive shedding served in time (the demo's tool of 2
        workers, sigma 1, ``max_queue=16, queue_timeout=0.15`` at 0.8x: 9 calls predicted late
        over seeds 1-9, 7 of them served in time without it; 3 judged by this). A tool that
        really slowed is read by the moving mean before the slow one, so the slow one lags it;
        the calls in flight still raise the hold as they age (``evidence``), and under
        overload (calls arriving faster than the slots open, read by the guard's overload
        detector), where a call shed that would have been served leaves its place to another,
        the moving mean is kept."""
        mean = self.mean
        if overloaded or not self.samples:
            return mean
        spread = self.spread()  # (brings ``slow`` up to the holds measured)
        floor = mean * (1.0 - math.sqrt(spread * EWMA_ALPHA / (2.0 - EWMA_ALPHA)))
        slow = self.slow
        return mean if slow >= mean else slow if slow > floor else floor

    def evidence(self, in_flight: float, overloaded: bool = False, outrun: bool = False) -> float:
        """The hold time known from measurements alone (finished holds, calls in flight): what
        predictive shedding rests on. 0.0 while nothing has finished and nothing is in flight.

        Once holds are measured, it is their ``typical`` mean (the moving mean while calls
        arrive faster than the slots open: ``outrun``), and the youngest call in flight
        raises it only once it outlived what their spread explains (``EVIDENCE_SPREADS``
        standard deviations past the mean, as last read by ``spread``), and then in
        proportion: a call in flight twice that old says the holds are twice as long. With
        heavy tails two calls in flight six times the mean old happen every minute, and the
        calls after them are new draws: read as the hold itself, they shed a whole queue that
        drained in time. A steady tool's spread is small, so its calls in flight raise the
        hold as soon as they outlive the mean. Under
        sustained overload (``overloaded``) they raise it as soon as they outlive the mean,
        whatever the spread: a call shed there leaves its place to another, while a call kept
        behind a long one waits its whole timeout for a refusal (that way, a third fewer
        calls waited out their timeout at 1.5x a tool of sigma 1-1.2)."""
        if not self.samples:
            return in_flight
        mean = self.typical(overloaded or outrun)
        if in_flight <= mean:
            return mean
        if overloaded:
            return in_flight
        explained = mean + EVIDENCE_SPREADS * math.sqrt(self.variance)
        if in_flight <= explained:
            return mean
        # (holds of no measurable time: the age past the spread, as it is)
        if mean <= 0.0:
            return in_flight - explained
        grown = in_flight * (mean / explained)
        return grown if grown > mean else mean  # (never below it, however small the figures)


def expected_wait(
    position: int, slots: int, hold: float, youngest: float, mean_age: float
) -> float:
    """Seconds until the ``position``-th coming opening of ``slots`` busy slots.

    Each call holds its slot ``hold`` seconds, so a call in flight ends ``hold`` after it started
    (at once if it is overdue) and its slot's next call ``hold`` later. The ages of the calls in
    flight are taken as spread evenly from ``youngest`` to ``2 * mean_age - youngest``: slots
    that have been serving a queue are staggered and one opens every ``hold / slots`` (the
    position-th opening comes at ``position * hold / slots``), while calls that all started
    together end together (a burst drains in whole rounds). Time passing without an opening
    then reads as what it is: the calls in flight are nearer their end, not late, until they
    outlive ``hold``.
    """
    rounds, nth = divmod(position - 1, slots)
    age = mean_age
    if slots > 1:
        spread = 2.0 * (mean_age - youngest)  # oldest - youngest
        if spread > 0.0:
            age = youngest + spread * (1.0 - nth / (slots - 1))
    rest = hold - age
    return (rest if rest > 0.0 else 0.0) + rounds * hold
