"""GradientLimit with plain numbers: bounds, bad settings, convergence on a deterministic tool,
recovery after timeouts, and any stream of samples (hypothesis) keeping it in bounds."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fusion_guard import ConfigurationError
from fusion_guard.admission._adaptive import GradientLimit
from fusion_guard.admission._adaptive_tuning import (
    FIRST_PROBE_CALLS,
    FIRST_PROBE_SAMPLES,
    FIRST_SAMPLES,
    OVERTAKING_MEMORY,
    PARALLELISM_WEIGHT,
    PROBE_GRACE_CALLS,
    QUIET_SAMPLES,
    SIGHTED_GROWTH,
    SLACK_FROM_AT_ONCE,
    SLOW_WINDOW_SAMPLES,
)
from fusion_guard.admission._latency_estimates import (
    QuietBaseline,
    ServedAtOnce,
    uncrowded_window,
)
from fusion_guard.admission._overload_ceiling import OverloadCeiling


def _drive(
    limit: GradientLimit, workers: int, seconds: float, now: float = 0.0, service: float = 0.010
) -> float:
    """A tool of ``workers`` workers with ``service``-long calls (10 ms), always offered more
    than the limit: calls beyond the workers wait inside it, so each takes ``service`` x in-flight
    / workers. Returns the simulated time reached."""
    end = now + seconds
    while now < end:
        inflight = limit.limit
        latency = service * max(1.0, inflight / workers)
        for _ in range(inflight):  # one round: every slot's call finishes
            limit.on_sample(now, latency, inflight, False)
        now += latency
    return now


@pytest.mark.parametrize("workers", [1, 2, 8, 30])
def test_the_limit_settles_near_the_tools_true_concurrency(workers: int) -> None:
    limit = GradientLimit()
    _drive(limit, workers, 10.0)
    assert workers <= limit.limit <= limit.tolerance * workers + 1
    assert limit.baseline == pytest.approx(0.010)


@pytest.mark.parametrize("workers", [1, 2, 8, 30])
def test_its_parallelism_is_the_tools_true_concurrency_while_the_limit_runs_above(
    workers: int,
) -> None:
    limit = GradientLimit()
    assert limit.parallelism == 2  # until measured: the initial limit (4) over the tolerance (2)
    _drive(limit, workers, 10.0)
    assert limit.limit >= workers  # the limit keeps headroom above the tool...
    assert limit.parallelism == pytest.approx(workers, rel=0.3)  # ...its estimate does not


def test_one_call_left_over_from_a_higher_limit_does_not_set_its_parallelism() -> None:
    limit = GradientLimit(initial_limit=8, window=0.1, window_samples=20)
    now = 0.0
    for _ in range(FIRST_SAMPLES):  # the first quiet calls measure the uncrowded latency
        limit.on_sample(now, 0.010, 1, False)
        now += 0.010
    # A window of calls the tool serves one at a time, but for one that started among 8.
    limit.on_sample(now, 0.010, 8, False)
    for _ in range(19):
        now += 0.010
        limit.on_sample(now, 0.010, 1, False)
    assert limit.parallelism == pytest.approx((8 + 19) / 20)  # the window's mean, not its peak


def test_a_new_limit_holds_its_initial_value_until_the_first_quiet_calls_have_come() -> None:
    limit = GradientLimit(initial_limit=8)
    assert limit.limit == 8  # not a quarter of it: a fresh guard's first burst runs at 8
    now = 0.0
    for _ in range(FIRST_PROBE_SAMPLES):  # (steady quiet calls: FIRST_SAMPLES if they spread)
        # Calls four times slower than uncrowded would cut the limit, once a baseline exists.
        limit.on_sample(now, 0.040, 8, False)  # crowded: no baseline from these
        limit.on_sample(now, 0.010, 1, False)  # quiet
        now += 0.010
        assert limit.limit == 8
    assert limit.baseline == pytest.approx(0.010)
    for _ in range(2 * limit.window_samples):  # now measured: slow windows cut it
        limit.on_sample(now, 0.040, 8, False)
        now += 0.010
    assert limit.limit < 8


def test_a_new_limit_that_gets_only_crowded_calls_makes_room_for_quiet_ones() -> None:
    limit = GradientLimit(initial_limit=8)
    for n in range(FIRST_PROBE_CALLS):
        assert limit.limit == 8
        limit.on_sample(n * 0.010, 0.040, 8, False)
    assert limit.limit == 4  # a probe: first the parallelism (a burst may be ending)...
    for n in range(PROBE_GRACE_CALLS):
        limit.on_sample(1.0 + n * 0.010, 0.040, 4, False)  # admitted under the probe
    assert limit.limit == 2  # ...then a quarter of the limit, so that quiet calls can come
    for n in range(FIRST_SAMPLES):
        limit.on_sample(1.0 + n * 0.010, 0.010, 2, False)
    assert limit.baseline == pytest.approx(0.010)
    assert limit.limit == 8  # measured: back to the limit held before the probe


def test_calls_at_no_more_than_the_tool_was_seen_serving_at_once_are_quiet() -> None:
    limit = GradientLimit(initial_limit=8)
    # One call overtook three admitted before it: the tool serves 4 at once, queues none of 4.
    limit.on_sample(0.0, 0.010, 4, False, overtook=3)
    for n in range(FIRST_SAMPLES - 1):
        limit.on_sample(n * 0.010, 0.010, 4, False)
    assert limit.baseline == pytest.approx(0.010)  # measured from calls among 4, not 2 (8 / 4)


def test_served_at_once_is_the_most_seen_within_the_overtaking_memory() -> None:
    limit = GradientLimit(initial_limit=8)
    assert limit.served_at_once == 1  # none overtook another yet
    limit.on_sample(0.0, 0.010, 4, False, overtook=3)
    limit.on_sample(0.0, 0.010, 4, False, overtook=1)
    assert limit.served_at_once == 4  # the most of the sightings, not the last
    for n in range(OVERTAKING_MEMORY - 1):
        limit.on_sample(n * 0.010, 0.010, 4, False)
    assert limit.served_at_once == 2  # the sighting of 4 forgotten, the later one of 2 held
    limit.on_sample(1.0, 0.010, 4, False)
    assert limit.served_at_once == 1


def test_one_window_of_lucky_calls_moves_its_parallelism_by_a_share() -> None:
    limit = GradientLimit()
    now = _drive(limit, 2, 10.0)
    crowd = limit.limit
    assert crowd > 2
    while not limit.on_sample(now, 0.010 * crowd / 2, crowd, False):  # the window in progress
        now += 0.010 / 2
    before = limit.parallelism
    assert before == pytest.approx(2, rel=0.3)
    # 20 heavy-tailed calls whose median is within the dead band of the uncrowded latency only
    # by luck (their spread says so: their interquartile ratio is 4), one window of them alone.
    lucky = sorted([0.004, 0.010, 0.013, 0.040] * (limit.window_samples // 4))
    median = (lucky[9] + lucky[10]) / 2
    for i, duration in enumerate(lucky[::2] + lucky[1::2]):
        limit.on_sample(now + 0.010 * (i + 1), duration, crowd, False)
    # The window alone reads nearly every call in flight as served in parallel (the standing
    # queue and the default queue would follow): it weighs PARALLELISM_WEIGHT.
    measured = crowd * min(1.0, limit.baseline / median)
    assert measured > before
    assert limit.parallelism == pytest.approx(before + PARALLELISM_WEIGHT * (measured - before))


def test_a_window_of_steady_calls_as_fast_as_uncrowded_sets_its_parallelism_at_once() -> None:
    limit = GradientLimit()
    now = _drive(limit, 2, 10.0)  # a tool of 2 workers, its calls steady (10 ms each)
    crowd = limit.limit
    while not limit.on_sample(now, 0.010 * crowd / 2, crowd, False):  # the window in progress
        now += 0.001
    before = limit.parallelism
    assert before == pytest.approx(2, rel=0.3)
    # The tool gained workers: twenty calls at 6 in flight, each as fast as uncrowded, beyond
    # any noise of theirs, say it served all six at once. Taken as measured, not by a share.
    while not limit.on_sample(now, 0.010, 6, False):
        now += 0.001
    assert limit.parallelism == pytest.approx(6)


def test_its_parallelism_follows_a_tool_that_lost_workers_at_once() -> None:
    limit = GradientLimit()
    now = _drive(limit, 8, 10.0)
    assert limit.parallelism == pytest.approx(8, rel=0.3)
    _drive(limit, 1, 1.0, now)
    # A lower estimate is taken as measured: averaged like a higher one, it read about 2 here,
    # and the standing queue of a one-worker tool would be held twice as long.
    assert limit.parallelism <= 1.5


def test_the_limit_follows_a_change_of_capacity_within_seconds() -> None:
    limit = GradientLimit()
    now = _drive(limit, 8, 10.0)
    assert limit.limit >= 8
    now = _drive(limit, 1, 2.0, now)
    assert limit.limit <= 2  # down from about 16 within 2 s
    _drive(limit, 4, 3.0, now)
    assert 2 <= limit.limit <= 8 + 1


def test_calls_far_past_the_tolerated_latency_bring_it_down_without_waiting_a_full_window() -> None:
    limit = GradientLimit()
    start = _drive(limit, 8, 10.0)
    assert limit.limit >= 8
    now = start
    while limit.limit > 4 and now - start < 2.0:
        now = _drive(limit, 1, 0.05, now)
    # From 8 workers to 1: each window of 5 calls that all took 3x the tolerated latency or
    # more halves the limit: 0.19 s to 4 slots or fewer (full windows of 20 calls: 0.51 s).
    assert now - start <= 0.3


def test_timeouts_halve_it_and_it_recovers() -> None:
    limit = GradientLimit(min_limit=2)
    now = _drive(limit, 8, 10.0)
    for _ in range(20):
        limit.on_sample(now, 50.0, limit.limit, True)
    assert limit.limit == 2
    _drive(limit, 8, 5.0, now + 50.0)
    assert limit.limit >= 8


def test_a_limit_cut_to_one_climbs_without_waiting_for_full_windows_of_calls() -> None:
    # 50 ms calls: at a limit of 1 a full window of 20 calls takes a second, so a limit cut to 1
    # (by a noisy window, here by timeouts) climbed back to 4 slots in about 1.8 s.
    limit = GradientLimit()
    now = _drive(limit, 4, 20.0, service=0.050)
    assert limit.limit >= 4
    while limit.limit > 1:
        limit.on_sample(now, 0.050, limit.limit, True)
    _drive(limit, 4, 1.2, now, service=0.050)
    assert limit.limit >= 4  # 5 calls a slot, 0.25 s a step


def _slow_calls(
    limit: GradientLimit,
    now: float,
    calls: int,
    overtaking_every: int,
    *,
    latency: float = 0.050,
    overtook: int = 1,
) -> tuple[float, int]:
    """Calls of ``latency`` (50 ms: 5x the uncrowded 10 ms, slow but below the early bar, so
    windows close full) at the limit in force, every
    ``overtaking_every``-th one (0: none) ending while ``overtook`` calls admitted before it
    still run. Returns the time reached and the lowest limit on the way."""
    lowest = limit.limit
    for i in range(calls):
        count = overtook if overtaking_every > 0 and i % overtaking_every == 0 else 0
        limit.on_sample(now, latency, limit.limit, False, overtook=count)
        now += latency / limit.limit
        lowest = min(lowest, limit.limit)
    return now, lowest


@pytest.mark.parametrize(("overtaking_every", "floor"), [(0, 1), (10, 2)])
def test_a_tool_seen_serving_two_at_once_is_not_cut_below_two_on_latency(
    overtaking_every: int, floor: int
) -> None:
    limit = GradientLimit()
    now = _drive(limit, 2, 10.0)
    assert limit.limit >= 3
    _, lowest = _slow_calls(limit, now, 200, overtaking_every)
    # Without overtaking the cuts go down to one slot; a tool that keeps showing two calls
    # served at once keeps two, however slow its calls look against the baseline.
    assert lowest == floor


@pytest.mark.parametrize(("overtook", "lowest_expected"), [(0, 1), (4, 5)])
def test_nor_below_the_calls_it_was_seen_serving_at_once(
    overtook: int, lowest_expected: int
) -> None:
    limit = GradientLimit()
    now = _drive(limit, 8, 10.0)
    assert limit.limit >= 8
    # Calls of half a second (50x the uncrowded latency); every fifth ends while 4 admitted
    # before it still run: the tool serves 5 at once.
    _, lowest = _slow_calls(limit, now, 200, 5, latency=0.5, overtook=overtook)
    assert lowest == lowest_expected
    assert limit.parallelism >= lowest_expected  # the standing queue follows it


def test_slow_calls_two_at_a_time_correct_the_baseline_of_a_tool_seen_serving_two() -> None:
    limit = GradientLimit()
    now = _drive(limit, 2, 10.0)
    assert limit.baseline == pytest.approx(0.010)
    now, lowest = _slow_calls(limit, now, 200, 10)
    assert lowest == 2
    # Two calls at once were uncrowded (the tool serves two): their 70 ms joined the 10 ms
    # measured alone, and calls that take 70 ms however many run let the limit grow again.
    assert 0.030 <= limit.baseline <= 0.070
    assert limit.limit > 2


def test_a_slow_window_of_three_at_once_does_not_teach_the_baseline() -> None:
    limit = GradientLimit()
    now = _drive(limit, 2, 10.0)
    while limit.limit > 3:  # windows of 3x-tolerance calls halve the limit quickly
        limit.on_sample(now, 0.070, limit.limit, False, overtook=1)
        now += 0.010
    for _ in range(limit.window_samples):  # a full window, each call started among 3
        limit.on_sample(now, 0.070, 3, False, overtook=1)
        now += 0.010
    assert limit.limit == 2  # cut to two, not below: calls were overtaking
    assert limit.baseline == pytest.approx(0.010)  # three at once may have queued: not learnt


@pytest.mark.parametrize(("overtaking_every", "lowest_expected"), [(0, 1), (3, 2)])
def test_a_tool_that_lost_a_worker_is_cut_at_once_unless_seen_serving_two_since(
    overtaking_every: int, lowest_expected: int
) -> None:
    limit = GradientLimit()
    now = _drive(limit, 2, 10.0)
    limit.on_sample(now, 0.010, limit.limit, False, overtook=1)
    # Then calls take 7x the uncrowded latency, past the early bar: windows close on runs of
    # them. The two seen served at once before the slowdown hold no cut (the tool that lost its
    # second worker is cut to one within OVERTAKING_MEMORY calls; the memory used to hold it at
    # two that long); two seen at once during the slow calls still do.
    _, lowest = _slow_calls(limit, now, OVERTAKING_MEMORY - 1, overtaking_every, latency=0.070)
    assert lowest == lowest_expected


def test_timeouts_halve_it_below_two_even_while_calls_overtake() -> None:
    limit = GradientLimit()
    now = _drive(limit, 2, 10.0)
    for _ in range(4):
        limit.on_sample(now, 1.0, limit.limit, True, overtook=1)
    assert limit.limit == 1


@given(
    st.lists(
        st.tuples(
            st.floats(allow_nan=True, allow_infinity=True),
            st.floats(allow_nan=True, allow_infinity=True),
            st.integers(0, 10_000),
            st.booleans(),
            st.integers(-2, 500),
        ),
        max_size=300,
    ),
    st.integers(1, 5),
    st.integers(5, 50),
)
def test_any_stream_of_samples_keeps_it_a_whole_number_in_bounds(
    samples: list[tuple[float, float, int, bool, int]], low: int, high: int
) -> None:
    limit = GradientLimit(min_limit=low, max_limit=high, initial_limit=low)
    for start, duration, inflight, dropped, overtook in samples:
        limit.on_sample(start, duration, inflight, dropped, overtook=overtook)
        assert isinstance(limit.limit, int)
        assert low <= limit.limit <= high
        assert math.isfinite(limit.parallelism)
        assert limit.parallelism >= 1
    assert not math.isnan(limit.limit)


@given(
    st.lists(
        st.sampled_from([0.0, 0.004, 0.012, 0.03]) | st.floats(0, 5),
        min_size=QUIET_SAMPLES // 2,
        max_size=3 * QUIET_SAMPLES,
    )
)
@example([1.0] * 30 + [0.0] * 30 + [0.5] * 30)  # the oldest leave, not the fastest
@example([0.012] * 40 + [0.004] * 40 + [0.012] * 40)  # one of equals leaves
@example([])
def test_the_uncrowded_latency_is_the_median_of_the_last_quiet_calls(
    durations: list[float],
) -> None:
    limit = GradientLimit()
    for n, duration in enumerate(durations, 1):
        limit.on_sample(n * 0.01, duration, 1, False)  # one call in flight: a quiet one
        expected = statistics.median(durations[max(0, n - QUIET_SAMPLES) : n])
        assert limit.baseline == expected
    if not durations:
        assert math.isnan(limit.baseline)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_limit": 5, "max_limit": 2}, "min_limit \\(5\\) must not exceed max_limit \\(2\\)"),
        ({"min_limit": 0}, "min_limit=0 is invalid: expected an integer >= 1"),
        ({"max_limit": -3}, "max_limit=-3 is invalid: expected an integer >= 1"),
        ({"initial_limit": 300}, "initial_limit \\(300\\) must lie within"),
        ({"min_limit": "automatic"}, "min_limit='automatic' is invalid: expected an integer >= 1"),
        ({"tolerance": 0.5}, "tolerance=0.5 is invalid: expected a finite number >= 1"),
        ({"window": 0}, "window=0 is invalid"),
    ],
)
def test_bad_settings_fail_with_one_line_naming_them(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        GradientLimit(**kwargs)  # type: ignore[arg-type]


def _bimodal(limit: GradientLimit, now: float, calls: int, inflight: int) -> float:
    """``calls`` calls of a lookup tool, one in five an expensive query (150 ms; lookups 5 ms),
    in that order, each started at ``inflight`` in flight. Returns the time reached."""
    for index in range(calls):
        latency = 0.150 if index % 5 == 4 else 0.005
        limit.on_sample(now, latency, inflight, False)
        now += latency / inflight
    return now


def test_a_chance_run_of_a_bimodal_tools_slow_calls_is_no_lost_capacity() -> None:
    # 20 % of the tool's own quiet calls take 30x the median: five of them in a row come by
    # chance (about once in half a minute at 100 calls a second) and must not cut the limit to
    # a quarter as a tool that lost capacity would be (zoo: arg_cost at 0.8x).
    limit = GradientLimit(initial_limit=8)
    now = _bimodal(limit, 0.0, 400, 1)  # quiet: the baseline, and what its calls look like
    now = _bimodal(limit, now, 399, 4)  # (its last call a lookup)
    before = limit.limit
    for _ in range(5):
        limit.on_sample(now, 0.150, 4, False)
        now += 0.150 / 4
    assert limit.limit == before
    # The tool really slowing down: a longer run of such calls still cuts it early.
    for _ in range(10):
        limit.on_sample(now, 0.150, 4, False)
        now += 0.150 / 4
    assert limit.limit < before


def _sighted(limit: GradientLimit, at_once: int, service: float, now: float) -> None:
    """One call of ``service`` seconds that ended while ``at_once - 1`` older ones still ran."""
    limit.on_sample(now, service, limit.limit, False, overtook=at_once - 1)


def test_a_slow_tools_calls_are_quiet_with_one_more_in_flight_than_seen_at_once() -> None:
    # At 4 slots, 3 seen served at once: a slow tool's calls at 4 in flight are quiet (the
    # sighting is a lower bound), a fast tool's are not (they stay crowded: no baseline).
    for service, measured in ((3.0, True), (0.010, False)):
        limit = GradientLimit()  # 4 slots
        _sighted(limit, SLACK_FROM_AT_ONCE, service, 0.0)
        for n in range(1, 10):
            limit.on_sample(n * service, service, 4, False)
        assert (limit.baseline == pytest.approx(service)) is measured


def test_the_quiet_bounds_slack_needs_three_seen_at_once() -> None:
    # A tool of 2 workers at 3 slots queues a third of its calls: 2 at once is not read so.
    limit = GradientLimit(initial_limit=3)
    _sighted(limit, 2, 3.0, 0.0)
    for n in range(1, 10):
        limit.on_sample(n * 3.0, 3.0, 3, False)
    assert math.isnan(limit.baseline)


@pytest.mark.parametrize(("at_once", "grown"), [(4, 6), (3, 4)])
def test_a_slow_tool_seen_serving_every_slot_grows_by_a_share(at_once: int, grown: int) -> None:
    limit = GradientLimit()  # 4 slots
    now = 0.0
    for _ in range(10):  # the first baseline: 3 s
        limit.on_sample(now, 3.0, 1, False)
        now += 3.0
    assert limit.baseline == pytest.approx(3.0)
    # A window at the limit whose median is in the dead band (gradient 2 x 3 / 5 = 1.2): it
    # holds, unless the tool was seen serving all 4 at once (then SIGHTED_GROWTH x 4).
    _sighted(limit, at_once, 5.0, now)
    for _ in range(SLOW_WINDOW_SAMPLES - 1):
        now += 1.0
        limit.on_sample(now, 5.0, 4, False)
    assert limit.limit == grown
    assert grown in (4, round(SIGHTED_GROWTH * 4))


# The parts ``GradientLimit`` keeps its samples in (issue 40), each against a plain model.


@given(
    st.lists(
        st.one_of(st.just(0), st.integers(min_value=0, max_value=12)),
        max_size=3 * OVERTAKING_MEMORY,
    ),
    st.integers(min_value=0, max_value=2 * OVERTAKING_MEMORY),
)
def test_served_at_once_needs_not_be_told_of_samples_while_it_remembers_none(
    overtaking: list[int], last: int
) -> None:
    # ``GradientLimit.on_sample`` tells its record only of samples that overtook a call, or come
    # while it remembers one: it answers as one told of every sample, and as the plain maximum
    # of the sightings within the last OVERTAKING_MEMORY samples.
    every, skipping = ServedAtOnce(), ServedAtOnce()
    for number, overtook in enumerate(overtaking):
        every.see(overtook)
        if overtook > 0 or skipping.sightings:
            skipping.see(overtook)
        recent = overtaking[max(0, number + 1 - OVERTAKING_MEMORY) : number + 1]
        assert every.most() == skipping.most() == max([1] + [k + 1 for k in recent if k > 0])
        if last:
            within = recent[max(0, len(recent) - last) :]
            expected = max([1] + [k + 1 for k in within if k > 0])
            assert every.most(last) == skipping.most(last) == expected


@given(st.lists(st.floats(min_value=0.0, max_value=1e6), min_size=1, max_size=3 * QUIET_SAMPLES))
def test_the_quiet_baseline_is_the_median_of_the_last_quiet_calls(durations: list[float]) -> None:
    quiet = QuietBaseline()
    for count, duration in enumerate(durations, 1):
        last = durations[max(0, count - QUIET_SAMPLES) : count]
        assert quiet.add(duration) == statistics.median(last)
        assert quiet.ordered == sorted(last)


def test_a_call_that_failed_alone_sets_no_ceiling_and_marks_the_tool_down() -> None:
    ceiling = OverloadCeiling(max_limit=50)
    assert ceiling.lower(1.0, 1, 8.0, 0.01) == math.inf
    assert ceiling.down
    assert math.isnan(ceiling.lift(50, 8.0))  # no overload errors before: nothing to go back to
    assert not ceiling.down
    assert ceiling.lower(2.0, 5, 8.0, 0.01) == 4.0  # the estimate before them, 8, is kept
    assert ceiling.lower(2.5, 1, 4.0, 0.01) == math.inf
    assert math.isnan(ceiling.lift(50, 9.0))  # not above the estimate now: nothing to go back to
    assert ceiling.lower(3.0, 5, 8.0, 0.01) == 4.0
    assert ceiling.lower(3.5, 1, 4.0, 0.01) == math.inf
    assert ceiling.lift(50, 4.0) == 8.0
    assert ceiling.allows(49.0, 3.6, 50)  # no ceiling in force any more


def test_a_window_counts_as_uncrowded_only_beyond_the_noise_of_its_median() -> None:
    baseline = 0.010
    steady = sorted([0.0105, 0.0110, 0.0115, 0.0120] * 5)  # median 0.01125, within 1.25x
    assert uncrowded_window(steady, statistics.median(steady), baseline, 20)
    assert not uncrowded_window(steady[:16], statistics.median(steady), baseline, 20)  # not full
    # The same median from heavy-tailed calls (interquartile ratio 4): within the noise of it.
    heavy = sorted([0.004, 0.010, 0.0125, 0.040] * 5)
    assert statistics.median(heavy) == pytest.approx(statistics.median(steady))
    assert not uncrowded_window(heavy, statistics.median(heavy), baseline, 20)
    slow = sorted([0.013, 0.013, 0.014, 0.014] * 5)  # past 1.25x however steady
    assert not uncrowded_window(slow, statistics.median(slow), baseline, 20)


def test_calls_of_no_measurable_time_never_break_the_limit() -> None:
    # A coarse clock (15.6 ms on Windows) reads a fast tool's calls as 0 s: the baseline and
    # the early bar are 0, every call reaches the bar, and no run of them says anything (the
    # run's length was a division by log(1): ZeroDivisionError on the release path).
    limit = GradientLimit()
    now = 1000.0
    for inflight in [1] * 200 + [4] * 400:
        limit.on_sample(now, 0.0, min(inflight, limit.limit), False)
        now += 0.01
    assert limit.min_limit <= limit.limit <= limit.max_limit
