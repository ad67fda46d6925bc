"""The tool zoo (``fusion_guard.demo._zoo``, docs/zoo.md) as regression tests of issue 41's
targets, on fixed seeds in virtual time, a few cells each; and tests of the harness itself.

A target today's guard misses is kept, marked ``xfail(strict=True)`` with what it measured: when
a change meets it the test XPASSes, fails as strict, and the mark comes off. Each test runs only
the policies its target compares (the others cost CPU and change no figure: each policy has its
own tool, fed the same calls). The real-time spot checks at the end (``alone``) run a few cells
on the real clock and compare them with the same cells in virtual time.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from fusion_guard.demo._virtual_time import run_in_virtual_time
from fusion_guard.demo._zoo import (
    ERRORS_LOAD,
    ERRORS_MODEL,
    ERRORS_SHARE,
    TIGHT_LOAD,
    TIGHT_MODEL,
    CellResult,
    cold_burst,
    run_cell,
    run_drop,
    run_outage,
)
from fusion_guard.demo._zoo_models import ZooModel, model_named
from fusion_guard.demo._zoo_report import (
    BUSY_OF_EXCESS,
    COLD_X,
    ERRORS_GOODPUT,
    ERRORS_SHED,
    FAIL_FAST_NAMED,
    FAIL_FAST_UNNAMED,
    FIXED_SHARE,
    FOLLOW_S,
    ORACLE_SHARE,
    OVERLOAD_NAMED,
    OVERLOAD_UNNAMED,
    PROBES_PER_S,
    RECOVERY_S,
    SHED_AT,
    WARM_X,
)

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).parent))
from light_load_shed import RULES as REFUSAL_RULES
from light_load_shed import queue_alone, replay
from virtual_time import run_virtual

T = TypeVar("T")
SEED = 1
#: Of the calls sent, what predictive shedding may refuse beyond what the queue itself would.
HONEST_MARGIN = 0.005


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    # Every overload error is logged with its traceback: thousands of them here.
    logger = logging.getLogger("fusion_guard")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def _virtual(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return run_in_virtual_time(fn)


@functools.cache
def cell(model: str, load: float, policies: tuple[str, ...], seed: int = SEED) -> CellResult:
    return _virtual(functools.partial(run_cell, model_named(model), load, seed, policies))


# --- the harness -------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_oracle_at_half_load_serves_every_call_within_the_slo(backend: str) -> None:
    model = model_named("db_pool")
    result = run_virtual(functools.partial(run_cell, model, 0.5, SEED, ("oracle",)), backend)
    oracle = result.policies["oracle"]
    assert oracle is not None
    assert (oracle.shed, oracle.timeouts, oracle.errors, oracle.overload_errors) == (0, 0, 0, 0)
    assert oracle.p99_ms is not None
    assert oracle.p99_ms < 1000 * model.slo_s
    # Every call answered OK within the SLO: goodput is the offered half, give or take the
    # Poisson draw of ~600 calls.
    assert 0.45 <= oracle.goodput_slo <= 0.55


def test_a_seed_repeats_exactly_and_another_seed_differs() -> None:
    def run(seed: int) -> CellResult:
        model = replace(model_named("fail_fast"), settle_s=1.0, duration_s=3.0)
        return _virtual(functools.partial(run_cell, model, 2.0, seed, ("oracle", "auto")))

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_the_fail_fast_pool_fails_more_the_more_it_is_offered() -> None:
    # The model itself: unguarded, the share of calls refused by the pool grows with the load,
    # and nothing is ever shed (no guard refuses).
    shares = []
    for load in (0.5, 1.5, 4.0):
        figures = cell("fail_fast", load, ("none",)).policies["none"]
        assert figures is not None
        assert figures.shed == 0
        shares.append(figures.overload_errors)
    assert shares == sorted(shares)
    assert shares[0] > 0
    assert shares[-1] > 0.7


def test_every_model_documents_its_capacity_and_true_count() -> None:
    from fusion_guard.demo._zoo_models import MODELS

    assert len(MODELS) >= 9
    for model in MODELS:
        assert model.capacity_rps > 0
        assert model.workers >= 1
        assert model.parameters()
        assert model.__doc__


# --- targets: goodput against the oracle and fixed 10 at 1.5x and 4x ---------------------------


@pytest.mark.parametrize(
    ("model", "load"), [("heavy_tail", 1.5), ("db_pool", 4.0), ("cpu_threads", 4.0)]
)
def test_auto_keeps_the_oracles_goodput(model: str, load: float) -> None:
    result = cell(model, load, ("oracle", "fixed10", "auto"))
    assert result.ratio("auto") >= ORACLE_SHARE  # type: ignore[operator]
    fixed = result.ratio("auto", "fixed10")
    assert fixed is None or fixed >= FIXED_SHARE


@pytest.mark.parametrize("load", [1.5, 4.0])
def test_auto_keeps_the_oracles_goodput_on_a_slow_tool(load: float) -> None:
    result = cell("slow_llm", load, ("oracle", "auto"))
    assert result.ratio("auto") >= ORACLE_SHARE  # type: ignore[operator]


@pytest.mark.parametrize("load", [1.5, 4.0])
@pytest.mark.parametrize("policy", ["auto", "auto_named"])
def test_an_upstream_rate_limit_is_paced_to_fixed_10s_goodput(load: float, policy: str) -> None:
    # A concurrency ceiling held auto at 0.88-0.94x fixed 10 here (admission/_pacing.py).
    result = cell("upstream", load, ("oracle", "fixed10", policy))
    assert result.ratio(policy) >= ORACLE_SHARE  # type: ignore[operator]
    assert result.ratio(policy, "fixed10") >= FIXED_SHARE  # type: ignore[operator]
    figures = result.policies[policy]
    assert figures is not None
    assert figures.busy_of_excess is not None
    assert figures.busy_of_excess >= 0.5  # most of the excess refused, not sent to fail


@pytest.mark.parametrize(
    ("model", "load", "seed"),
    [("upstream_fast", 0.5, 1), ("upstream_fast", 0.8, 1), ("upstream_sliding", 0.8, 3)],
)
def test_a_rate_limited_upstream_at_light_load_is_not_paced_into_shedding(
    model: str, load: float, seed: int
) -> None:
    # Poisson bunches the upstream refused started the pacer at a pace a little above the
    # calls sent, and it shed them (1.2 %, 3.6 %, 3.7 % before: admission/_pacing.py).
    figures = cell(model, load, ("auto",), seed).policies["auto"]
    assert figures is not None
    assert figures.shed <= SHED_AT[load]


def test_the_paced_slots_are_not_held_below_what_the_pace_needs() -> None:
    # 25 calls/s of 200 ms need 6-7 in flight; the gradient limit at 5 held the pace to 0.94x
    # a fixed 10 at 4x (seed 2).
    result = cell("upstream_long", 4.0, ("oracle", "fixed10", "auto"), 2)
    assert result.ratio("auto", "fixed10") >= FIXED_SHARE  # type: ignore[operator]


@pytest.mark.xfail(
    strict=True,
    reason="upstream_tight (a bucket of 1) at 0.8x: auto sheds 7.1 %, seed 1 (the upstream itself"
    " refuses 46 % of the calls a fixed limit admits on arrival; paced, auto serves 1.5x the"
    " oracle's goodput, but sheds: its first pace is measured over unpaced calls the bucket"
    " refused half of, and one slot always stays open, so a call at an idle tool or the last"
    " in flight's successor goes without a token; docs/zoo.md, rate-limited upstreams)",
)
def test_an_upstream_without_burst_at_light_load_sheds_within_bounds() -> None:
    figures = cell("upstream_tight", 0.8, ("auto",)).policies["auto"]
    assert figures is not None
    assert figures.shed <= SHED_AT[0.8]


def test_auto_keeps_the_oracles_goodput_on_a_fail_fast_pool() -> None:
    result = cell("fail_fast", 1.5, ("oracle", "auto"))
    assert result.ratio("auto") >= ORACLE_SHARE  # type: ignore[operator]


# --- targets: no shedding below capacity ------------------------------------------------------


@pytest.mark.parametrize(("model", "load"), [("heavy_tail", 0.8), ("arg_cost", 0.8)])
def test_little_is_shed_below_capacity(model: str, load: float) -> None:
    result = cell(model, load, ("oracle", "auto"))
    for policy in ("oracle", "auto"):
        figures = result.policies[policy]
        assert figures is not None
        assert figures.shed <= SHED_AT[load], policy


@pytest.mark.parametrize("load", [0.5, 0.8])
def test_little_is_shed_below_capacity_on_a_slow_tool(load: float) -> None:
    # Seed 1 at 0.8x shed 2.4 % until a slow tool's calls were quiet with one more in flight
    # than seen served at once and a window that saw every slot so grew the limit by half (the
    # limit reached 8 slots at 41 s, past the 30 s settle; docs/adaptive-tried.md).
    figures = cell("slow_llm", load, ("auto",)).policies["auto"]
    assert figures is not None
    assert figures.shed <= SHED_AT[load]


@pytest.mark.xfail(
    strict=True,
    reason="issue 41: the bimodal cache at 0.8x, seed 1: 3.7 % shed at its true count"
    " (oracle; 43 of 45 refusals a full default queue of 40), 6.7 % under auto (54 standing,"
    " 27 full); with no standing limit at all 3.6 % and 4.4 %, the default queue's count"
    " (docs/concurrency-internals.md, a bimodal tool at 0.8x); none predicted late"
    " (light_load_shed.py --replay cache); a queue that waits at most the model's own SLO"
    " refuses 2.7 % and 2.4 % of the same calls (--replay cache --queue-alone --at-slo)",
)
@pytest.mark.parametrize("policy", ["oracle", "auto"])
def test_little_is_shed_below_capacity_on_a_bimodal_cache(policy: str) -> None:
    figures = cell("cache", 0.8, ("oracle", "auto")).policies[policy]
    assert figures is not None
    assert figures.shed <= SHED_AT[0.8]


@pytest.mark.parametrize("policy", ["oracle", "auto"])
def test_the_bimodal_caches_refusals_at_0_8x_are_no_timeouts_of_its_queue(policy: str) -> None:
    # Issue 41's bar, "no more than the queue would really time out": the same calls through
    # the queue alone (no count, no standing limit, no predictive shedding, queue_timeout 5 s)
    # time out and refuse nothing, so the xfail's refusals are the count's and the standing
    # limit's. Nor does the 1.5 % target hold at the model's own SLO on this seed: a queue that
    # refuses only the calls that waited the whole SLO (served late whatever the guard does)
    # refuses more than that.
    figures = queue_alone("cache", 0.8, policy, SEED)
    assert figures["refused"] > SHED_AT[0.8]  # the cell the xfail above is about
    assert figures["alone_refused"] == figures["alone_timeout"] == 0.0
    at_slo = queue_alone("cache", 0.8, policy, SEED, at_slo=True)
    assert at_slo["alone_refused"] > SHED_AT[0.8]


def test_the_argument_dependent_tools_refusals_at_0_8x_would_have_been_served_in_time() -> None:
    # The argument-dependent tool at 0.8x, seed 5 under auto (at the 1.5 % bound): its queue
    # alone refuses nothing even when it waits at most the model's SLO, and serves within the
    # SLO nearly every call the guard refused (the count's and the standing limit's refusals,
    # docs/concurrency-internals.md).
    at_slo = queue_alone("arg_cost", 0.8, "auto", 5, at_slo=True)
    assert at_slo["refused"] > 0.01
    assert at_slo["alone_refused"] == 0.0
    assert at_slo["refused_in_slo"] >= 0.9 * at_slo["refused"]


def test_predictive_shedding_at_a_short_timeout_is_honest_on_a_bimodal_cache() -> None:
    # Issue 41: with queue_timeout at the model's SLO (0.5 s), the bimodal cache at 0.8x (true
    # count, seed 2). Judged by the moving mean alone, one re-judgement shed 21 tail waiters on
    # a mean hold read at 79 ms (true 31 ms): 2.14 % refused against 0.82 % without predictive
    # shedding. A queue outside overload is judged by the slow mean when lower
    # (``ServiceTimeEstimator.typical``): 0.82 % (docs/concurrency-internals.md).
    slo = model_named("cache").slo_s
    on = replay("cache", 0.8, "oracle", 2, predictive=True, queue_timeout=slo)
    off = replay("cache", 0.8, "oracle", 2, predictive=False, queue_timeout=slo)
    assert _refused(on) <= _refused(off) + HONEST_MARGIN * len(on)


def test_predictive_shedding_is_honest_on_a_tight_queue() -> None:
    result = _virtual(functools.partial(run_cell, TIGHT_MODEL, TIGHT_LOAD, SEED, ("oracle_tight",)))
    figures = result.policies["oracle_tight"]
    assert figures is not None
    assert figures.shed <= SHED_AT[0.8]


def _refused(calls: dict[int, str]) -> int:
    return sum(outcome in REFUSAL_RULES for outcome in calls.values())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_predictive_shedding_refuses_what_the_queue_would_on_a_tight_queue(seed: int) -> None:
    # Issue 41's criterion, call by call: at 0.8x the guard refuses no more than its queue
    # times out or overflows without predictive shedding, plus a small margin. What the tight
    # cell refuses beyond 1.5 % (seeds 2, 3) is the queue's own queue_timeout of 0.15 s.
    on = replay("tight", TIGHT_LOAD, "oracle_tight", seed, predictive=True)
    off = replay("tight", TIGHT_LOAD, "oracle_tight", seed, predictive=False)
    assert on.keys() == off.keys()
    assert _refused(on) <= _refused(off) + HONEST_MARGIN * len(on)


@pytest.mark.parametrize("policy", ["oracle", "auto"])
def test_nothing_is_predicted_late_at_the_defaults_on_a_bimodal_cache(policy: str) -> None:
    # The cache's refusals at 0.8x (the xfail above) are the queue's count and the standing
    # limit, with the default queue_timeout of 5 s: none is predictive shedding's.
    calls = replay("cache", 0.8, policy, SEED, predictive=True)
    assert _refused(calls) > 0  # the cell still refuses: the test looks at something
    assert "predicted" not in calls.values()


# --- targets: a pool that fails fast ------------------------------------------------------------


@pytest.mark.parametrize("load", [2.0, 3.0])
def test_a_fail_fast_pool_is_refused_not_admitted_to_fail(load: float) -> None:
    result = cell("fail_fast", load, ("oracle", "auto"))
    auto = result.policies["auto"]
    assert auto is not None
    assert auto.overload_errors is not None
    assert auto.overload_errors <= OVERLOAD_UNNAMED
    assert auto.busy_of_excess is not None
    assert auto.busy_of_excess >= BUSY_OF_EXCESS
    assert result.ratio("auto") >= FAIL_FAST_UNNAMED  # type: ignore[operator]


@pytest.mark.parametrize("load", [2.0, 3.0])
def test_a_fail_fast_pool_with_its_error_named(load: float) -> None:
    result = cell("fail_fast", load, ("oracle", "auto_named"))
    named = result.policies["auto_named"]
    assert named is not None, "Guard(overload_errors=...) is not available"
    assert named.overload_errors is not None
    assert named.overload_errors <= OVERLOAD_NAMED
    assert named.busy_of_excess is not None
    assert named.busy_of_excess >= BUSY_OF_EXCESS
    assert result.ratio("auto_named") >= FAIL_FAST_NAMED  # type: ignore[operator]


# --- targets: load-independent errors, an outage, a drop, a burst -------------------------------


def test_load_independent_errors_leave_goodput_alone() -> None:
    result = _virtual(
        functools.partial(
            run_cell, ERRORS_MODEL, ERRORS_LOAD, SEED, ("oracle", "auto"), bad_share=ERRORS_SHARE
        )
    )
    auto = result.policies["auto"]
    assert auto is not None
    assert auto.shed <= ERRORS_SHED
    assert auto.errors is not None
    assert 0.15 <= auto.errors <= 0.25
    assert result.ratio("auto") >= ERRORS_GOODPUT  # type: ignore[operator]


def test_an_outage_is_probed_and_recovered_from() -> None:
    outage = _virtual(functools.partial(run_outage, SEED))
    auto = outage.policies["auto"]
    assert auto.probes_min_per_s >= PROBES_PER_S
    assert auto.recovery_s is not None
    assert auto.recovery_s <= RECOVERY_S


@pytest.mark.parametrize("sigma", [0.7, 1.0])
def test_a_capacity_drop_is_followed(sigma: float) -> None:
    drop = _virtual(functools.partial(run_drop, sigma, SEED))
    auto = drop.policies["auto"]
    assert auto.reach_s is not None
    assert auto.reach_s <= FOLLOW_S
    assert drop.ratio() >= ORACLE_SHARE  # type: ignore[operator]
    assert drop.policies["fixed10"].reach_s is None  # the harness sees a limit that stays


@pytest.mark.parametrize("max_active", [None, 2], ids=["default", "max_active=2"])
def test_a_burst_drains_near_the_ideal_time(max_active: int | None) -> None:
    ideal = 30 * 0.05 / 2
    cold = _virtual(functools.partial(cold_burst, max_active, warm=False))
    warm = _virtual(functools.partial(cold_burst, max_active, warm=True))
    assert cold <= COLD_X * ideal
    assert warm <= WARM_X * ideal


# --- real-time spot checks --------------------------------------------------------------------

#: Cells short enough for a few seconds of real time, all three at once: the model's 3 s to
#: settle, 2 s measured (5 s in all). Measured sooner, while auto still climbs from its initial
#: limit, the runs part ways: one decision taken a millisecond apart sends the limit's
#: trajectory elsewhere (db_pool at 1.5x measured from 1.5 s: goodput 0.96 real, 0.69 virtual),
#: and neither predicts the other; from 3 s the figures agree within 0.03.
SPOT_CELLS = [
    ("db_pool", 1.5, "auto"),
    ("fail_fast", 2.0, "auto"),
    ("heavy_tail", 0.8, "oracle"),
]
#: Same seed, so the same arrivals and the same work: the runs differ only by the real loop's
#: lateness (a wake-up ~0.1-1 ms late, against 40 ms services) and what that changes in the
#: guard's decisions. About 200 calls a window: one call is 0.5 % of goodput; a limit that
#: decides one step differently moves goodput by a few per cent. 0.1 of goodput and 0.08 of
#: shed are beyond that and well inside what would mean the virtual run predicts nothing (a
#: fixed 10 against the oracle differs by 0.2-1.0 here).
GOODPUT_TOLERANCE, SHED_TOLERANCE = 0.10, 0.08


def _short(name: str) -> ZooModel:
    return replace(model_named(name), duration_s=2.0)


async def _spot_cells() -> list[CellResult]:
    results: list[CellResult | None] = [None] * len(SPOT_CELLS)

    async def one(index: int, name: str, load: float, policy: str) -> None:
        results[index] = await run_cell(_short(name), load, SEED, (policy,))

    async with anyio.create_task_group() as tg:
        for index, (name, load, policy) in enumerate(SPOT_CELLS):
            tg.start_soon(one, index, name, load, policy)
    return [r for r in results if r is not None]


@pytest.mark.alone
def test_virtual_time_predicts_the_real_guard() -> None:
    real = anyio.run(_spot_cells, backend="asyncio")
    virtual = _virtual(_spot_cells)
    for (name, load, policy), r, v in zip(SPOT_CELLS, real, virtual, strict=True):
        fr, fv = r.policies[policy], v.policies[policy]
        assert fr is not None
        assert fv is not None
        where = f"{name} {load:g}x {policy}: real {fr}, virtual {fv}"
        assert abs(fr.goodput_slo - fv.goodput_slo) <= GOODPUT_TOLERANCE, where
        assert abs(fr.shed - fv.shed) <= SHED_TOLERANCE, where
