"""GradientLimit's probe with plain numbers (issue 41): a probe first holds the slots the tool
appears to serve in parallel, and cuts to the quiet bound only under a standing load, so a burst
at a FIFO pool (no call overtakes another: the quiet bound is one slot) is not served one call
at a time while it drains."""

from __future__ import annotations

import math

import pytest

from fusion_guard.admission._adaptive import GradientLimit
from fusion_guard.admission._adaptive_probe import Probe
from fusion_guard.admission._adaptive_tuning import (
    FIRST_PROBE_CALLS,
    FIRST_PROBE_SAMPLES,
    FIRST_SAMPLES,
    PROBE_GRACE_CALLS,
    SLOW_WINDOW_SAMPLES,
)

SERVICE = 0.050


def _saturate(limit: GradientLimit, workers: int, calls: int, now: float) -> float:
    """``calls`` calls at a FIFO tool of ``workers`` workers always offered more than the limit:
    each starts with the limit in flight and waits behind the ones admitted before it."""
    for _ in range(calls):
        inflight = limit.limit
        limit.on_sample(now, SERVICE * max(1.0, inflight / workers), inflight, False)
        now += SERVICE / min(inflight, workers)
    return now


def test_a_fresh_limits_first_probe_holds_its_parallelism_before_the_quiet_bound() -> None:
    limit = GradientLimit()  # 4 slots; parallelism 2 until measured (4 / tolerance 2)
    limit.on_sample(0.0, SERVICE, 1, False)
    now = 0.1
    for _ in range(FIRST_PROBE_CALLS):  # a burst: crowded calls, none overtaking another
        limit.on_sample(now, 1.8 * SERVICE, 3, False)
        now += SERVICE / 2
    # Before: one slot at once (the quiet bound), and a 2-worker pool served a draining burst
    # one call at a time (1.34x the ideal drain).
    assert limit.limit == 2
    now += 2 * SERVICE  # the calls admitted before the probe have ended
    for _ in range(PROBE_GRACE_CALLS - 1):
        limit.on_sample(now, SERVICE, 2, False)
        now += SERVICE / 2
    assert limit.limit == 2
    limit.on_sample(now, SERVICE, 2, False)  # crowded calls still come: a standing load
    assert limit.limit == 1  # room for quiet calls
    now += SERVICE
    limit.on_sample(now, SERVICE, 1, False)
    # A second call alone: the grace's calls at 2 took as long as those (LEVEL_SAMPLES of them
    # against LEVEL_REFERENCE alone), so the pool queued none of them, and the probe holds 2.
    assert limit.limit == 2
    for _ in range(FIRST_PROBE_SAMPLES - 3):  # (the first call, and one of the grace's, count)
        now += SERVICE
        limit.on_sample(now, SERVICE, 1, False)
    assert limit.limit == 2
    now += SERVICE
    limit.on_sample(now, SERVICE, 1, False)
    assert limit.baseline == pytest.approx(SERVICE)
    assert limit.limit == 4  # measured: back to the limit held before the probe


@pytest.mark.parametrize("service", [SERVICE, 0.2])
def test_the_first_probe_waits_for_fewer_quiet_calls_than_a_warm_up_without_one(
    service: float,
) -> None:
    # One slot under a standing load is what the probe costs: a fresh guard at half the load of
    # an 8-connection pool (4 calls in flight) shed 1-5 % of its first 20 s waiting for
    # FIRST_SAMPLES quiet calls there. A tool slower than the window waits for calls amounting
    # to FIRST_PROBE_SAMPLES windows of service (8 calls of 0.2 s), not FIRST_SAMPLES (15).
    assert FIRST_PROBE_SAMPLES < FIRST_SAMPLES
    limit = GradientLimit()
    now = 0.0
    for _ in range(FIRST_PROBE_CALLS):  # crowded from the start
        limit.on_sample(now, service, 4, False)
        now += service / 4
    now += service  # the calls admitted before the probe have ended
    for _ in range(PROBE_GRACE_CALLS):  # the grace, under a standing load
        limit.on_sample(now, 2 * service, 2, False)
        now += service
    assert limit.limit == 1
    quiet = 0
    while limit.limit == 1:
        limit.on_sample(now, service, 1, False)
        now += service
        quiet += 1
    expected = FIRST_PROBE_SAMPLES
    if service > limit.window:
        expected = max(SLOW_WINDOW_SAMPLES, math.ceil(FIRST_PROBE_SAMPLES * limit.window / service))
    assert quiet == expected
    assert limit.baseline == pytest.approx(service)


def test_a_probe_that_quiet_calls_end_within_its_grace_never_cuts_to_the_quiet_bound() -> None:
    limit = GradientLimit()
    for n in range(FIRST_PROBE_CALLS):
        limit.on_sample(n * 0.01, 1.8 * SERVICE, 3, False)
    assert limit.limit == 2
    for _ in range(2 * PROBE_GRACE_CALLS):  # calls admitted before the probe: no grace spent
        limit.on_sample(0.0, 1.0, 4, False)
    assert limit.limit == 2
    for n in range(FIRST_SAMPLES):  # the burst is over: the calls come one at a time
        limit.on_sample(1.0 + n * SERVICE, SERVICE, 1, False)
        assert limit.limit in (2, 4)
    assert limit.limit == 4
    assert limit.baseline == pytest.approx(SERVICE)


def test_a_probe_with_the_quiet_bound_at_the_parallelism_has_no_grace() -> None:
    limit = GradientLimit()
    for n in range(FIRST_PROBE_CALLS):  # the tool seen serving 2 at once: the quiet bound
        limit.on_sample(n * 0.01, 1.8 * SERVICE, 3, False, overtook=1)
    assert limit.limit == 2  # the quiet bound: the probe as before
    for n in range(2 * PROBE_GRACE_CALLS):  # crowded calls do not cut it
        limit.on_sample(1.0 + n * 0.01, 1.8 * SERVICE, 3, False, overtook=1)
    assert limit.limit == 2


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_under_a_standing_load_the_probe_still_measures_the_uncrowded_latency(
    workers: int,
) -> None:
    # A probe held at the parallelism under a load that never eases would never see a quiet
    # call: the grace ends, and the quiet bound lets them come.
    limit = GradientLimit()
    _saturate(limit, workers, 2000, 0.0)
    assert limit.baseline == pytest.approx(SERVICE)
    assert workers <= limit.limit <= limit.tolerance * workers + 1


@pytest.mark.parametrize(("spread", "needed"), [(1.2, FIRST_PROBE_SAMPLES), (2.0, FIRST_SAMPLES)])
def test_a_warm_up_of_steady_quiet_calls_is_measured_on_fewer_of_them(
    spread: float, needed: int
) -> None:
    # Quiet calls within LEVEL_SPREAD of one another tell a steady tool's median in 15 as well
    # as in 30 (an 8-connection pool of log-normal sigma 0.1 at half its load, seed 13 of
    # ``benchmarks/error_sim.py``: 1.1 s to gather 30 at 3 slots in force); a spread (heavy-
    # tailed) warm-up still waits for FIRST_SAMPLES.
    probe = Probe()
    now = 0.0
    for call in range(FIRST_SAMPLES):
        duration = SERVICE * (spread if call % 2 else 1.0)
        calm = probe.observe(1, duration, True)
        step = probe.step(now, duration, calm, 10, SERVICE, 0.1)
        now += duration
        if step == "done":
            break
    assert probe.measured
    assert call + 1 == needed
