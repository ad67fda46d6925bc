"""What an adaptive limit reads off its samples (``GradientLimit``): medians, how long a run of
slow calls must be to say the tool lost capacity (plain functions of the values they are given:
the limit keeps the samples), the uncrowded latency, the most calls seen served at once, and
the calls the tool appears to serve in parallel."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Sequence

from ._adaptive_tuning import (
    DEAD_BAND,
    EARLY_RUN_CHANCE,
    EARLY_SAMPLES,
    OVERTAKING_MEMORY,
    PARALLELISM_WEIGHT,
    QUIET_SAMPLES,
    SLACK_FROM_AT_ONCE,
    SLOW_START,
    SLOW_START_CONFIDENCE,
    UNCROWDED_CONFIDENCE,
)

__all__ = [
    "ParallelismEstimate",
    "QuietBaseline",
    "ServedAtOnce",
    "early_run",
    "median",
    "median_of_sorted",
    "quiet_bound",
    "uncrowded_window",
    "within_noise",
]

# Where the median of QUIET_SAMPLES sorted calls lies (the same place twice for an odd number):
# once that many have come, the baseline is read there without working out the middle.
_MIDDLE_LOW, _MIDDLE_HIGH = (QUIET_SAMPLES - 1) // 2, QUIET_SAMPLES // 2


def median(values: list[float]) -> float:
    """``statistics.median`` of ``values``, sorting them in place (their order is not kept)."""
    values.sort()
    return median_of_sorted(values)


def median_of_sorted(values: list[float]) -> float:
    """``statistics.median`` of a list already sorted, without sorting it again."""
    middle = len(values) // 2
    if len(values) % 2:
        return values[middle]
    return (values[middle - 1] + values[middle]) / 2


def early_run(ordered: list[float], bar: float) -> float:
    """How many calls in a row at the early ``bar`` or more say the tool lost capacity, given
    its quiet calls ``ordered`` (sorted): at least ``EARLY_SAMPLES``, more when they reach the
    bar often enough that a shorter run comes by chance (``EARLY_RUN_CHANCE``); no run at all
    (infinity) when every quiet call reaches it (a bar of 0: calls of no measurable time, as a
    coarse clock reads a fast tool's). Asked only once such a run is ``EARLY_SAMPLES`` long."""
    share = (len(ordered) - bisect_left(ordered, bar)) / len(ordered)
    if share <= 0.0:  # (the bar is above the median: share < 0.5, the log below < 0)
        return EARLY_SAMPLES
    if share >= 1.0:  # (the log below would be 0)
        return math.inf
    return max(EARLY_SAMPLES, math.ceil(math.log(EARLY_RUN_CHANCE) / math.log(share)))


def uncrowded_window(ordered: list[float], latency: float, baseline: float, full: int) -> bool:
    """Whether a window of calls ``ordered`` (sorted), of median ``latency``, at least ``full``
    of them, took no longer than DEAD_BAND x the uncrowded ``baseline`` beyond the noise of its
    median: ``UNCROWDED_CONFIDENCE`` standard errors of it, read off the window's own spread (a
    log-normal median's, from its interquartile ratio), so that a heavy-tailed tool's lucky
    window does not pass for an uncrowded one."""
    bar = DEAD_BAND * baseline
    count = len(ordered)
    if latency > bar or count < full:
        return False
    low, high = ordered[count // 4], ordered[(3 * count) // 4]
    if not low > 0.0:
        return False
    return latency * math.pow(high / low, UNCROWDED_CONFIDENCE / math.sqrt(count)) <= bar


def within_noise(window: Sequence[float], quiet: Sequence[float]) -> bool:
    """Whether a window of calls (sorted) is as fast as the quiet calls (sorted) within the
    noise of both medians: the window's lower bound no higher than the quiet calls' upper
    bound, each ``SLOW_START_CONFIDENCE`` standard errors of a median from its middle, read
    off order statistics (a median of ``n`` calls lies within ``sqrt(n) / 2`` ranks of the
    middle one standard error in two)."""
    if not window or not quiet:
        return False
    low = math.floor((len(window) - 1) / 2 - SLOW_START_CONFIDENCE * math.sqrt(len(window)) / 2)
    high = math.ceil((len(quiet) - 1) / 2 + SLOW_START_CONFIDENCE * math.sqrt(len(quiet)) / 2)
    return window[max(0, low)] <= quiet[min(len(quiet) - 1, high)]


def quiet_bound(
    floor: int, sightings: deque[tuple[int, int]], limit: int, probing: bool, slow: bool = False
) -> int:
    """The most calls in flight at which a call still counts as quiet (uncrowded): ``floor`` (a
    quarter of the limit), or as many as the tool was lately seen serving at once (within the
    ``limit`` outside a probe), since it queues none of those. Also the limit a probe holds.

    For a ``slow`` call (``GradientLimit``: of a tool whose calls outlast ``SIGHTED_WINDOWS``
    windows), one more than seen, once ``SLACK_FROM_AT_ONCE`` or more were seen and that
    reaches the limit: the sighting is a lower bound that at a few slots seldom reaches them
    (``SLACK_FROM_AT_ONCE``)."""
    at_once = sightings[0][1] if sightings else 1  # (``ServedAtOnce.most``, inline: a call less)
    if slow and at_once >= SLACK_FROM_AT_ONCE and at_once + 1 >= limit:
        at_once += 1
    if not probing:
        at_once = min(at_once, limit)
    return max(floor, at_once)


class QuietBaseline:
    """The tool's uncrowded latency (``GradientLimit.baseline``): the median of the last
    ``QUIET_SAMPLES`` quiet calls, kept sorted as they come (a bisection a call, not a sort)."""

    __slots__ = ("_quiet", "ordered")

    def __init__(self) -> None:
        self._quiet: deque[float] = deque(maxlen=QUIET_SAMPLES)  # in the order they came
        self.ordered: list[float] = []  # the same calls, sorted (read, not written: ``early_run``)

    def add(self, duration: float) -> float:
        """One more quiet call, of ``duration`` seconds: the baseline as of it."""
        quiet, ordered = self._quiet, self.ordered
        if len(quiet) == QUIET_SAMPLES:  # the oldest leaves the median too
            del ordered[bisect_left(ordered, quiet[0])]
            quiet.append(duration)
            insort(ordered, duration)
            return (ordered[_MIDDLE_LOW] + ordered[_MIDDLE_HIGH]) / 2
        quiet.append(duration)
        insort(ordered, duration)
        return median_of_sorted(ordered)


class ServedAtOnce:
    """The most calls the tool was seen served at once within the last ``OVERTAKING_MEMORY``
    samples, as a sliding maximum: a call that ends while ``k`` calls admitted before it still
    run shows the tool serving ``k + 1`` at once. The one owner of that figure
    (``GradientLimit.served_at_once``, which ``_feedback.py`` reads too)."""

    __slots__ = ("_samples", "sightings")

    def __init__(self) -> None:
        # (sample number, count), counts falling from the oldest to the newest: the first is the
        # most. Read by ``quiet_bound``, written here only.
        self.sightings: deque[tuple[int, int]] = deque()
        self._samples = 0

    def see(self, overtook: int) -> None:
        """One more sample, whose call ``overtook`` that many calls admitted before it (0: none).
        Only sample numbers of remembered sightings are ever compared, so while none is, a
        sample that overtook none needs not be told (``GradientLimit.on_sample`` skips it)."""
        samples = self._samples = self._samples + 1
        seen = self.sightings
        if overtook > 0:
            at_once = int(overtook) + 1
            while seen and seen[-1][1] <= at_once:
                seen.pop()
            seen.append((samples, at_once))
        if seen and seen[0][0] <= samples - OVERTAKING_MEMORY:
            seen.popleft()

    def most(self, last: int = 0) -> int:
        """The most calls seen served at once (1 when none overtook another), within the ``last``
        samples only when given (0: all those remembered)."""
        seen = self.sightings
        if not last:
            return seen[0][1] if seen else 1
        # Counts fall from the oldest sighting to the newest: the first one since is the most.
        since = self._samples - last + 1
        return next((count for number, count in seen if number >= since), 1)


class ParallelismEstimate:
    """The calls the tool appears to serve in parallel, learnt a window at a time (how, and why:
    ``GradientLimit.parallelism``). ``value`` is read, not written."""

    __slots__ = ("_measured", "_slow", "starting", "value")

    def __init__(self, guess: float) -> None:
        self.value = guess  # until a window measures it
        self._measured = False
        self.starting = True  # a slow tool's slow start (``SLOW_START``): until a window queues
        self._slow = False  # the warm-up's last call outlasted SIGHTED_WINDOWS windows

    def warming(self, slow: bool) -> bool:
        """A call of the warm-up finished: ``slow`` if it outlasted ``SIGHTED_WINDOWS`` windows
        (a slow tool's, for ``read``). True when that may move what ``read`` says (the limit
        must then say it moved: the slots in force rest on the parallelism)."""
        flipped = slow is not self._slow and not self._measured
        self._slow = slow
        return flipped

    def read(self, limit: int) -> float:
        """The estimate, under a ``limit``; until a window measures it, a slow tool's guess is
        the limit less one, so the slots held under overload (the parallelism and one) are the
        limit. The guess, the initial limit over the tolerance, is no measurement: a tool of 8
        workers and 1-5 s calls held to 3 slots of its first 4 at 0.8x took 56 s, not 16 s, to
        gather its first baseline, and shed 18 % (seed 15; its seconds-long overload averages,
        before they spanned its openings, read overload only now and then and hid it)."""
        if self._slow and not self._measured:
            return max(self.value, limit - 1.0)
        return self.value

    def learn(
        self,
        crowd: float,
        baseline: float,
        latency: float,
        slow_room: bool,
        at_once: int,
        window: list[float] | None = None,
        quiet: QuietBaseline | None = None,
    ) -> None:
        """A window closed with ``crowd`` calls in flight on average and a median ``latency``
        against the uncrowded ``baseline``; ``slow_room``: a slow tool's window as fast as
        uncrowded, taken as measured too (it has few windows, and shares of the difference
        never reach the slots in force under overload: its slots stayed below its workers);
        ``at_once``: the most calls seen served at once during it. A slow tool's window gives
        its calls ``window`` (sorted; empty for an early one, slow by definition) and the quiet
        calls ``quiet``, for the slow start: until a window queues beyond the noise of
        both medians (``within_noise``), the tool is read as serving ``SLOW_START`` times the
        calls in flight."""
        if self.starting and window is not None and quiet is not None:
            self.starting = within_noise(window, quiet.ordered)
        if self.starting and window is not None:
            measured = SLOW_START * crowd
        else:
            measured = max(1.0, crowd * min(1.0, baseline / latency))
        if self._measured and measured > self.value and not slow_room:
            self.value += PARALLELISM_WEIGHT * (measured - self.value)
        else:  # the first estimate, a lower one, or a slow tool's with room: taken as measured
            self.value = measured
            self._measured = True
        self.value = max(self.value, float(at_once))
